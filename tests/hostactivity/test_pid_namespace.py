"""The drivers report host pids: a ``/proc`` of another PID namespace (allsmi in a container
without ``hostPID: true`` / ``--pid=host``) is never read by them (allsmi/support/pidns.py).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from allsmi.cli.doctor import pid_namespace_line, pid_namespaces
from allsmi.config import parse_config
from allsmi.support.pidns import PROC_PID_INIT_INO, pid_view
from allsmi.hostactivity.sampler import HostActivitySampler
from allsmi.hostactivity.settings import ActivitySettings
from allsmi.schema import DeviceSample, ProcessSample
from allsmi.collection.waiting import WaitingClassifier

from .fakeproc import pid_namespace, stat_line, write_node, write_process

#: A container's own PID namespace (any inode but the initial one's).
OTHER = 4026532571


def _self(proc: Path, inode: int | None) -> Path:
    """``proc/self`` as the kernel makes it: a link to this process's own directory, whose
    ``ns/pid`` names ``inode`` (``None``: a kernel without PID namespaces)."""
    own = proc / "4242"
    own.mkdir(parents=True, exist_ok=True)
    if inode is not None:
        (own / "ns").mkdir(exist_ok=True)
        (own / "ns" / "pid").symlink_to(f"pid:[{inode}]")
    (proc / "self").symlink_to("4242")
    return own


def _unreadable_init(proc: Path) -> None:
    """No readable ``1/ns/pid`` (a reader without ptrace access to pid 1)."""
    (proc / "1").mkdir(parents=True, exist_ok=True)


def test_pid_1_in_the_initial_namespace_is_the_host(tmp_path: Path) -> None:
    pid_namespace(tmp_path)
    view = pid_view(str(tmp_path))
    assert view.host is True and view.problem is None
    assert f"pid:[{PROC_PID_INIT_INO}]" in view.detail


def test_pid_1_in_another_namespace_is_not_and_says_the_fix(tmp_path: Path) -> None:
    pid_namespace(tmp_path, OTHER)
    view = pid_view(str(tmp_path))
    assert view.host is False
    assert view.problem is not None and f"pid:[{OTHER}]" in view.problem
    assert "hostPID: true" in view.problem and "--pid=host" in view.problem


def test_a_tree_without_namespaces_cannot_be_told_and_is_never_taken_for_the_host(
        tmp_path: Path) -> None:
    view = pid_view(str(tmp_path))
    assert view.host is None
    assert view.problem is not None and "cannot be told" in view.problem


@pytest.mark.parametrize("inode, kthread, host", [
    (PROC_PID_INIT_INO, False, True),  # this process in the initial namespace, shown here
    (OTHER, False, False),             # a container's own /proc
    (OTHER, True, True),               # the host's /proc mounted into a container (/host/proc)
])
def test_without_pid_1_this_process_and_kernel_threads_tell(tmp_path: Path, inode: int,
                                                            kthread: bool, host: bool) -> None:
    _unreadable_init(tmp_path)
    _self(tmp_path, inode)
    (tmp_path / "2").mkdir()
    flags = 0x00208040 if kthread else 0x00400100
    (tmp_path / "2" / "stat").write_text(stat_line(2, comm="kthreadd").replace(
        "(kthreadd) S 0 0 0 0 0 0", f"(kthreadd) S 0 0 0 0 0 {flags}"))
    assert pid_view(str(tmp_path)).host is host


def test_a_self_leading_nowhere_is_another_namespace(tmp_path: Path) -> None:
    _unreadable_init(tmp_path)
    (tmp_path / "self").symlink_to("999999")  # this process is not in the tree's namespace
    assert pid_view(str(tmp_path)).host is False


def test_a_kernel_without_pid_namespaces_has_only_the_host_s(tmp_path: Path) -> None:
    _unreadable_init(tmp_path)
    _self(tmp_path, None)
    assert pid_view(str(tmp_path)).host is True


def _sampler(root: Path, clock: list[float]) -> HostActivitySampler:
    return HostActivitySampler(str(root / "proc"), str(root / "sys"), monotonic=lambda: clock[0])


def test_another_namespace_s_processes_are_never_read_and_the_node_still_is(
        tmp_path: Path) -> None:
    """Pid 40 of the tree is some process of the container, not the driver's pid 40."""
    write_node(tmp_path, iowait=0, total=1000)
    pid_namespace(tmp_path / "proc", OTHER)
    write_process(tmp_path, 40, cpu=0, io={"rchar": 0})
    clock = [100.0]
    sampler = _sampler(tmp_path, clock)
    sampler.sample([40])
    clock[0] += 1.0
    write_node(tmp_path, iowait=500, total=2000)
    write_process(tmp_path, 40, cpu=100, io={"rchar": 10**9})
    activity = sampler.sample([40])
    assert activity.processes == {}  # unknown, never another process's figures
    assert activity.node.cpu_iowait_percent == 50.0  # what still works keeps working
    [problem] = [p for p in activity.node.problems if "PID namespace" in p]
    assert f"pid:[{OTHER}]" in problem and "hostPID: true" in problem


def test_the_holders_are_unknown_saying_why_once(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    write_node(tmp_path)
    write_process(tmp_path, 40, state="D", blocked=1)
    os.unlink(tmp_path / "proc" / "1" / "ns" / "pid")  # cannot tell: never assumed the host's
    clock = [100.0]
    step = WaitingClassifier(ActivitySettings(), _sampler(tmp_path, clock))
    dev = DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                       utilization_percent=0.0, processes=(ProcessSample(40, "alice"),))
    with caplog.at_level(logging.WARNING, logger="allsmi.collection.waiting"):
        for _ in range(3):
            (out,) = step.apply([dev])
            clock[0] += 1.0
    assert out.waiting is not None and out.waiting[0].reason == "unknown"
    assert "could not be read" in out.waiting[0].evidence
    said = [r.getMessage() for r in caplog.records if "PID namespace" in r.getMessage()]
    assert len(said) == 1 and "cannot be told" in said[0] and "--pid=host" in said[0]
    assert any("PID namespace" in p for p in step.problems)


def test_doctor_says_it_in_one_line(tmp_path: Path) -> None:
    pid_namespace(tmp_path / "proc", OTHER)
    config = parse_config(f'[attribution]\nproc_root = "{tmp_path / "proc"}"\n')
    waiting = SimpleNamespace(settings=ActivitySettings(),
                              source=_sampler(tmp_path, [0.0]))
    found = pid_namespaces(SimpleNamespace(config=config, simulate=None),
                           SimpleNamespace(waiting=waiting))
    assert [(n["proc_root"], n["host"], n["used_by"]) for n in found] == [
        (str(tmp_path / "proc"), False, ["attribution", "waiting"]),
        ("/proc", pid_view("/proc").host, ["process owners"])]  # the backends' (psutil's)
    line = pid_namespace_line(found[0])
    assert "\n" not in line and line.startswith("[!] pid namespace (attribution and waiting)")
    assert "hostPID: true" in line and "--pid=host" in line
    assert pid_namespaces(SimpleNamespace(config=config, simulate="mixed"),
                          SimpleNamespace(waiting=waiting)) == []


def test_the_waiting_step_reads_processes_where_attribution_does(tmp_path: Path) -> None:
    """``[attribution] proc_root`` (the host's /proc mounted as /host/proc in a container whose
    own /proc is another namespace's) is where the waiting step reads its holders too."""
    from allsmi.attribution import build_attributor
    from allsmi.collection.collector import Collector
    write_node(tmp_path)
    write_process(tmp_path, 40, state="D", blocked=1, io={"rchar": 0, "read_bytes": 0})
    config = parse_config(f'[attribution]\nsources = ["cgroup"]\n'
                          f'proc_root = "{tmp_path / "proc"}"\n')
    collector = Collector([], config, attributor=build_attributor(config))
    try:
        step = collector.waiting
        assert step.source.proc_root == str(tmp_path / "proc")  # type: ignore[attr-defined]
        dev = DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                           utilization_percent=0.0, processes=(ProcessSample(40, "alice"),))
        step.apply([dev])
        (out,) = step.apply([dev])
    finally:
        collector.close()
    assert out.waiting is not None and out.waiting[0].reason == "input", out.waiting
    assert "I/O wait" in out.waiting[0].evidence
    found = pid_namespaces(SimpleNamespace(config=config, simulate=None), collector)
    assert found[0]["proc_root"] == str(tmp_path / "proc")
    assert found[0]["used_by"] == ["attribution", "waiting"]

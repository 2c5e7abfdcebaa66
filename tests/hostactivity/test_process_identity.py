"""Which process a reading is of: one that ends while it is read, a pid reused meanwhile, a
process listed by its threads' ids, a process that cannot be read beside others that can, a
cgroup whose name holds a newline. On fake /proc trees and on real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from allsmi.hostactivity import procfs
from allsmi.hostactivity import sampler as sampler_module
from allsmi.hostactivity.procfs import read_process
from allsmi.hostactivity.sampler import HostActivitySampler
from allsmi.hostactivity.settings import ActivitySettings
from allsmi.schema import DeviceSample, ProcessSample
from allsmi.collection.waiting import WaitingClassifier, classify_holder

from .fakeproc import real_cgroups, write_cgroup, write_node, write_process

LINUX = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _dev(*pids: int) -> DeviceSample:
    """A busy-looking GPU (100 % utilization, 1 % SM active, no links reported) held by ann's
    ``pids``."""
    return DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                        utilization_percent=100.0, compute_active_percent=1.0,
                        compute_active_source="sm_active",
                        processes=tuple(ProcessSample(p, "ann") for p in pids))


def _sampler(root: Path, clock: _Clock | None = None) -> HostActivitySampler:
    return HostActivitySampler(str(root / "proc"), str(root / "sys"),
                               monotonic=clock or _Clock())


def test_a_reused_pid_that_ends_as_it_is_read_again_costs_nobody_else_their_evidence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pid 30 is another process since the last cycle, and that one ends between the first
    reading and the one that replaces it: the sampler used to raise (AttributeError), costing
    every holder of the node its evidence for the cycle."""
    clock = _Clock()
    write_node(tmp_path)
    write_process(tmp_path, 30, start=1000, io={"rchar": 0})
    write_process(tmp_path, 31, start=1000, io={"rchar": 0})
    sampler = _sampler(tmp_path, clock)
    sampler.sample([30, 31])
    clock.now += 2.0
    write_process(tmp_path, 30, start=5000, io={"rchar": 0})  # another process, same pid
    real, calls = sampler_module.read_process, []

    def racing(pid: int, *args: object, **kwargs: object) -> object:
        reading = real(pid, *args, **kwargs)  # type: ignore[arg-type]
        calls.append(pid)
        if calls.count(30) == 1 and pid == 30:
            shutil.rmtree(tmp_path / "proc" / "30")  # it ends before it is read again
        return reading
    monkeypatch.setattr(sampler_module, "read_process", racing)
    activity = sampler.sample([30, 31])
    assert set(activity.processes) == {31}
    assert activity.processes[31].cpu_cores == 0.0


def test_a_process_that_ends_while_it_is_read_is_gone_not_unreadable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its stat read, then it ends (or its pid goes to another process) before its threads and
    io are: nothing is said of it, as of one already gone, instead of a reading with "task
    unreadable" and "io unreadable (No such file or directory)" that made its holder unknown
    for a made-up reason, and was logged as the exporter's own problem."""
    write_process(tmp_path, 40, threads=2, io={"rchar": 1}, tgid=40)
    real = procfs.read_proc_file

    def ending(path: str) -> bytes:
        data = real(path)
        if path.endswith("/40/stat"):
            shutil.rmtree(tmp_path / "proc" / "40", ignore_errors=True)
        return data
    monkeypatch.setattr(procfs, "read_proc_file", ending)
    assert read_process(40, str(tmp_path / "proc")) is None
    monkeypatch.setattr(procfs, "read_proc_file", real)
    write_process(tmp_path, 41, threads=2, io={"rchar": 1}, start=1000, tgid=41)

    def reused(path: str) -> bytes:
        data = real(path)
        if path.endswith("/41/status"):  # it ends; another process takes pid 41, no io yet
            shutil.rmtree(tmp_path / "proc" / "41")
            write_process(tmp_path, 41, start=9000, io=None, tgid=41)
        return data
    monkeypatch.setattr(procfs, "read_proc_file", reused)
    assert read_process(41, str(tmp_path / "proc")) is None
    # a kernel without /proc/PID/io (no task I/O accounting): the process is there, said so
    monkeypatch.setattr(procfs, "read_proc_file", real)
    write_process(tmp_path, 42, io=None, tgid=42)
    r = read_process(42, str(tmp_path / "proc"))
    assert r is not None and r.read_chars is None
    assert any("/proc/42/io unreadable" in p for p in r.problems)


def test_a_process_listed_by_its_pid_and_a_thread_id_is_counted_once(tmp_path: Path) -> None:
    """/proc/TID of a thread gives its whole process's CPU, threads and bytes read: a device
    listing the process and one of its threads used to count it twice (0.6 MB/s read each,
    1.2 MB/s in all: called input, and "2 processes")."""
    clock = _Clock()
    write_node(tmp_path, net={"eth0": (0, 0)})
    for tid in (100, 101):
        write_process(tmp_path, tid, threads=2, io={"rchar": 0}, tgid=100)
    sampler = _sampler(tmp_path, clock)
    sampler.sample([100, 101])
    clock.now += 2.0
    write_node(tmp_path, net={"eth0": (0, 0)})
    for tid in (100, 101):
        write_process(tmp_path, tid, threads=2, io={"rchar": 1_200_000}, tgid=100)
    activity = sampler.sample([100, 101])
    dev = _dev(100, 101)
    r, why = classify_holder(dev, dev.processes or (), activity, ActivitySettings())
    assert r == "nothing" and why.startswith("nothing: 1 process idle"), why
    assert "600 kB/s read" in why
    assert activity.processes[101].tgid == 100 and activity.processes[100].tgid == 100
    # listed twice by the same pid: one process too
    dev = _dev(100, 100)
    r, why = classify_holder(dev, dev.processes or (), activity, ActivitySettings())
    assert why.startswith("nothing: 1 process idle"), why


_THREADED = ("import threading, time, sys\n"
             "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
             "time.sleep(0.2)\n"
             "print(sorted(threading.enumerate(), key=lambda t: t is threading.main_thread())"
             "[0].native_id, flush=True)\n"
             "time.sleep(60)\n")


@LINUX
def test_a_real_process_listed_by_its_pid_and_a_thread_id_is_one_process(tmp_path: Path) -> None:
    write_node(tmp_path, net={"eth0": (1, 1)})  # a quiet node network (this machine's is not ours)
    child = subprocess.Popen([sys.executable, "-c", _THREADED], stdout=subprocess.PIPE, text=True)
    try:
        tid = int(child.stdout.readline())  # type: ignore[union-attr]
        assert tid != child.pid
        sampler = HostActivitySampler(sys_root=str(tmp_path / "sys"),
                                      tree=real_cgroups(tmp_path, child.pid))
        step = WaitingClassifier(ActivitySettings(), sampler)
        dev = _dev(child.pid, tid)
        step.apply([dev])
        time.sleep(0.4)
        (out,) = step.apply([dev])
    finally:
        child.kill()
        child.wait()
    assert out.waiting is not None and len(out.waiting) == 1
    assert out.waiting[0].evidence.startswith("nothing: 1 process idle"), out.waiting[0].evidence


@LINUX
def test_a_holder_one_of_whose_processes_could_not_be_read_is_never_called_idle(
        tmp_path: Path) -> None:
    """Two sleeping processes of one holder; one ends (or is hidden: hidepid, another pid
    namespace) while the device still lists it. What it did is unknown: the other one's quiet
    used to make the holder ``nothing``."""
    write_node(tmp_path, net={"eth0": (1, 1)})
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        tree = real_cgroups(tmp_path, *(s.pid for s in sleepers))
        step = WaitingClassifier(ActivitySettings(),
                                 HostActivitySampler(sys_root=str(tmp_path / "sys"), tree=tree))
        dev = _dev(*(s.pid for s in sleepers))
        step.apply([dev])
        time.sleep(0.3)
        (both,) = step.apply([dev])
        sleepers[1].kill()
        sleepers[1].wait()
        time.sleep(0.3)
        (one,) = step.apply([dev])
    finally:
        for s in sleepers:
            s.kill()
            s.wait()
    assert both.waiting is not None and both.waiting[0].reason == "nothing", both.waiting
    assert one.waiting is not None and one.waiting[0].reason == "unknown"
    assert "1 process of the holder's 2 could not be read" in one.waiting[0].evidence


def test_a_cgroup_name_holding_a_newline_names_no_cgroup(tmp_path: Path) -> None:
    """The kernel writes cgroup names in /proc/PID/cgroup unescaped: one named
    ``a\\n0::/kubepods/victim`` (anyone with a delegated subtree may make it) made the reader
    take the victim's CPU throttling for the process's (``host``, from another's limit)."""
    write_process(tmp_path, 50, io={"rchar": 0},
                  cgroup="0::/user.slice/a\n0::/kubepods/victim\n")
    write_cgroup(tmp_path, "kubepods/victim", "nr_periods 990\nnr_throttled 990\n")
    r = read_process(50, str(tmp_path / "proc"), str(tmp_path / "sys" / "fs" / "cgroup"))
    assert r is not None and r.cgroup is None and r.throttled_periods is None
    for forged in ("4:cpu,cpuacct:/a\n5:cpu:/victim\n0::/\n",  # a controller twice
                   "0::/a\nb\n"):  # not a line the kernel writes
        (tmp_path / "proc" / "50" / "cgroup").write_text(forged)
        r = read_process(50, str(tmp_path / "proc"), str(tmp_path / "sys" / "fs" / "cgroup"))
        assert r is not None and r.cgroup is None, forged
    # what the kernel does write: a hybrid host's hierarchies, each once
    (tmp_path / "proc" / "50" / "cgroup").write_text(
        "9:name=systemd:/\n4:memory:/x\n1:cpu:/\n2:cpuacct:/\n0::/\n")
    write_cgroup(tmp_path, "cpu", "nr_periods 7\nnr_throttled 5\nthrottled_time 5000\n")
    r = read_process(50, str(tmp_path / "proc"), str(tmp_path / "sys" / "fs" / "cgroup"))
    assert r is not None and (r.cpu_periods, r.throttled_periods) == (7, 5)


@LINUX
def test_a_real_command_name_with_spaces_parentheses_and_a_newline(tmp_path: Path) -> None:
    """prctl(PR_SET_NAME) takes any bytes: /proc/PID/stat writes them raw, so the fields are
    counted from the last ')'; /proc/PID/status escapes them, so its Tgid line is found."""
    code = ("import ctypes, time\n"
            "ctypes.CDLL(None).prctl(15, b'a) R (b\\nTgid:\\t1', 0, 0, 0)\n"
            "print('ok', flush=True)\nx = 0\nt = time.time()\n"
            "while time.time() - t < 60: x += 1\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ok"
        assert b"\nTgid:\t1)" in Path(f"/proc/{child.pid}/stat").read_bytes()
        r = read_process(child.pid)
    finally:
        child.kill()
        child.wait()
    assert r is not None and r.tgid == child.pid and r.threads >= 1
    assert r.state in ("R", "S") and r.blocked_threads is not None

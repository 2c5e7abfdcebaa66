"""``allsmi doctor`` says which host signals the waiting classification can read, and why not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from allsmi.hostactivity import probe

from ..conftest import allsmi_exe
from .fakeproc import write_node, write_process


def test_doctor_lists_the_host_signals() -> None:
    out = subprocess.run(allsmi_exe() + ["doctor", "--json"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "ALLSMI_CONFIG": os.devnull})
    assert out.returncode == 0, out.stderr
    signals = json.loads(out.stdout)["host_signals"]
    names = {s["name"]: s for s in signals["signals"]}
    assert signals["enabled"] is True
    assert {"process CPU and threads", "read/write rates", "pressure stall information",
            "InfiniBand/RoCE ports", "cgroup CPU throttling"} <= set(names)
    assert names["process CPU and threads"]["readable"] is True  # this is Linux
    assert all(s["readable"] or s["detail"] for s in signals["signals"])  # each "no" says why
    text = subprocess.run(allsmi_exe() + ["doctor"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ALLSMI_CONFIG": os.devnull}).stdout
    assert "host pressure stall information" in text


def test_missing_signals_say_why(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    write_node(tmp_path, psi_io_usec=None)
    base = write_process(tmp_path, os.getpid(), io={"rchar": 1})
    for tid in (base / "task").iterdir():
        (tid / "stat").unlink()
        tid.rmdir()
    monkeypatch.setattr(probe.os, "geteuid", lambda: 1000)  # an exporter that is not root
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "self" / "status").write_text("CapEff:\t0000000000000000\n")
    found = {s.name: s for s in probe.host_signals(str(tmp_path / "proc"), str(tmp_path / "sys"))}
    assert not found["pressure stall information"].readable
    assert "4.20" in found["pressure stall information"].detail
    assert not found["threads in I/O wait"].readable
    assert not found["read/write rates"].readable and "CAP_SYS_PTRACE" in found["read/write rates"].detail
    assert not found["InfiniBand/RoCE ports"].readable
    # CAP_SYS_PTRACE alone does not open a file that is its owner's only
    (tmp_path / "proc" / "self" / "status").write_text(f"CapEff:\t{1 << 19:016x}\n")
    found = {s.name: s for s in probe.host_signals(str(tmp_path / "proc"), str(tmp_path / "sys"))}
    assert not found["read/write rates"].readable
    assert "not root and without CAP_DAC_READ_SEARCH:" in found["read/write rates"].detail
    (tmp_path / "proc" / "self" / "status").write_text(f"CapEff:\t{1 << 19 | 1 << 2:016x}\n")
    found = {s.name: s for s in probe.host_signals(str(tmp_path / "proc"), str(tmp_path / "sys"))}
    assert found["read/write rates"].readable
    assert "not root, with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH" in found["read/write rates"].detail


#: Docker's default capabilities for a container's root (no CAP_SYS_PTRACE, no
#: CAP_DAC_READ_SEARCH; CAP_DAC_OVERRIDE kept), as its /proc/self/status shows them.
DOCKER_DEFAULT_CAPEFF = 0x00000000A80425FB


def _io_signal(tmp_path: Path, capeff: str | None) -> probe.Signal:
    write_node(tmp_path)
    write_process(tmp_path, os.getpid(), io={"rchar": 1})
    (tmp_path / "proc" / "self").mkdir(exist_ok=True)
    status = tmp_path / "proc" / "self" / "status"
    status.write_text(f"Name:\tallsmi\nCapEff:\t{capeff}\n" if capeff is not None else "Name:\tx\n")
    found = {s.name: s for s in probe.host_signals(str(tmp_path / "proc"), str(tmp_path / "sys"))}
    return found["read/write rates"]


def test_root_without_cap_sys_ptrace_cannot_read_other_users_io(tmp_path: Path,
                                                                monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(probe.os, "geteuid", lambda: 0)
    signal = _io_signal(tmp_path, f"{DOCKER_DEFAULT_CAPEFF:016x}")
    assert not signal.readable
    assert ("running as root without CAP_SYS_PTRACE (a container's default): other users' "
            "processes' read rates are unknown") in signal.detail
    # root with every capability (a host's root)
    signal = _io_signal(tmp_path, "000001ffffffffff")
    assert signal.readable and "running as root, with CAP_SYS_PTRACE" in signal.detail
    # root with CAP_SYS_PTRACE but neither DAC capability
    signal = _io_signal(tmp_path, f"{1 << 19:016x}")
    assert not signal.readable and "root without CAP_DAC_READ_SEARCH" in signal.detail
    # capabilities that cannot be read are not assumed
    signal = _io_signal(tmp_path, None)
    assert not signal.readable and "capabilities unknown" in signal.detail


_PEEK = ("import json, os, sys\n"
         "from allsmi.hostactivity.probe import (effective_capabilities, others_io_access,\n"
         "                                       user_namespace_map)\n"
         "from allsmi.hostactivity.procfs import read_process\n"
         "said = others_io_access(os.geteuid(), effective_capabilities(), user_namespace_map())\n"
         "got = read_process(int(sys.argv[1]))\n"
         "print(json.dumps([said[0], said[1], got.read_chars is not None, got.problems]))\n")


#: A user other than this test's (nobody's uid on most systems; no passwd entry needed).
OTHER_UID = 65534


def _peek_at_another_user(prefix: list[str]) -> "subprocess.CompletedProcess[str]":
    """:data:`_PEEK` run under ``prefix`` (a command that changes this process's powers) at a
    process of another user, which runs while it looks."""
    other = subprocess.Popen(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}",
                              "--clear-groups", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{other.pid}").stat().st_uid != OTHER_UID:  # not yet switched
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return subprocess.run([*prefix, sys.executable, "-c", _PEEK, str(other.pid)],
                              capture_output=True, text=True, timeout=60, check=True)
    finally:
        other.kill()
        other.wait()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to drop capabilities and switch users")
@pytest.mark.parametrize("drop", [
    pytest.param("", id="as-started"),
    pytest.param("-sys_ptrace", id="no-sys-ptrace"),  # a container's root
    pytest.param("-dac_override,-dac_read_search", id="no-dac"),
])
def test_what_doctor_says_is_what_the_kernel_does(drop: str) -> None:
    """This kernel, reading another user's /proc/PID/io as root with capabilities dropped: the
    doctor's answer and the reader's agree with what the kernel allowed."""
    caps = [f"--inh-caps={drop}", f"--bounding-set={drop}"] if drop else []
    out = _peek_at_another_user(["setpriv", *caps])
    said, why, read, problems = json.loads(out.stdout)
    assert said == read, (why, problems)
    if drop:
        assert not read and "without CAP_" in why
        assert any("needs CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH" in p for p in problems)


def test_root_of_a_user_namespace_of_its_own_is_not_said_to_read_other_users_io(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A full capability set inside a user namespace (a rootless container) does not reach the
    host's processes: the uid map says so, and doctor does not claim the rates."""
    monkeypatch.setattr(probe.os, "geteuid", lambda: 0)
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "uid_map").write_text("         0       1000          1\n")
    signal = _io_signal(tmp_path, "000001ffffffffff")
    assert not signal.readable
    assert "in a user namespace of its own (uid map 0 1000 1)" in signal.detail
    # the host's own map is the whole identity: no namespace of its own
    (tmp_path / "proc" / "self" / "uid_map").write_text("         0          0 4294967295\n")
    assert _io_signal(tmp_path, "000001ffffffffff").readable


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"),
                    reason="needs root, setpriv and unshare")
def test_what_doctor_says_in_a_user_namespace_is_what_the_kernel_does() -> None:
    """``unshare --user --map-root-user``: root of a new user namespace, every capability in it;
    the kernel refuses another user's /proc/PID/io outside it, and doctor's answer agrees."""
    probe_run = subprocess.run(["unshare", "--user", "--map-root-user", "true"],
                               capture_output=True, timeout=30)
    if probe_run.returncode != 0:
        pytest.skip(f"user namespaces are not allowed here: {probe_run.stderr!r}")
    out = _peek_at_another_user(["unshare", "--user", "--map-root-user"])
    said, why, read, problems = json.loads(out.stdout)
    assert not read, problems
    assert said == read and "user namespace of its own" in why

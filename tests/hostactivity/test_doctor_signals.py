"""``allsmi doctor`` says which host signals the waiting classification can read, and why not."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

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
    (tmp_path / "proc" / "self" / "status").write_text(f"CapEff:\t{1 << 19:016x}\n")
    found = {s.name: s for s in probe.host_signals(str(tmp_path / "proc"), str(tmp_path / "sys"))}
    assert found["read/write rates"].readable

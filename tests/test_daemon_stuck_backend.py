"""``allsmi serve`` and ``allsmi record`` stopped while a backend is stuck in a vendor call.

systemd (``TimeoutStopSec=30``) and Kubernetes (a 30 s grace period) kill a process that has
not exited in time, losing what it had not written. Two ways a stuck call held the exit up:

* the collector waited out the call's whole ``--timeout`` (up to 600 s) before closing;
* once everything was closed, the interpreter's exit ran the vendor library's exit handler,
  which waits for the call under way (NVML's shutdown): for ever. ``allsmi snapshot`` leaves
  without it (``os._exit``); the daemons did not.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

import pytest

from allsmi.backend_api import Backend, ProbeResult
from allsmi.collection.collector import Collector
from allsmi.schema import DeviceSample

from .pluginsite import plugin_site
from .prometheus_server import free_port

PLUGIN = """\
import atexit, os, threading, time
from allsmi.backend_api import Backend, ProbeResult
from allsmi.schema import DeviceSample

LIBRARY = threading.Lock()  # the vendor library's own lock


@atexit.register
def shutdown():  # the library's exit handler waits for the call under way
    with LIBRARY:
        pass


class Stuck(Backend):
    name = "zzstuck"
    vendor = "zz"
    samples = 0

    def probe(self):
        return ProbeResult(True)

    def open(self):
        pass

    def sample(self):
        where = os.environ["ZZSTUCK_DIR"]
        self.samples += 1
        if self.samples > 3 and os.path.exists(os.path.join(where, "hang")):
            with LIBRARY:
                open(os.path.join(where, "stuck"), "w").close()
                while True:  # never returns, and close() cannot abort it
                    time.sleep(1)
        return [DeviceSample(id="zz:0", vendor="zz", kind="gpu", backend="zzstuck", health="ok",
                             utilization_percent=50.0)]
"""


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"exited {proc.returncode}: {proc.stderr.read()!r}"  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"no {path.name} within {timeout} s"
        time.sleep(0.01)


@pytest.mark.parametrize("command", ["serve", "record"])
def test_a_backend_stuck_for_good_does_not_hold_the_exit(tmp_path: Path, command: str) -> None:
    env, _ = plugin_site(tmp_path, "zzstuck", "[allsmi.backends]\nzzstuck = zzstuck:Stuck\n",
                         {"zzstuck": PLUGIN})
    where = tmp_path / "stuck-state"
    where.mkdir()
    env.update(ALLSMI_CONFIG=os.devnull, ALLSMI_BACKENDS="zzstuck", ZZSTUCK_DIR=str(where))
    ledger = tmp_path / "ledger.db"
    args = ["--ledger", str(ledger), "--interval", "0.2", "--timeout", "1"]
    if command == "serve":
        args += ["--listen", f"127.0.0.1:{free_port()}"]
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", command, *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        proc.stderr.readline()  # started: sampling
        (where / "hang").touch()
        _wait_for(where / "stuck", proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)  # was: never (the exit handler waits for ever)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "zzstuck stuck in a vendor call; exiting without waiting" in text, text
    with sqlite3.connect(ledger) as db:  # what was sampled before is in the ledger
        assert db.execute("SELECT SUM(observed_ms) FROM intervals").fetchone()[0] >= 150  # (a cycle or more)


class _Hung(Backend):
    name = "hung"
    vendor = "zz"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.hung = threading.Event()
        self.release = threading.Event()

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> Sequence[DeviceSample]:
        self.calls += 1
        if self.calls > 1:
            self.hung.set()
            self.release.wait(120)
        return [DeviceSample(id="zz:0", vendor="zz", kind="gpu", backend=self.name, health="ok")]

    def close(self) -> None:
        self.release.set()  # closing aborts the hung call, as a backend's close() does


def test_closing_does_not_wait_out_a_long_timeout_of_a_hung_call() -> None:
    """``--timeout 120``: the cycle in flight waited for the hung call up to 120 s before the
    collector could close its backends (and abort the call); it now waits a few seconds."""
    backend = _Hung()
    collector = Collector([backend], interval_seconds=0.05, timeout_seconds=120.0)
    published: list[object] = []
    collector.subscribe(published.append)
    collector.start()
    try:
        assert collector.wait_for_first(10.0) is not None
        assert backend.hung.wait(10.0)
        started = time.monotonic()
        collector.close()
        took = time.monotonic() - started
    finally:
        backend.release.set()
        collector.close()
    assert took < 15.0, f"closing took {took:.0f} s"
    last = published[-1]
    assert [(b.status, b.message) for b in last.backends] == [  # type: ignore[attr-defined]
        ("timeout", "no answer before the collector closed (still in sample())")]

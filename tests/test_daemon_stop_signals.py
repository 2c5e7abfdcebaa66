"""``allsmi serve`` and ``allsmi record`` stopped by SIGTERM, SIGINT or SIGHUP at any moment.

Kubernetes and systemd send SIGTERM whenever they stop a pod or a unit, start-up included.
A signal while the command was still starting (its ledger being opened, its backends built:
seconds with a slow vendor library) used to kill it with the signal's default action (exit
143, 129) or, for SIGINT, click's ``Aborted!`` (exit 1), where the docs promise a clean stop
and exit 0 (docs/exporter.md "Exit codes", docs/accounting.md). ``allsmi record`` also waited
for its stop an hour at a time: a SIGTERM the kernel handed to another of its threads went
unanswered for up to an hour. And ``nohup allsmi record &`` stopped when its terminal closed:
the SIGHUP it was started ignoring was handled as a stop.

The controlled points: a plug-in backend whose constructor, and a ledger whose opening (a
``sitecustomize`` of the test's), wait until the test lets them go.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from .pluginsite import plugin_site
from .prometheus_server import free_port

PLUGIN = """\
import os, time
from allsmi.backend_api import Backend, ProbeResult


def hold(what):
    # says that start-up reached this point, then waits until the test lets it go
    where = os.environ["ZZHOLD_DIR"]
    open(os.path.join(where, "holding"), "w").close()
    while not os.path.exists(os.path.join(where, "go")):
        time.sleep(0.01)


class Slow(Backend):
    name = "zzhold"
    vendor = "zz"

    def __init__(self, **kw):
        super().__init__(**kw)
        if os.environ.get("ZZHOLD_AT") == "backends":
            hold("backends")

    def probe(self):
        return ProbeResult(True)

    def open(self):
        pass

    def sample(self):
        return []
"""

SITECUSTOMIZE = """\
import os
if os.environ.get("ZZHOLD_AT") == "ledger":
    from allsmi.accounting.ledger import store
    from zzhold import hold
    opened = store.Ledger.__init__

    def held(self, *args, **kwargs):
        hold("ledger")
        opened(self, *args, **kwargs)

    store.Ledger.__init__ = held
"""


def _defaults() -> None:
    """The child's SIGINT and SIGHUP as an interactive shell leaves them (this test process may
    itself run with them ignored, as a background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _command(name: str, tmp_path: Path) -> list[str]:
    ledger = ["--ledger", str(tmp_path / "ledger.db")]
    if name == "serve":
        return ["serve", "--listen", f"127.0.0.1:{free_port()}", *ledger]
    return ["record", *ledger]


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[bytes], what: str,
              timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"exited {proc.returncode} before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.01)


@pytest.mark.parametrize("command", ["serve", "record"])
@pytest.mark.parametrize("point", ["ledger", "backends"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_during_start_up_is_a_clean_stop(tmp_path: Path, command: str, point: str,
                                                       sig: signal.Signals) -> None:
    env, _ = plugin_site(tmp_path, "zzhold", "[allsmi.backends]\nzzhold = zzhold:Slow\n",
                         {"zzhold": PLUGIN, "sitecustomize": SITECUSTOMIZE})
    hold = tmp_path / "hold"
    hold.mkdir()
    env.update(ALLSMI_CONFIG=os.devnull, ALLSMI_BACKENDS="zzhold", ZZHOLD_DIR=str(hold),
               ZZHOLD_AT=point)
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", *_command(command, tmp_path)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_defaults)
    try:
        _wait_for((hold / "holding").exists, proc, f"start-up reaching the {point}")
        proc.send_signal(sig)
        (hold / "go").touch()  # (a command that let start-up go on needs it to go on)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text
    assert f"allsmi: {sig.name} while starting: stopped" in text, text
    assert "Aborted" not in text and "Traceback" not in text, text
    assert out == b""


def _tgkill(pid: int, tid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


def _recording(tmp_path: Path, preexec: Callable[[], None]) -> tuple[subprocess.Popen[bytes], Path]:
    ledger = tmp_path / "ledger.db"
    env = {**os.environ, "ALLSMI_CONFIG": os.devnull, "ALLSMI_SIMULATE_SPEED": "60"}
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", "record", "--simulate", "mixed",
                             "--interval", "0.25", "--ledger", str(ledger)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=preexec)
    return proc, ledger


def _latest(ledger: Path) -> int:
    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT COALESCE(MAX(start), 0) FROM intervals").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_record_stops_on_a_sigterm_the_kernel_hands_to_another_thread(tmp_path: Path) -> None:
    proc, ledger = _recording(tmp_path, _defaults)
    try:
        _wait_for(lambda: _latest(ledger) > 0, proc, "a committed interval")
        threads = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid)
        assert threads, "the recorder runs a collector thread"
        _tgkill(proc.pid, threads[0], signal.SIGTERM)  # the signal goes to that thread alone
        _, err = proc.communicate(timeout=20)  # was: unanswered for up to an hour
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode(errors="replace")


def _hangup_ignored() -> None:
    _defaults()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts it


def test_nohup_record_outlives_the_sighup_it_was_started_ignoring(tmp_path: Path) -> None:
    proc, ledger = _recording(tmp_path, _hangup_ignored)
    try:
        _wait_for(lambda: _latest(ledger) > 0, proc, "a committed interval")
        proc.send_signal(signal.SIGHUP)  # its terminal closed
        then = _latest(ledger)
        # still recording: two more (simulated) minutes committed after the hang-up
        _wait_for(lambda: _latest(ledger) >= then + 120, proc, "recording after SIGHUP")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode(errors="replace")

"""Closing the terminal ends the dashboard within a second, in every view, with keys in flight.

The installed ``allsmi`` runs in a private tmux server; the test sends a burst of keys and
kills the whole tmux server at once (the window closes, as a closed terminal or a dropped SSH
session does), then checks that the process is gone (exited, perhaps not yet reaped) in time.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from allsmi.output import to_json

from ..conftest import allsmi_exe, require_tool
from .fixtures import simulated_snapshots
from .hostile import Handler, Server

pytestmark = pytest.mark.timeout(300)

#: Each view is closed this many times (the defect hit about half the runs).
ROUNDS = 4
KEYS_IN_FLIGHT = ("j", "k", "p", "j", "z", "z", "k", "s", "p", "Down", "Up")


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its reaper has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _child(pid: int) -> int:
    """The only child process of ``pid``."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def _wait_gone(pid: int, timeout: float) -> float | None:
    """Seconds until ``pid`` ended, ``None`` when it still runs after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not _running(pid):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


class Terminal:
    """One tmux server with one window running ``allsmi`` (its pid written to a file)."""

    def __init__(self, tmux: str, tmp: Path, name: str) -> None:
        self.tmux, self.tmp, self.name = tmux, tmp, name
        self.pidfile = tmp / f"{name}.pid"

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.tmux, "-L", self.name, *args], capture_output=True, text=True,
                              timeout=20, check=check)

    def start(self, args: list[str], *, shell: bool = False, rcfile: Path | None = None) -> int:
        inner = f"echo $$ > {shlex.quote(str(self.pidfile))}; exec {shlex.join(allsmi_exe() + args)}"
        if rcfile is not None:  # not exec'd: the wrapper records the exit status
            inner = (f"echo $$ > {shlex.quote(str(self.pidfile))}; {shlex.join(allsmi_exe() + args)}; "
                     f"echo $? > {shlex.quote(str(rcfile))}; sleep 30")
        command = ["sh", "-c", inner]
        env = {**{k: v for k, v in os.environ.items() if k != "NO_COLOR"}, "TERM": "xterm-256color"}
        first = ["bash", "--norc", "--noprofile", "-i"] if shell else command
        subprocess.run([self.tmux, "-L", self.name, "-f", "/dev/null", "new-session", "-d", "-s", "t",
                        "-x", "120", "-y", "40", shlex.join(first)], check=True, timeout=20, env=env)
        if shell:  # an interactive shell in between, as in a terminal emulator or over SSH
            self.run("send-keys", "-t", "t", shlex.join(command), "Enter")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.pidfile.read_text().strip() if self.pidfile.exists() else ""
            if text and "quit" in self.run("capture-pane", "-p", "-t", "t").stdout:
                return int(text) if rcfile is None else _child(int(text))
            time.sleep(0.1)
        raise AssertionError("the dashboard never came up:\n" + self.run("capture-pane", "-p", "-t", "t").stdout)

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "t", *keys)

    def close(self) -> None:
        self.run("kill-server")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    path = require_tool("tmux", "tmux")
    made: list[Terminal] = []

    def make() -> Terminal:
        term = Terminal(path, tmp_path, f"allsmi-close-{os.getpid()}-{time.monotonic_ns()}")
        made.append(term)
        return term

    yield make  # type: ignore[misc]
    for term in made:
        term.close()
        if term.pidfile.exists():
            try:
                pid = int(term.pidfile.read_text().strip())
                if _running(pid):
                    os.kill(pid, signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass


@pytest.fixture(scope="module")
def fake_host() -> Iterator[str]:
    """One node's ``/api/v1/snapshot`` on loopback, answering the same simulated snapshot."""
    body = to_json(simulated_snapshots(1)[0]).encode()
    server = Server(lambda h: Handler.send_body(h, body))
    try:
        yield server.url
    finally:
        server.close()


def _close_with_keys_in_flight(terminal, args: list[str], view_key: str | None, *,  # type: ignore[no-untyped-def]
                               shell: bool = False) -> list[str]:
    failures = []
    for round_ in range(ROUNDS):
        term = terminal()
        pid = term.start(args, shell=shell)
        if view_key:
            term.keys(view_key)
        term.keys(*KEYS_IN_FLIGHT)
        term.close()
        took = _wait_gone(pid, 2.0)
        if took is None:
            failures.append(f"round {round_}: pid {pid} still running 2 s after the terminal closed")
            os.kill(pid, signal.SIGKILL)
    return failures


@pytest.mark.parametrize("view_key", [None, "g", "i"], ids=["devices", "groups", "idle"])
def test_closing_the_terminal_ends_the_node_dashboard_in_every_view(terminal, view_key) -> None:  # type: ignore[no-untyped-def]
    args = ["--simulate", "mixed", "--interval", "0.2"]
    assert _close_with_keys_in_flight(terminal, args, view_key) == []


def test_closing_the_terminal_ends_the_cluster_dashboard(terminal, fake_host: str) -> None:  # type: ignore[no-untyped-def]
    args = ["view", "--hosts", fake_host, "--interval", "0.2"]
    assert _close_with_keys_in_flight(terminal, args, None) == []
    assert _close_with_keys_in_flight(terminal, args, "Enter") == []  # a node's devices


def test_closing_the_terminal_with_a_shell_in_between(terminal) -> None:  # type: ignore[no-untyped-def]
    args = ["--simulate", "mixed", "--interval", "0.2"]
    assert _close_with_keys_in_flight(terminal, args, None, shell=True) == []


def test_sighup_exits_129_and_sigterm_exits_0(terminal, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for signum, expected in ((signal.SIGHUP, 129), (signal.SIGTERM, 0)):
        rcfile = tmp_path / f"rc-{signum}"
        term = terminal()
        pid = term.start(["--simulate", "mixed", "--interval", "0.2"], rcfile=rcfile)
        term.keys(*KEYS_IN_FLIGHT)
        os.kill(pid, signum)
        assert _wait_gone(pid, 2.0) is not None, f"signal {signum}: still running after 2 s"
        deadline = time.monotonic() + 10
        while not rcfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rcfile.read_text().strip() == str(expected), signum

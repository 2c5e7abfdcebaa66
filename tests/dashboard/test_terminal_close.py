"""Closing the terminal ends the dashboard within a second, in every view, with keys in flight.

The installed ``allsmi`` runs in a private tmux server or on a pseudo-terminal of the test; the
test sends a burst of keys and closes the terminal at once, in each of the ways a terminal
goes away (:data:`tests.dashboard.closing.CLOSE_METHODS`: the tmux server, session or window
killed, an interactive shell in between, the pseudo-terminal closed by its emulator), then
checks that every process of the dashboard is gone (exited, perhaps not yet reaped) within
2 s. ``benchmarks/dashboard_hangup.py`` runs the same 20 times in every view.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Iterator

import pytest

from ..conftest import require_tool
from .closing import (CLOSE_METHODS, KEYS_IN_FLIGHT, TmuxTerminal, close_with_keys_in_flight, fake_host,
                      fake_prometheus, make_terminal, view_args, wait_gone)
from .hostile import Server

pytestmark = pytest.mark.timeout(300)

#: The views each closed once per close method (the defect hit about half the runs).
VIEWS = [("node", "devices"), ("node", "groups"), ("node", "idle"), ("node", "processes"),
         ("hosts", "cluster"), ("hosts", "node"), ("prometheus", "cluster"), ("prometheus", "node")]


@pytest.fixture(scope="module")
def fleets() -> Iterator[dict[str, Server]]:
    host, prom = fake_host(), fake_prometheus()
    try:
        yield {"hosts": host, "prometheus": prom}
    finally:
        host.close()
        prom.close()


@pytest.mark.parametrize(("mode", "view"), VIEWS, ids=[f"{m}-{v}" for m, v in VIEWS])
def test_closing_the_terminal_ends_the_dashboard_in_every_view(
        mode: str, view: str, fleets: dict[str, Server], tmp_path: Path) -> None:
    tmux = require_tool("tmux", "tmux")
    args, keys = view_args(mode, view, lambda m: fleets[m].url)
    failures = []
    for method in CLOSE_METHODS:
        term = make_terminal(method, tmux, tmp_path)
        try:
            took, left = close_with_keys_in_flight(term, args, keys, timeout=2.0)
        finally:
            term.cleanup()
        if took is None:
            failures.append(f"{method}: pids {left} still running 2 s after the terminal closed")
    assert failures == []


def test_sighup_exits_129_and_sigterm_exits_0(tmp_path: Path) -> None:
    tmux = require_tool("tmux", "tmux")
    for signum, expected in ((signal.SIGHUP, 129), (signal.SIGTERM, 0)):
        rcfile = tmp_path / f"rc-{signum}"
        term = TmuxTerminal(tmux, tmp_path, f"allsmi-close-{os.getpid()}-{time.monotonic_ns()}")
        try:
            pid = term.start(["--simulate", "mixed", "--interval", "0.2"], rcfile=rcfile)
            term.keys(*KEYS_IN_FLIGHT)
            os.kill(pid, signum)
            assert wait_gone([pid], 2.0) is not None, f"signal {signum}: still running after 2 s"
            deadline = time.monotonic() + 10
            # the shell creates the file, then writes the status: wait for the status
            while not (rcfile.exists() and rcfile.read_text().strip()) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            assert rcfile.read_text().strip() == str(expected), signum
        finally:
            term.cleanup()

"""TerminalGuard on its own: a terminal that hangs up, or cannot be watched, ends the process
with status 129 after the grace, and the reason says which."""

from __future__ import annotations

import os
import signal
import threading
from typing import Iterator

import pytest

from allsmi.dashboard.screen.terminal import HANGUP_EXIT_CODE, TerminalGuard


@pytest.fixture(autouse=True)
def _own_signal_handlers() -> Iterator[None]:
    """A tripped guard keeps its handlers (the process is ending): give the test run its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _guard(fds: tuple[int, ...]) -> tuple[TerminalGuard, list[int], list[int], threading.Event]:
    asked: list[int] = []
    ended: list[int] = []
    done = threading.Event()

    def exit_(code: int) -> None:
        ended.append(code)
        done.set()
    return TerminalGuard(asked.append, fds=fds, hangup_grace=0.05, exit=exit_), asked, ended, done


def test_a_terminal_that_hangs_up_ends_the_process_with_129() -> None:
    read, write = os.pipe()  # the reading side sees a hang-up once the writer is gone
    guard, asked, ended, done = _guard((read,))
    try:
        with guard:
            assert not guard.tripped
            os.close(write)
            assert done.wait(10)
        assert guard.tripped and guard.reason == "terminal hung up"
        assert ended == [HANGUP_EXIT_CODE] and asked and guard.clean_exit_code == HANGUP_EXIT_CODE
    finally:
        os.close(read)


def test_a_closed_terminal_descriptor_ends_the_process_and_says_so() -> None:
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    guard, _, ended, done = _guard((read,))
    with guard:
        assert done.wait(10)
    assert guard.reason == "terminal descriptor closed" and ended == [HANGUP_EXIT_CODE]


def test_a_live_terminal_is_left_alone() -> None:
    read, write = os.pipe()
    guard, asked, ended, done = _guard((read,))
    try:
        with guard:
            assert not done.wait(0.6)  # two poll rounds and then some
        assert not guard.tripped and asked == [] and ended == []
    finally:
        os.close(read)
        os.close(write)

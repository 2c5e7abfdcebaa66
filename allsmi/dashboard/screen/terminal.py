"""Ending with the terminal: the dashboard never outlives the terminal it draws on.

When the terminal goes away (a closed window, a dropped SSH session, a killed
tmux session) the process gets ``SIGHUP``, and its terminal reports a hang-up
(reads see EOF or ``EIO``, writes fail). Textual's shutdown then writes the
escape sequences that restore the screen through a bounded queue whose writer
thread may already have died on that error, and blocks for good.

:class:`TerminalGuard` makes the end bounded whatever the UI threads are
doing: on ``SIGHUP``, or when the terminal reports a hang-up or an error (a
thread polls it), it asks the app to quit and arms a watchdog that ends the
process with :func:`os._exit` after :data:`HANGUP_GRACE_SECONDS`, with
:data:`HANGUP_EXIT_CODE`. ``SIGTERM`` quits the same way with exit code 0, and
:data:`TERM_EXIT_CODE` if the orderly exit has not ended the process within
:data:`TERM_GRACE_SECONDS`. The handlers are plain ``signal`` handlers, not
event-loop ones, so they run even while the event loop is blocked.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from types import FrameType
from typing import Callable, Sequence

#: Exit status when the terminal went away (SIGHUP, EOF or an I/O error on it): 128 + SIGHUP.
HANGUP_EXIT_CODE = 128 + signal.SIGHUP
#: Exit status when SIGTERM's orderly exit did not end the process in time: 128 + SIGTERM.
TERM_EXIT_CODE = 128 + signal.SIGTERM
#: Seconds an orderly exit gets after the terminal went away before the process is ended.
HANGUP_GRACE_SECONDS = 0.8
#: Seconds an orderly exit gets after SIGTERM (the terminal is still there to be restored).
TERM_GRACE_SECONDS = 3.0
#: How long one wait for a hang-up lasts: a hang-up ends it at once, so this only bounds how long
#: the watching thread outlives the guard (it wakes an idle dashboard once in this long).
_POLL_MS = 5000
_BROKEN = select.POLLHUP | select.POLLERR | select.POLLNVAL


class TerminalGuard:
    """Bounded exit on SIGHUP, SIGTERM and a terminal that hangs up; a context manager.

    ``request_quit(signum)`` must be safe to call from a signal handler and from any
    thread (:meth:`allsmi.dashboard.screen.app.DashboardApp.quit_soon` is). ``fds`` are the
    terminal's file descriptors watched for a hang-up.
    """

    def __init__(self, request_quit: Callable[[int], None], *, fds: Sequence[int] = (0, 1),
                 hangup_grace: float = HANGUP_GRACE_SECONDS, term_grace: float = TERM_GRACE_SECONDS,
                 exit: Callable[[int], None] = os._exit) -> None:
        self.request_quit = request_quit
        self.fds = tuple(fds)
        self.hangup_grace = hangup_grace
        self.term_grace = term_grace
        self._exit = exit
        self.code: int | None = None
        """The exit status the process ends with once tripped (0 after a clean SIGTERM exit)."""
        self.reason: str | None = None
        self._tripped = threading.Event()
        self._lock = threading.RLock()  # a second signal may arrive inside the first handler
        self._stop = threading.Event()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "TerminalGuard":
        for signum in (signal.SIGHUP, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)
        threading.Thread(target=self._watch_terminal, daemon=True, name="allsmi-terminal").start()
        return self

    def __exit__(self, *exc: object) -> None:
        # The handlers stay while the process ends after a trip: a second signal must not
        # take the default action halfway through an orderly exit.
        self._stop.set()
        if not self._tripped.is_set():
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)  # type: ignore[arg-type]

    @property
    def tripped(self) -> bool:
        """Whether a signal or a hang-up asked the process to end."""
        return self._tripped.is_set()

    @property
    def clean_exit_code(self) -> int | None:
        """The status for an orderly exit after a trip (0 for SIGTERM), ``None`` if not tripped."""
        if not self._tripped.is_set():
            return None
        return 0 if self.code == TERM_EXIT_CODE else self.code

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGTERM:
            self.trip(signum, TERM_EXIT_CODE, self.term_grace, "SIGTERM")
        else:
            self.trip(signum, HANGUP_EXIT_CODE, self.hangup_grace, "SIGHUP")

    def trip(self, signum: int, code: int, grace: float, reason: str) -> None:
        """Ask the app to quit and end the process with ``code`` after ``grace`` seconds
        whatever it is doing; the first trip wins, except that a hang-up shortens a SIGTERM."""
        with self._lock:
            if self._tripped.is_set() and not (code == HANGUP_EXIT_CODE and self.code != code):
                return
            self.code, self.reason = code, reason
            self._tripped.set()
        threading.Thread(target=self._end_after, args=(grace, code), daemon=True,
                         name="allsmi-exit-watchdog").start()
        try:
            self.request_quit(signum)
        except Exception:  # the app is gone or going: the watchdog ends the process
            pass

    def _end_after(self, grace: float, code: int) -> None:
        deadline = time.monotonic() + grace
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
        self._exit(code)

    def _watch_terminal(self) -> None:
        poller = select.poll()
        for fd in self.fds:
            poller.register(fd, 0)  # hang-up, error and invalid descriptor are always reported
        while not self._stop.is_set() and not self._tripped.is_set():
            try:
                events = poller.poll(_POLL_MS)
            except OSError as exc:
                # Not ignored: without this watch a hang-up that comes without SIGHUP (the
                # dashboard is not the terminal's session leader) would leave it running for
                # good, so a terminal that cannot be watched ends it like one that hung up,
                # and the reason says why (printed by the CLI when a terminal is left).
                self.trip(signal.SIGHUP, HANGUP_EXIT_CODE, self.hangup_grace,
                          f"watching the terminal failed: {exc}")
                return
            if self._stop.is_set():
                return  # the guard has ended: a terminal closing now is nothing to act on
            broken = [mask for _, mask in events if mask & _BROKEN]
            if broken:
                what = ("terminal hung up" if broken[0] & select.POLLHUP else
                        "terminal descriptor closed" if broken[0] & select.POLLNVAL else "terminal error")
                self.trip(signal.SIGHUP, HANGUP_EXIT_CODE, self.hangup_grace, what)
                return


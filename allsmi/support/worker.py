"""One call in flight on one dedicated thread: how backends and attribution sources are isolated.

A :class:`SingleFlight` owns a worker thread, the only thread that ever runs its call. The
caller starts a call and waits for its outcome until a deadline of its own; a call still
running when asked again is not started a second time (no pile-up of threads behind a hung
vendor call), and the caller reports it as still running instead. The collector's
``BackendRunner`` and attribution's ``SourceRunner`` are built on it, so both isolate the
same way.

``inline=True`` runs each call in the caller's thread instead (no worker, no deadline): for
calls that are pure functions of their arguments and cannot hang, such as a simulation
replayed after the fact, where handing every call to a thread costs more than the call.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

#: How often :meth:`SingleFlight.wait` looks at its ``stop`` event, and how long it still waits
#: for the call once that is set (a sample a few seconds long still ends: the last cycle keeps it).
STOP_CHECK_SECONDS = 0.2
STOP_GRACE_SECONDS = 5.0


class SingleFlight(Generic[T]):
    """Runs ``call`` on one daemon thread named ``name``, at most one call at a time.

    ``on_exit`` runs on the worker thread when it stops after :meth:`request_close`.
    With ``inline``, :meth:`start` runs the call itself and there is never a worker thread.
    """

    def __init__(self, name: str, call: Callable[[], T],
                 on_exit: Callable[[], None] | None = None, inline: bool = False) -> None:
        self.name = name
        self.inline = inline
        self._call = call
        self._on_exit = on_exit
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._done = threading.Event()
        self._done.set()
        self._busy_since: float | None = None
        self._outcome: T | None = None
        self.closing = False
        """Set by :meth:`request_close`: no call starts any more."""
        self.thread: threading.Thread | None = None
        """The worker, once the first call started it."""

    def start(self, before: Callable[[], None] | None = None) -> bool:
        """Start one call (``before`` runs first, under the lock: e.g. to hand the call its
        arguments); ``False`` while closing or while the previous call still runs."""
        with self._lock:
            if self.closing or self._busy_since is not None:
                return False
            if before is not None:
                before()
            if self.inline:
                self._outcome = self._call()
                return True
            self._busy_since = time.monotonic()
            self._done.clear()
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, daemon=True, name=self.name)
                self.thread.start()
        self._wake.set()
        return True

    def settle(self, outcome: T) -> bool:
        """Record ``outcome`` as the last call's, for a caller that answered without a call
        (see ``BackendRunner.start_call``); ``False``, recording nothing, while a call runs."""
        with self._lock:
            if self._busy_since is not None:
                return False
            self._outcome = outcome
            return True

    def busy_for(self) -> float | None:
        """Seconds the current call has been running, or ``None`` when idle."""
        since = self._busy_since
        return None if since is None else time.monotonic() - since

    @property
    def last(self) -> T | None:
        """The outcome of the last call that finished."""
        return self._outcome

    def wait(self, deadline: float, stop: threading.Event | None = None,
             stop_grace: float | None = None) -> T | None:
        """The outcome of the call in flight, or ``None`` if it misses ``deadline`` (monotonic).
        Once ``stop`` is set (looked at every :data:`STOP_CHECK_SECONDS`), it is waited for at
        most ``stop_grace`` (:data:`STOP_GRACE_SECONDS`) more: a process told to stop does not
        wait out the whole timeout of a hung call."""
        grace = STOP_GRACE_SECONDS if stop_grace is None else stop_grace
        while True:
            now = time.monotonic()
            if stop is not None and stop.is_set():
                deadline, stop = min(deadline, now + grace), None
            left = max(0.0, deadline - now)
            step = left if stop is None else min(left, STOP_CHECK_SECONDS)
            if self._done.wait(step):
                return self._outcome
            if step >= left:
                return None

    def request_close(self) -> None:
        """Let the worker stop after its current call (returns at once)."""
        with self._lock:
            self.closing = True
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self.closing:
                break
            outcome = self._call()
            with self._lock:
                self._outcome = outcome
                self._busy_since = None
            self._done.set()
        if self._on_exit is not None:
            self._on_exit()

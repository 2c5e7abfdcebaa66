"""Stopping a long-running command (``allsmi serve``, ``allsmi record``) on SIGTERM, SIGINT or
SIGHUP, from the command's first line on.

:class:`StopSignals` is made before anything else the command does. A signal while it starts
(the configuration read, the ledger opened, the backends and the collector built: seconds with
a slow vendor library or plug-in) ends the start-up at once: :class:`StartupStopped` unwinds
it, the command closes what it had built and exits 0, as for a signal that comes later. Never
the signal's default death (exit 143 or 129) or click's ``Aborted!`` (SIGINT's
``KeyboardInterrupt``) for a stop that Kubernetes or systemd may send at any moment.

Once started, a signal only sets :attr:`StopSignals.event`, which :meth:`StopSignals.wait`
watches a second at a time: Python runs signal handlers on the main thread only, and a
signal the kernel hands to another thread (the collector's, a backend's) leaves the main
thread's wait uninterrupted until it times out.

SIGHUP and SIGINT that the command was started ignoring (``nohup``; a background job of a
shell, which ignores SIGINT) stay ignored, as every program that handles them does: ``nohup
allsmi record &`` outlives the terminal.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

#: The signals that stop a long-running command.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Those left ignored when the command was started ignoring them.
KEEP_IGNORED = (signal.SIGINT, signal.SIGHUP)
#: Seconds :meth:`StopSignals.wait` waits at a time before it looks again.
WAKE_SECONDS = 1.0


class StartupStopped(BaseException):
    """A stop signal came while the command was starting (a ``BaseException``, so that no
    ``except Exception`` of the start-up swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StopSignals:
    """SIGTERM, SIGINT and SIGHUP handled from now on (see the module); on the main thread."""

    def __init__(self) -> None:
        self.event = threading.Event()
        """Set by a stop signal (and by whoever else stops the command)."""
        self.signum: int | None = None
        """The first stop signal received."""
        self._starting = True
        self._previous: dict[int, Any] = {}
        for sig in STOP_SIGNALS:
            old = signal.getsignal(sig)
            if sig in KEEP_IGNORED and old == signal.SIG_IGN:
                continue
            self._previous[sig] = signal.signal(sig, self._on_signal)

    @property
    def name(self) -> str:
        """The first stop signal's name (``SIGTERM``), empty before one came."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()
        if self._starting:
            # once only: closing what the start-up built must not be cut short by another
            self._starting = False
            raise StartupStopped(signum)

    def started(self) -> None:
        """The start-up is over (or past what it can leave half-made): a signal only sets
        :attr:`event` from now on."""
        self._starting = False

    def wait(self) -> None:
        """Block until :attr:`event` is set (a second at a time: see the module)."""
        self._starting = False
        while not self.event.wait(WAKE_SECONDS):
            pass

    def restore(self) -> None:
        """Give each signal back the handler it had before."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

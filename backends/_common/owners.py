"""Who runs a host process, and with what command line: one psutil lookup for every backend.

Vendor tools and libraries report a pid (and sometimes a name); the owner and the
command line come from the host. Every backend uses :class:`ProcessOwners` (or the
plain :func:`process_user`) instead of its own psutil code, so that a new vendor gets
the same caching, the same error handling and the same ``None`` for "cannot tell".

psutil is imported on first use, so that loading a backend stays cheap.

The pids come from the drivers, which know processes by their pid in the host's PID namespace:
where this process's ``/proc`` shows another one (a container without ``hostPID: true`` or
``--pid=host``), a pid there is another process or none, so no owner is read at all (``None``),
said once in the log (:mod:`allsmi.support.pidns`; ``allsmi doctor`` says it too).
"""

from __future__ import annotations

import threading
from typing import Callable

from allsmi.support.lazylog import get_logger
from allsmi.support.pidns import PidView, pid_view

log = get_logger(__name__)

UserLookup = Callable[[int], "str | None"]
"""``pid -> user name``; ``None`` when unknown."""


class ProcessOwners:
    """``pid -> (user, command line)``, cached per process start time (pids are reused).

    The command line is the joined argv, or the process name when argv is empty (kernel
    threads, zombies); each part is ``None`` when psutil cannot tell (the process is gone,
    belongs to another user in a hidepid mount, or its uid has no passwd entry), and for
    every pid where ``/proc`` does not show the host's pids (the module's docstring).
    """

    MAX_ENTRIES = 4096

    def __init__(self, proc_root: str = "/proc") -> None:
        self._cache: dict[int, tuple[float, str | None, str | None]] = {}
        self._lock = threading.Lock()
        self.proc_root = proc_root
        self._view: PidView | None = None  # told on first use (the namespace does not change)

    def host_pids(self) -> bool:
        """Whether ``/proc`` shows the host's pids, those the drivers report (told once;
        where it does not, or cannot be told, that is logged once)."""
        view = self._view
        if view is None:
            view = self._view = pid_view(self.proc_root)
            if view.problem:
                log.warning("process owners and command lines not read: %s", view.problem)
        return bool(view.host)

    def __call__(self, pid: int) -> tuple[str | None, str | None]:
        if not self.host_pids():
            return None, None
        import psutil

        try:
            proc = psutil.Process(pid)
            started = proc.create_time()
        except (psutil.Error, OSError, ValueError, OverflowError):
            return None, None
        with self._lock:
            cached = self._cache.get(pid)
        if cached is not None and cached[0] == started:
            return cached[1], cached[2]
        try:
            user: str | None = proc.username()
        except (psutil.Error, OSError, KeyError):  # KeyError: a uid without a passwd entry
            user = None
        try:
            command: str | None = " ".join(proc.cmdline()) or proc.name() or None
        except (psutil.Error, OSError):
            command = None
        with self._lock:
            if len(self._cache) >= self.MAX_ENTRIES:
                self._cache.clear()
            self._cache[pid] = (started, user, command)
        return user, command

    def user(self, pid: int) -> str | None:
        """Only the owner of ``pid``."""
        return self(pid)[0]


_SHARED = ProcessOwners()


def process_user(pid: int) -> str | None:
    """The owner of ``pid`` (shared cache), or ``None``."""
    return _SHARED.user(pid)


def process_owner(pid: int) -> tuple[str | None, str | None]:
    """``(user, command line)`` of ``pid`` (shared cache); ``(None, None)`` when unknown."""
    return _SHARED(pid)

"""The host sample (CPU and memory).

On Linux the two figures are read from ``/proc/stat`` and ``/proc/meminfo`` with
psutil's own formulas (``psutil.cpu_percent`` and ``virtual_memory().available``),
so that a one-shot ``allsmi snapshot`` does not pay for importing psutil; elsewhere,
or where ``/proc`` lacks a field, psutil reads them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from allsmi.schema import HostSample

PROC_STAT = "/proc/stat"
PROC_MEMINFO = "/proc/meminfo"


#: Overrides the kernel's host name: a Kubernetes pod's is the pod's own name, so the
#: DaemonSets of deploy/kubernetes set this to their node's name (the downward API's
#: ``spec.nodeName``), which the ledger, the exports and ``[[rules]] host`` then see.
HOSTNAME_ENV = "ALLSMI_HOSTNAME"


def local_hostname() -> str:
    """The host's name: :data:`HOSTNAME_ENV` where set, else the kernel's node name."""
    override = os.environ.get(HOSTNAME_ENV, "").strip()
    if override:
        return override
    if hasattr(os, "uname"):
        return os.uname().nodename  # what gethostname(2) returns on POSIX
    import socket
    return socket.gethostname()


def _linux_cpu_times() -> list[float] | None:
    """The system-wide jiffies of the first ``/proc/stat`` line (user, nice, system, idle,
    iowait, irq, softirq, steal, guest, guest_nice; older kernels give fewer)."""
    try:
        fields = _proc_head(PROC_STAT).split(b"\n", 1)[0].split()
        if fields[:1] != [b"cpu"] or len(fields) < 5:
            return None
        return [float(v) for v in fields[1:11]]
    except (OSError, ValueError):
        return None


#: Each ``/proc`` file read every cycle, opened once (by its path): ``os.pread`` at offset 0
#: reads it afresh (the kernel makes its text again for a read from the start) with one
#: system call instead of open, read and close and a Python file object each cycle (about a
#: third of the cost of reading the two files, measured).
_PROC_FDS: dict[str, int] = {}
_PROC_FDS_LOCK = threading.Lock()
#: Enough for the lines read: ``/proc/stat``'s first, ``/proc/meminfo``'s first three.
_PROC_HEAD = 4096


def _proc_head(path: str) -> bytes:
    """The first :data:`_PROC_HEAD` bytes of ``path`` as of now (raises ``OSError``)."""
    fd = _PROC_FDS.get(path)
    if fd is None:
        with _PROC_FDS_LOCK:
            fd = _PROC_FDS.get(path)
            if fd is None:
                if len(_PROC_FDS) >= 4:  # paths only change in tests: keep a handful open
                    for old in _PROC_FDS.values():
                        os.close(old)
                    _PROC_FDS.clear()
                fd = _PROC_FDS[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    return os.pread(fd, _PROC_HEAD, 0)


def _busy_percent(before: list[float], after: list[float]) -> float:
    """``psutil.cpu_percent``'s formula on Linux: per-field deltas (never negative); guest
    time is already in user time; idle and iowait are not busy."""
    delta = [max(0.0, b - a) for a, b in zip(before, after)]
    total = sum(delta) - sum(delta[8:10])
    busy = total - delta[3] - (delta[4] if len(delta) > 4 else 0.0)
    return round(busy / total * 100, 1) if total else 0.0


def _linux_memory() -> tuple[int, int] | None:
    """``(total, available)`` bytes from ``/proc/meminfo`` (``MemAvailable``, Linux >= 3.14)."""
    found: dict[bytes, int] = {}
    try:
        for line in _proc_head(PROC_MEMINFO).split(b"\n"):
            key, _, rest = line.partition(b":")
            if key in (b"MemTotal", b"MemAvailable"):
                found[key] = int(rest.split()[0]) * 1024
                if len(found) == 2:
                    return found[b"MemTotal"], found[b"MemAvailable"]
    except (OSError, ValueError, IndexError):
        pass
    return None


class _CpuWindow:
    """CPU busy percent between two readings (``psutil.cpu_percent(interval=None)``)."""

    def __init__(self) -> None:
        self._last: list[float] | None = None
        self._psutil = not sys.platform.startswith("linux")

    def percent(self) -> float | None:
        if not self._psutil:
            now = _linux_cpu_times()
            if now is not None:
                last, self._last = self._last, now
                return None if last is None or len(last) != len(now) else _busy_percent(last, now)
            self._psutil = True
        import psutil
        return float(psutil.cpu_percent(interval=None))


class HostSampler:
    """Reads host CPU and memory. CPU percent is measured between calls.

    Without a measurement window (the first call, unprimed) the CPU value is
    ``None`` (unknown) rather than a made-up 0.
    """

    #: Shorter windows than this give a meaningless CPU figure; report None instead.
    MIN_WINDOW_SECONDS = 0.02

    def __init__(self, hostname: str | None = None) -> None:
        self.hostname = hostname or local_hostname()
        self._primed_at: float | None = None
        self._cpu = _CpuWindow()

    def prime(self) -> None:
        """Start the CPU measurement window now (e.g. at program start)."""
        self._cpu.percent()
        self._primed_at = time.monotonic()

    def sample(self) -> HostSample:
        """One host sample; CPU covers the time since the previous sample or :meth:`prime`."""
        primed_at = self._primed_at
        cpu: float | None = self._cpu.percent()
        now = time.monotonic()
        if primed_at is None or now - primed_at < self.MIN_WINDOW_SECONDS:
            cpu = None
        self._primed_at = now
        total, available = self._memory()
        return HostSample(hostname=self.hostname, cpu_utilization_percent=cpu,
                          memory_used_bytes=int(total - available),
                          memory_total_bytes=int(total))

    @staticmethod
    def _memory() -> tuple[int, int]:
        found = _linux_memory() if sys.platform.startswith("linux") else None
        if found is not None:
            return found
        import psutil
        mem: Any = psutil.virtual_memory()
        return int(mem.total), int(mem.available)

"""The host sample (CPU and memory) from psutil."""

from __future__ import annotations

import socket
import time

import psutil

from allsmi.schema import HostSample


class HostSampler:
    """Reads host CPU and memory. CPU percent is measured between calls.

    Without a measurement window (the first call, unprimed) the CPU value is
    ``None`` (unknown) rather than a made-up 0.
    """

    #: Shorter windows than this give a meaningless CPU figure; report None instead.
    MIN_WINDOW_SECONDS = 0.02

    def __init__(self, hostname: str | None = None) -> None:
        self.hostname = hostname or socket.gethostname()
        self._primed_at: float | None = None

    def prime(self) -> None:
        """Start psutil's CPU measurement window now (e.g. at program start)."""
        psutil.cpu_percent(interval=None)
        self._primed_at = time.monotonic()

    def sample(self) -> HostSample:
        """One host sample; CPU covers the time since the previous sample or :meth:`prime`."""
        primed_at = self._primed_at
        cpu: float | None = psutil.cpu_percent(interval=None)
        now = time.monotonic()
        if primed_at is None or now - primed_at < self.MIN_WINDOW_SECONDS:
            cpu = None
        self._primed_at = now
        mem = psutil.virtual_memory()
        return HostSample(hostname=self.hostname, cpu_utilization_percent=cpu,
                          memory_used_bytes=int(mem.total - mem.available),
                          memory_total_bytes=int(mem.total))


"""Per-process engine activity from amdsmi's accumulated engine-usage counters.

``amdsmi_get_gpu_process_list`` gives each process ``engine_usage.gfx`` and ``.enc``: the
nanoseconds the process has kept the GFX (compute) and encode engines busy since it started.
The difference between two cycles over the time between them (on the monotonic clock) is the
process's share of the interval: ``utilization_percent`` (GFX) and
``encoder_utilization_percent``. A process seen for the first time, a counter that went back
(the pid was reused) or a counter the release reports as "N/A" gives ``None`` for that cycle,
never an invented figure. Shares above 100% (a process on several rings at once) are capped
at 100.
"""

from __future__ import annotations

from typing import Any

from allsmi.backends.amd import convert as conv
from allsmi.backends.amd.calls import mapping


class EngineUsage:
    """The previous counters of each (device, pid), to turn counters into shares."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], tuple[float, int | None, int | None]] = {}
        self._seen: set[tuple[str, int]] = set()

    def shares(self, device: str, pid: int, usage: Any, now: float) -> tuple[float | None,
                                                                              float | None]:
        """``(gfx percent, enc percent)`` of ``pid`` on ``device`` since the previous cycle."""
        row = mapping(usage)
        gfx, enc = conv.counter(row.get("gfx")), conv.counter(row.get("enc"))
        key = (device, pid)
        self._seen.add(key)
        before = self._last.get(key)
        self._last[key] = (now, gfx, enc)
        if before is None:
            return None, None
        then, gfx_before, enc_before = before
        elapsed_ns = (now - then) * 1e9
        if elapsed_ns <= 0:
            return None, None

        def share(new: int | None, old: int | None) -> float | None:
            if new is None or old is None or new < old:
                return None
            return min(100.0, (new - old) / elapsed_ns * 100.0)

        return share(gfx, gfx_before), share(enc, enc_before)

    def end_cycle(self) -> None:
        """Forget the processes not seen in this cycle (they exited)."""
        for key in [k for k in self._last if k not in self._seen]:
            del self._last[key]
        self._seen = set()

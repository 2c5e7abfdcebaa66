"""Per-process engine activity from amdsmi's accumulated engine-usage counters.

``amdsmi_get_gpu_process_list`` gives each process ``engine_usage.gfx`` and ``.enc``: the
nanoseconds the process has kept the GFX (compute) and encode engines busy since it started.
The difference between two cycles over the time between them (on the monotonic clock) is the
process's share of the interval: ``utilization_percent`` (GFX) and
``encoder_utilization_percent``. A process seen for the first time, a counter that went back
or a process name that changed (the pid was reused by another process, whose counter started
from 0 within the interval) or a counter the release reports as "N/A" gives ``None`` for that
cycle, never an invented figure. Shares above 100% (a process on several rings at once) are capped
at 100.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from allsmi.backends.amd import convert as conv
from allsmi.backends.amd.calls import mapping
from allsmi.schema import DeviceSample, ProcessSample


class EngineUsage:
    """The previous counters of each (device, pid), to turn counters into shares."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], tuple[float, int | None, int | None, str | None]] = {}
        self._seen: set[tuple[str, int]] = set()

    def shares(self, device: str, pid: int, usage: Any, now: float,
               name: str | None = None) -> tuple[float | None, float | None]:
        """``(gfx percent, enc percent)`` of ``pid`` on ``device`` since the previous cycle;
        ``name`` (amdsmi's process name) tells a reused pid from the same process."""
        row = mapping(usage)
        gfx, enc = conv.counter(row.get("gfx")), conv.counter(row.get("enc"))
        key = (device, pid)
        self._seen.add(key)
        before = self._last.get(key)
        self._last[key] = (now, gfx, enc, name)
        if before is None:
            return None, None
        then, gfx_before, enc_before, name_before = before
        if name is not None and name_before is not None and name != name_before:
            return None, None  # another process under the same pid: its counter is not a delta
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


def board_processes(children: Sequence[DeviceSample]) -> tuple[ProcessSample, ...] | None:
    """Every process on any partition, its memory summed over the partitions it uses;
    ``None`` when some partition's list is unknown."""
    merged: dict[int, ProcessSample] = {}
    for child in children:
        if child.processes is None:
            return None
        for proc in child.processes:
            seen = merged.get(proc.pid)
            if seen is None:
                merged[proc.pid] = proc
                continue
            memories = [m for m in (seen.memory_bytes, proc.memory_bytes) if m is not None]
            merged[proc.pid] = ProcessSample(pid=proc.pid, user=seen.user, command=seen.command,
                                             memory_bytes=sum(memories) if memories else None)
    # A process's activity on the board: its activity on each partition at the partition's
    # share of the board (equal shares), known only where every partition it uses reports it.
    count = len(children)
    out = []
    for pid, proc in sorted(merged.items()):
        figures = {}
        for name in ("utilization_percent", "encoder_utilization_percent"):
            values = [getattr(p, name) for c in children for p in c.processes or ()
                      if p.pid == pid]
            if values and all(v is not None for v in values):
                figures[name] = sum(values) / count  # type: ignore[arg-type]
        out.append(replace(proc, **figures) if figures else replace(
            proc, utilization_percent=None, encoder_utilization_percent=None))
    return tuple(out)

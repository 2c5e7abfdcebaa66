"""The grids of a simulated bill's replay (:mod:`allsmi.cli.simulate.bill`): when it samples, how its
scratch ledger's rows are cut, and which stretch each chunk replays.

* Samples: every ``step`` seconds from the window's start, and at its end (never past now).
* Rows: on the clock's quarter hours (:data:`ROW_SECONDS`, the ledger's roll-up unit, on which
  every ``--tz`` day starts), cut where the window starts and where it ends, wherever those fall:
  a window from ``10:00:07`` to ``16:00:07`` has 25 rows a device (from 10:00:07, each quarter
  from 10:15 to 15:45, from 16:00 to its end), as many as six aligned hours, not 21,600
  one-second rows. The bill counts the rows that start inside the window: the first row, whose
  quarter starts before the window, holds only what the window's first sample opens and is
  booked at the window's start; the window's end, off the grid, opens no row inside the window
  (see :func:`chunk_tasks`).
* The ledger is declared with the intervals that both edges allow (:func:`declared_interval`, a
  divisor of 900): every row starts on a multiple of it, and the ledger reads each row whole.
* Chunks: cut on the rows' grid, never through a row, whatever the sampling grid. A chunk whose
  edge falls between two samples replays the increment across it too, from the sample before
  its first row to the sample after its last, and keeps only its own rows: that increment is
  split at the edge exactly as one long replay splits it, so the rows, and the totals to the
  millisecond, do not depend on how the window was cut (nor on the number of CPUs).
"""

from __future__ import annotations

import math
from typing import Any

#: The rows' grid: the ledger's roll-up quarter hour (``allsmi.accounting.settings.
#: ROLLUP_SECONDS``, which a test checks), the longest row a bill reads whole.
ROW_SECONDS = 900
#: How many pieces the last chunks are cut into (see :func:`replay_chunks`).
CHUNKS_PER_WORKER = 4

_INF = float("inf")


def declared_interval(start: int, end: int, grid: int = ROW_SECONDS) -> int:
    """The scratch ledger's declared interval for a window from ``start`` to ``end``: the
    longest divisor of ``grid`` that divides both edges (both edges and every row start lie on
    its multiples, so the ledger never counts a share of a row)."""
    return math.gcd(grid, *(int(t) % grid or grid for t in (start, end)))


def replay_chunks(start: float, end: float, step: float, row: int, length: float,
                  tail: int = 0, shortest: float = 0.0) -> list[tuple[float, float]]:
    """``[(first, end)]``: the stretches of ``start..end`` that chunks of about ``length``
    seconds replay, end to end; each edge inside lies on the rows' grid (a multiple of
    ``row``; where ``start`` does, of ``step`` and ``row`` after it: on a sample too). The last
    ``tail`` chunks are each cut again into :data:`CHUNKS_PER_WORKER` of at least ``shortest``
    seconds (see :func:`allsmi.cli.simulate.bill.simulated_ledger`); which samples each chunk
    replays: :func:`chunk_tasks`."""
    unit = math.lcm(int(step), row) if float(step).is_integer() else 0
    if not unit or end - start <= length:
        return [(start, end)]
    size = max(1, round(length / unit)) * unit
    anchor = start - start % row  # (the window's start where it lies on the rows' grid)
    edges = [start] + [anchor + k * size for k in range(1, int((end - anchor) // size) + 1)]
    if edges[-1] < end:
        edges.append(end)
    piece = max(1, round(size / CHUNKS_PER_WORKER / unit)) * unit
    if tail and piece >= shortest and piece < size:
        cut = max(1, len(edges) - 1 - tail)  # (the first chunk is never cut)
        edges[cut:-1] = [e for a in edges[cut:-1] for e in _range(a, min(a + size, end), piece)]
    return list(zip(edges, edges[1:]))


def _range(first: float, last: float, step: float) -> list[float]:
    """``first, first + step, ...`` before ``last``."""
    return [first + k * step for k in range(math.ceil((last - first) / step))]


def chunk_tasks(chunks: list[tuple[float, float]], start: float, end: float, step: float,
                grid: int, window_end: int, final: bool
                ) -> list[tuple[float, float, float, float, bool]]:
    """What each of ``chunks`` (:func:`replay_chunks` of a replay sampled every ``step`` from
    ``start`` to ``end``) replays: ``(first sample, last sample, lowest row, end of rows,
    strip)``. It samples from the last sample at or before its first edge to the first at or
    after its last (capped at ``end``) and keeps the rows (their starts on the ``grid``) from
    its first edge to its last: the first chunk from the window's first row, the last to the
    end, or (unless ``final``: a later replay starts where this one ends and books the row
    that opens there) to its last sample. ``strip`` (the last chunk, whose last sample is the
    window's end off the grid): that sample's own figures (the memory seen then) belong to the
    row the end opens, outside the window, and are not booked in the row before it."""
    tasks = []
    whole = float(step).is_integer()
    for i, (lo, hi) in enumerate(chunks):
        first, last = lo, hi
        if whole and i:
            first = start + (lo - start) // step * step
        if whole and i < len(chunks) - 1:
            last = min(end, start - (start - hi) // step * step)
        keep_lo = -_INF if i == 0 else lo
        keep_hi = hi if i < len(chunks) - 1 else (_INF if final else end)
        strip = i == len(chunks) - 1 and end == window_end and int(end) % grid != 0
        tasks.append((first, last, keep_lo, keep_hi, strip))
    return tasks


def replay_step(configured: Any) -> float:
    """Seconds between two samples of a replay: one cycle per ledger interval, at least 20 s
    apart."""
    return float(max(20, configured.interval_seconds))

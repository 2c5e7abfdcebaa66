"""The order the suite's tests run in under pytest-xdist: the long ones start early, spread
over the workers and staggered in time (conftest.py's ``pytest_collection_modifyitems``).

pytest-xdist's ``worksteal`` scheduler hands each of the N workers a contiguous slice of the
collected tests (the first ``len // N``, then a ``// (N - 1)`` of the rest, and so on) and,
when a worker runs out, moves the tail half of the fullest worker's queue to it. A worker runs
the head of its slice itself: tests collected in one directory (``tests/accounting/``) ran one
after another on one worker, and the longest of them (real-time store windows of a minute or
two) started six minutes into a nine-minute run, so the run ended with one worker on them.

Here the tests marked ``long(seconds)`` (what each takes on a 2-core CI machine, roughly:
only their order matters) are dealt out longest first, each to the slice with the least long
work so far; the other tests keep their collected order and fill the slices up to the sizes
the scheduler cuts. Slice 0 starts with the tests marked ``alone``; every other slice starts
with a short prefix of ordinary tests (:data:`PREFIX`), so that its long tests do not hold the
CPU share that an ``alone`` test waits for (and the ``long`` tests also wait for the ``alone``
ones to end: conftest.py's ``_alone_when_timed``).

Most long tests wait on real servers' time (a store's scrapes, a minute's roll-up) with the
CPU idle: started together at the head of every slice, five of six workers waited at once and
the two cores were a third busy for the run's first minute and a half. So the long tests are
planned in lanes, half as many as workers (:func:`planned_starts`): longest first, each starts
when a lane is free, and that start, as a share of the plan, places it in the stretch of its
slice after the prefix (:data:`SPAN`; how far into its slice a test starts is guessed in test
files, not tests: :func:`time_shares`). About half the workers then run long tests at a time,
beside ordinary tests that keep the CPU busy, and none is left to the run's tail.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Hashable, Sequence, TypeVar

import pytest

Item = TypeVar("Item")

#: The ordinary tests every slice but the first starts with, as a fraction of its ordinary
#: tests: enough for the ``alone`` tests of slice 0 (about 20 s) to end before the long tests
#: of the other slices start.
PREFIX = 1 / 8
#: The stretch of a slice's ordinary tests (a fraction, after :data:`PREFIX`) its long tests
#: are spread over: the last starts well before the slice's tail, which other workers steal.
SPAN = 9 / 20


def slice_sizes(count: int, workers: int) -> list[int]:
    """The sizes of the slices pytest-xdist's ``worksteal`` scheduler first hands to
    ``workers`` workers out of ``count`` tests (``WorkStealingScheduling.check_schedule``)."""
    sizes = []
    for done in range(workers):
        size = count // (workers - done)
        sizes.append(size)
        count -= size
    return sizes


def long_seconds(item: pytest.Item) -> float:
    """The seconds of a test marked ``long(seconds)``; 0 for the others."""
    marker = item.get_closest_marker("long")
    return float(marker.args[0]) if marker is not None else 0.0


def is_alone(item: pytest.Item) -> bool:
    return item.get_closest_marker("alone") is not None


def alone_throughout(item: pytest.Item) -> bool:
    """Whether a test marked ``alone`` holds the CPU to itself from start to end; one marked
    ``alone(whole=False)`` runs among the first tests as the others do, but holds it only
    inside ``conftest.cpu_to_itself()`` (its timed stretch), sharing it while it waits."""
    marker = item.get_closest_marker("alone")
    return marker is not None and bool(marker.kwargs.get("whole", True))


def spread(items: Sequence[Item], workers: int, seconds: dict[int, float],
           alone: set[int], unit: Callable[[Item], Hashable] | None = None) -> list[Item]:
    """``items`` in the order described in the module's docstring, for ``workers`` workers.

    ``seconds`` maps the index of each long test to its seconds; ``alone`` holds the indices
    of the tests marked ``alone``; ``unit`` gives the unit a test's share of its slice's time
    is counted in (see :func:`time_shares`; default: each test its own). With one worker (no
    xdist), the ``alone`` tests come first, then the long ones, longest first, then the rest."""
    ordinary = [i for i in range(len(items)) if i not in seconds and i not in alone]
    longest = sorted(seconds, key=lambda i: (-seconds[i], i))
    firsts = [i for i in range(len(items)) if i in alone]
    if workers <= 1:
        return [items[i] for i in firsts + longest + ordinary]
    sizes = slice_sizes(len(items), workers)
    dealt: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    room = [size - (len(firsts) if k == 0 else 0) for k, size in enumerate(sizes)]
    for i in longest:
        open_slices = [k for k in range(workers) if room[k] > 0] or list(range(workers))
        k = min(open_slices, key=lambda k: (load[k], k))
        dealt[k].append(i)
        load[k] += seconds[i]
        room[k] -= 1
    units = [unit(item) if unit else n for n, item in enumerate(items)]
    due = planned_starts(seconds, max(1, workers // 2))
    order: list[int] = []
    rest = iter(ordinary)
    for k in range(workers):
        fill = [i for _, i in zip(range(max(0, room[k])), rest)]
        shares = time_shares([units[i] for i in fill])
        # (slice 0's long tests wait for its alone ones, which come first: no prefix)
        prefix = 0.0 if k == 0 else PREFIX
        here = sorted(dealt[k], key=lambda i: (due[i], i))
        order += (firsts if k == 0 else []) + staggered(
            fill, shares, here, [prefix + SPAN * due[i] for i in here])
    order += list(rest)  # none, unless long tests overflowed every slice
    return [items[i] for i in order]


def planned_starts(seconds: dict[int, float], lanes: int) -> dict[int, float]:
    """When each long test (index: seconds) starts, as a share (0 to 1) of a plan that runs
    them in ``lanes`` side by side, longest first, each in the lane that is free first."""
    free = [0.0] * lanes
    start: dict[int, float] = {}
    for i in sorted(seconds, key=lambda i: (-seconds[i], i)):
        lane = min(range(lanes), key=lambda n: (free[n], n))
        start[i] = free[lane]
        free[lane] += seconds[i]
    end = max(free) or 1.0
    return {i: at / end for i, at in start.items()}


def time_shares(units: list[Hashable]) -> list[float]:
    """How far into a run of tests (0 to 1) each test starts, guessed from the tests' units:
    each unit (a test file) takes as long as any other, shared equally by its tests. Counting
    tests instead, a file of 600 parametrized config keys (milliseconds each) would stand for
    more time than the rest of its slice."""
    count = Counter(units)
    total, shares = float(len(count)), []
    done = 0.0
    for u in units:
        shares.append(done / total)
        done += 1 / count[u]
    return shares


def staggered(fill: list[int], shares: list[float], longs: list[int],
              due: list[float]) -> list[int]:
    """``fill`` (each test starting ``shares`` of the way through it: :func:`time_shares`) with
    ``longs`` (in order) among it: each before the first ordinary test at its ``due`` share of
    the way or further."""
    out: list[int] = []
    j = 0
    for test, share in zip(fill, shares):
        while j < len(longs) and due[j] <= share:
            out.append(longs[j])
            j += 1
        out.append(test)
    return out + longs[j:]


def arrange(items: list[pytest.Item], workers: int) -> None:
    """Reorder pytest's ``items`` in place (see :func:`spread`)."""
    seconds = {i: s for i, item in enumerate(items) if (s := long_seconds(item)) > 0
               and not is_alone(item)}
    alone = {i for i, item in enumerate(items) if is_alone(item)}
    items[:] = spread(items, workers, seconds, alone, unit=lambda item: item.path)

"""The order the suite's tests run in under pytest-xdist: the long ones start early, spread
over the workers (conftest.py's ``pytest_collection_modifyitems``).

pytest-xdist's ``worksteal`` scheduler hands each of the N workers a contiguous slice of the
collected tests (the first ``len // N``, then a ``// (N - 1)`` of the rest, and so on) and,
when a worker runs out, moves the tail half of the fullest worker's queue to it. A worker runs
the head of its slice itself: tests collected in one directory (``tests/accounting/``) ran one
after another on one worker, and the longest of them (real-time store windows of a minute or
two) started six minutes into a nine-minute run, so the run ended with one worker on them.

Here the tests marked ``long(seconds)`` (what each takes on a 2-core CI machine, roughly:
only their order matters) are dealt out longest first, each to the slice with the least long
work so far, and start near the head of their slice; the other tests keep their collected
order and fill the slices up to the sizes the scheduler cuts. Slice 0 starts with the tests
marked ``alone``; every other slice starts with a short prefix of ordinary tests, so that its
long tests do not hold the CPU share that an ``alone`` test waits for (and the ``long`` tests
also wait for the ``alone`` ones to end: conftest.py's ``_alone_when_timed``).
"""

from __future__ import annotations

from typing import Sequence, TypeVar

import pytest

Item = TypeVar("Item")

#: The ordinary tests every slice but the first starts with, as a fraction of its ordinary
#: tests: enough for the ``alone`` tests of slice 0 (about 20 s) to end before the long tests
#: of the other slices start.
PREFIX = 1 / 8


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


def spread(items: Sequence[Item], workers: int, seconds: dict[int, float],
           alone: set[int]) -> list[Item]:
    """``items`` in the order described in the module's docstring, for ``workers`` workers.

    ``seconds`` maps the index of each long test to its seconds; ``alone`` holds the indices
    of the tests marked ``alone``. With one worker (no xdist), the ``alone`` tests come first,
    then the long ones, longest first, then the rest."""
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
    order: list[int] = []
    rest = iter(ordinary)
    for k in range(workers):
        fill = [i for _, i in zip(range(max(0, room[k])), rest)]
        if k == 0:
            order += firsts + dealt[k] + fill
        else:
            prefix = round(len(fill) * PREFIX)
            order += fill[:prefix] + dealt[k] + fill[prefix:]
    order += list(rest)  # none, unless long tests overflowed every slice
    return [items[i] for i in order]


def arrange(items: list[pytest.Item], workers: int) -> None:
    """Reorder pytest's ``items`` in place (see :func:`spread`)."""
    seconds = {i: s for i, item in enumerate(items) if (s := long_seconds(item)) > 0
               and not is_alone(item)}
    alone = {i for i, item in enumerate(items) if is_alone(item)}
    items[:] = spread(items, workers, seconds, alone)

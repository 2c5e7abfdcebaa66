"""A partitioned board's own readings: power, power cap, energy and ECC, read through one of
its partitions (the board has no handle of its own; see :mod:`allsmi.backends.amd.partitions`).

Each attempt runs on calls of its own, so that a failing board call is reported under the
board (``<board>: board readings through <partition>: power failed: ...``) and degrades the
board, never vanishes: the partitions' own :class:`~allsmi.backends.amd.calls.Calls` have
already been turned into their samples when the board is read.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Sequence

from allsmi.backends.amd import read
from allsmi.backends.amd.calls import Calls
from allsmi.backends.amd.partitions import Board
from allsmi.backends.amd.read import Readings


def board_readings(module: ModuleType, board: Board, parts: Sequence[tuple[Any, Calls, Readings]],
                   power_from: dict[str, int], warnings: list[str]) -> tuple[Readings | None, bool]:
    """``(readings, failed)``: the board's readings through the first partition reporting
    socket power, starting at the one that did last time (``power_from``, updated), so a
    steady board costs one partition's calls; ``failed`` when the readings used had a failing
    call or none could be read for one.

    A partition whose calls fail is skipped for the next (its failure reported): only a
    partition that answers without socket power stops the scan of a board known to report it
    elsewhere or not at all.
    """
    start = power_from.get(board.id, 0)
    order = list(range(start, len(parts))) + list(range(0, start))
    fallback: tuple[Readings, bool] | None = None
    errors = False
    for position in order:
        dev, dev_calls, _ = parts[position]
        if dev_calls.health == "lost":
            continue
        calls = Calls(module)
        readings = read.read_board(module, calls, dev.handle)
        warnings.extend(calls.messages(f"{board.label}: board readings through {dev.label}"))
        errors = errors or bool(calls.errors)
        if readings.values.get("power_watts") is not None:
            power_from[board.id] = position
            return readings, bool(calls.errors)
        if calls.errors and calls.answered == 0:
            continue  # no answer at all: not a sign that the board has no socket power
        fallback = fallback or (readings, bool(calls.errors))
        if board.id in power_from and not calls.errors:
            break  # known to have no socket power: do not scan every partition each cycle
    power_from[board.id] = start
    if fallback is None:
        return None, errors
    return fallback

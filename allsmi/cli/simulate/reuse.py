"""The replays of a simulation that one command makes, kept until it ends.

``export --simulate`` with a budget bills its window, then the month to date for the budget
columns (:mod:`allsmi.cli.billing.budgets`): the month to date ends where the window ends, so its
replay is the window's with the days before it. :class:`Replays` replays the window, keeps its
scratch ledger, and for the month to date replays only the days before the window into the
same ledger. A replay is a pure function of time and each stretch of it books what the same
stretch of one long replay books (:func:`allsmi.cli.simulate.bill.simulated_ledger`), so the month
to date bills exactly what its own replay would, row for row, wherever the window starts on a
quarter hour (where both replays have a row start) and on the month to date's sampling grid (every
``--period``); elsewhere it is replayed whole, as before.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Kept:
    window: Any
    path: str
    until: float
    """The time the window was replayed up to (its end, or the time of the replay)."""


def extends(earlier: Any, later: Any, config: Any) -> bool:
    """Whether a replay of ``later`` extended back to the start of ``earlier`` (a window that
    ends where ``later`` ends and starts before it) books what a replay of ``earlier`` would,
    row for row: the same sampling grid (``later`` starts on ``earlier``'s) and rows (``later``
    starts on the rows' grid, where ``earlier``'s replay has a row start too, and ``earlier``
    on a multiple of the ledger's declared interval, ``later``'s)."""
    from allsmi.cli.simulate.bill import ROW_SECONDS, replay_grid
    if earlier.end != later.end or not earlier.start < later.start:
        return False
    step, row = replay_grid(later, config)
    gap = later.start_unix - earlier.start_unix
    return gap % step == 0 and later.start_unix % ROW_SECONDS == 0 \
        and earlier.start_unix % row == 0


class Replays:
    """``with Replays() as replays: path = replays.ledger(scenario, window, config)``: a
    scratch ledger of the scenario over ``window``, made by extending an earlier replay when
    :func:`extends` allows, else replayed whole; all removed when the ``with`` ends."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._kept: list[_Kept] = []
        self.extended = 0
        """Replays made by extending an earlier one (tests count them)."""

    def __enter__(self) -> "Replays":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def ledger(self, scenario: Any, window: Any, config: Any, progress: Any = None) -> str:
        """The path of a ledger billing ``scenario`` over ``window`` (raises what
        :func:`allsmi.cli.simulate.bill.simulated_ledger` raises)."""
        from allsmi.cli.simulate.bill import replay_span, simulated_ledger
        from allsmi.accounting.periods import Window
        for kept in self._kept:
            if extends(window, kept.window, config):
                self._kept.remove(kept)  # (its ledger is the longer window's now)
                scratch = self._stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="allsmi-export-"))
                path = simulated_ledger(scenario, Window(window.start, kept.window.start),
                                        config, scratch, progress=progress,
                                        into=(kept.path, kept.until))
                self.extended += 1
                self._kept.append(_Kept(window, path, kept.until))
                return path
        scratch = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="allsmi-export-"))
        until = replay_span(window)[1]
        path = simulated_ledger(scenario, window, config, scratch, progress=progress)
        self._kept.append(_Kept(window, path, until))
        return path

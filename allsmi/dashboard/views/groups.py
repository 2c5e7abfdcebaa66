"""The totals tables of the groups view (and the cluster view's): one row per resource group
and per vendor, laid out to the terminal's width.

Every column is as wide as its longest cell, the same in both tables (so they line up), and a
number is never cut. Where the row does not fit (80 columns), the least needed columns give way
(labels, hosts, processes, energy, devices, and on a terminal too narrow for those then power
and memory: :data:`DROP_ORDER`), memory says both values in one unit (``205.2/557.5 GiB``, as
power does in kW) where that keeps a column more, and the state line names the columns left
out; the labels take what room is left, cut with an ellipsis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from rich.text import Text

from allsmi.schema.formatting import NA, memory_pair, percent

from allsmi.dashboard.state.naming import fit_apart
from allsmi.dashboard.state.totals import Totals
from allsmi.dashboard.views.amounts import (ENERGY_UNITS, energy_in, energy_text, energy_unit,
                                            labels_text, power_pair, power_totals)
from allsmi.dashboard.views.render import Palette


TOTALS_COLUMNS = (("name", "name"), ("devices", "devices"), ("util", "util"),
                  ("memory", "memory"), ("power", "power / limit"), ("energy", "energy"),
                  ("procs", "procs"), ("hosts", "hosts"), ("labels", "labels"))
"""Columns of the group and vendor totals (vendors leave out ``labels``), most needed first."""
#: The columns that give way on a narrow terminal, first first (``name`` and ``util`` stay;
#: power and memory go last, below about 65 columns, rather than be cut by the table's edge).
DROP_ORDER = ("labels", "hosts", "procs", "energy", "devices", "power", "memory")
#: The narrowest the labels column is shown at (cut with an ellipsis); the name column's width
#: while columns are fitted (a longer name is cut before a column of numbers gives way, and
#: grows back into the room left), and its narrowest.
LABELS_MIN_WIDTH, NAME_WIDTH, NAME_MIN_WIDTH = 10, 12, 8
#: Cells around each column's text (the table's padding).
PAD = 2
#: Lines of a totals table at most, its header included (``.totals`` in ``allsmi.tcss``): a
#: table with more rows has a vertical scrollbar.
TOTALS_HEIGHT = 12


def totals_cells(totals: Totals, palette: Palette, unit: tuple[str, float] | None = None,
                 compact: bool = False) -> tuple[Any, ...]:
    """One totals row in :data:`TOTALS_COLUMNS` order; ``unit`` the energy column's unit
    (:func:`energy_unit` of the table's largest), so a column never mixes J and Wh;
    ``compact``: memory in one unit for both values, as power always is."""
    util = totals.utilization_percent
    devices = str(totals.devices)
    if totals.partitions:
        devices += f"+{totals.partitions}p"
    if totals.lost:
        devices += f" {totals.lost}!"
    return (Text(totals.name, style="bold"),
            Text(devices, justify="right", style=palette.hot if totals.lost else ""),
            Text(percent(util), justify="right", style=palette.load(util)),
            Text(memory_totals(totals, compact), style=palette.load(totals.memory_percent)),
            Text(power_totals(totals)),
            Text(energy_text(totals.energy_joules) if unit is None
                 else energy_in(totals.energy_joules, unit), justify="right"),
            Text(processes_totals(totals), justify="right"),
            Text(str(len(totals.hosts)), justify="right"),
            Text(labels_text(totals.labels)))


@dataclass
class TotalsLayout:
    """What the two totals tables show at one width."""

    columns: list[tuple[str, str, int]]
    """(column id, label, cells) of the group table, in order; the vendor table's are the same
    without ``labels``."""
    groups: list[tuple[str, tuple[Any, ...]]]
    vendors: list[tuple[str, tuple[Any, ...]]]
    hidden: list[str]
    """The labels of the columns left out, for the state line."""

    @property
    def vendor_columns(self) -> list[tuple[str, str, int]]:
        return [c for c in self.columns if c[0] != "labels"]


def totals_layout(groups: Sequence[Totals], vendors: Sequence[Totals], palette: Palette,
                  width: int) -> TotalsLayout:
    """The groups and vendors tables ``width`` cells wide: columns as wide as their longest
    cell in either table; on a narrow terminal columns dropped in :data:`DROP_ORDER`, memory in
    one unit where that keeps a column more; the labels take the room left."""
    index = {cid: i for i, (cid, _) in enumerate(TOTALS_COLUMNS)}
    best: TotalsLayout | None = None
    for compact in (False, True):
        rows = []
        for kind, sets in (("group", groups), ("vendor", vendors)):
            unit = energy_unit(max((t.energy_joules or 0.0 for t in sets), default=0.0))
            rows.append([(f"{kind}:{t.name}", totals_cells(t, palette, unit, compact)) for t in sets])
        natural = _widths(rows)
        shown, hidden = _fit(natural, width, any(t.labels for t in groups))
        if best is not None and len(hidden) >= len(best.hidden):
            break  # one unit shows no more: the usual form

        def pick(table: list[tuple[str, tuple[Any, ...]]], names: list[str]) -> list[tuple[str, tuple[Any, ...]]]:
            return [(key, tuple(cells[index[c]] for c in names)) for key, cells in table]

        rows = [names_apart(table, natural["name"]) for table in rows]  # cut, still apart
        best = TotalsLayout([(cid, dict(TOTALS_COLUMNS)[cid], natural[cid]) for cid in shown],
                            pick(rows[0], shown), pick(rows[1], [c for c in shown if c != "labels"]),
                            hidden)
        if not hidden:
            break
    assert best is not None
    return best


def fit_columns(natural: dict[str, int], width: int, shown: list[str], drop_order: Sequence[str],
                name: str, name_width: int, name_min: int, flexible: str,
                flexible_min: int) -> list[str]:
    """The columns of ``shown`` that fit ``width`` cells, for cells ``natural`` wide (the
    ``name`` and ``flexible`` columns' widths narrowed in place): columns give way in
    ``drop_order``; a name longer than ``name_width`` is cut (down to ``name_min``, with an
    ellipsis) before a column of numbers gives way, and grows back into the room left; the
    ``flexible`` column (labels, a host's problem) takes what remains, or goes if under
    ``flexible_min``. The groups' and the hosts' tables alike."""
    whole = natural[name]
    natural[name] = min(whole, name_width)

    def needed() -> int:  # the cells of the columns shown, the flexible one aside
        return sum(natural[c] + PAD for c in shown if c != flexible)

    for cid in drop_order:
        if cid != flexible and needed() > width:
            shown.remove(cid)
    if needed() > width:  # still too wide: the names give way (cut with an ellipsis)
        natural[name] = max(min(whole, name_min), natural[name] - (needed() - width))
    natural[name] += max(0, min(whole - natural[name], width - needed()))
    room = width - needed() - PAD
    if flexible in shown and room >= min(flexible_min, natural[flexible]):
        natural[flexible] = min(natural[flexible], room)
    elif flexible in shown:
        shown.remove(flexible)
    return shown


def _fit(natural: dict[str, int], width: int, labels: bool) -> tuple[list[str], list[str]]:
    """The columns shown and the labels of those left out (:func:`fit_columns`)."""
    shown = fit_columns(natural, width,
                        [cid for cid, _ in TOTALS_COLUMNS if labels or cid != "labels"],  # no blanks
                        DROP_ORDER, "name", NAME_WIDTH, NAME_MIN_WIDTH, "labels", LABELS_MIN_WIDTH)
    left_out = [cid for cid in DROP_ORDER if cid not in shown and (labels or cid != "labels")]
    return shown, [dict(TOTALS_COLUMNS)[cid] for cid in left_out]


def _widths(tables: Sequence[Sequence[tuple[str, tuple[Any, ...]]]]) -> dict[str, int]:
    """Each column's cells: the longest of its label and its cells in any table."""
    return {cid: max([len(label)] + [cells[i].cell_len for rows in tables for _, cells in rows])
            for i, (cid, label) in enumerate(TOTALS_COLUMNS)}


def names_apart(rows: Sequence[tuple[str, tuple[Any, ...]]],
                width: int) -> list[tuple[str, tuple[Any, ...]]]:
    """``rows`` with their first cell, a name, in ``width`` cells, two names cut alike told
    apart (``training-a`` and ``training-b`` in 8 cells: ``tr…ing-a``, ``tr…ing-b``:
    :func:`~allsmi.dashboard.state.naming.fit_apart`)."""
    cuts = fit_apart({key: cells[0].plain for key, cells in rows}, width)
    return [(key, (Text(cuts[key], style=cells[0].style), *cells[1:])) for key, cells in rows]


def memory_totals(totals: Totals, compact: bool = False) -> str:
    """A set's memory in use against its total, like with like: of the devices that report
    both; where others report only one of them (or a value was thrown away), ``(2 of 3)`` says
    how many devices the pair covers. ``compact``: one unit for both (``205.2/557.5 GiB``)."""
    pair = memory_pair(totals.memory_used_bytes, totals.memory_total_bytes, compact)
    if totals.memory_count < totals.memory_reported:
        return f"{pair} ({totals.memory_count} of {totals.memory_reported})"
    return pair


def processes_totals(totals: Totals) -> str:
    """A set's processes: ``N/A`` where no device's backend lists them, ``12 (3 of 4)`` where
    only some do (the processes of 3 of its 4 devices), never an unknown counted as 0."""
    if not totals.processes_unknown:
        return str(totals.processes)
    if not totals.processes_known:
        return NA
    return f"{totals.processes} ({totals.processes_known} of " \
           f"{totals.processes_known + totals.processes_unknown})"


__all__ = ["DROP_ORDER", "ENERGY_UNITS", "TOTALS_COLUMNS", "TOTALS_HEIGHT", "TotalsLayout", "energy_in",
           "energy_text", "energy_unit", "fit_columns", "labels_text", "memory_totals",
           "names_apart", "power_pair", "power_totals", "processes_totals", "totals_cells", "totals_layout"]

"""The budget table's month-to-date figures, computed one way for every group.

The export's ``budget_used_ratio`` and ``forecast_month_end_cost`` are the month to date's for a
group with a budget, whatever the window; without a budget, its forecast is the window's cost
extrapolated (docs/accounting.md). The report shows, for every group, the cost of the month to
date and its forecast to the month's end, both from the month to date's own rows: the window
itself where it starts on the first of the month holding its end, else the reading made for the
budgets. Where none was read (no group has a budget: a simulation's month to date costs a replay
of it), they are :data:`NOT_READ`, and a note says why, never a forecast of the window alone
beside forecasts of the month to date.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

#: Each month-to-date figure of the table and the export column of the month to date's row it is.
MONTH_COLUMNS = {"month_to_date_cost": "cost", "month_end_forecast_cost": "forecast_month_end_cost"}
#: Said where a month-to-date figure was not read, or the group has no row in the month to date
#: (a window reaching back before the month).
NOT_READ = "—"


def month_to_date(groups: Any, read: Any) -> Any:
    """The month to date grouped by group: ``read`` (the budgets' reading), else ``groups``
    (the window's) where the window starts on the first of the month holding its end (it is
    then its own month to date), else ``None``."""
    if read is not None:
        return read
    last = groups.window.end - dt.timedelta(microseconds=1)
    first = last.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return groups if groups.window.start.timestamp() == first.timestamp() else None


def month_figures(month: Any, values: Callable[[Any], dict[str, Any]],
                  ) -> Callable[[Any], tuple[dict[str, Any], dict[str, str]]]:
    """Per window row, its month-to-date figures (:data:`MONTH_COLUMNS`) and what its empty
    ones say, from ``month`` (:func:`month_to_date`; ``None``: not read)."""
    rows = None if month is None else {(r.resource_group, r.labels): values(r) for r in month.rows}

    def figures(row: Any) -> tuple[dict[str, Any], dict[str, str]]:
        mine = None if rows is None else rows.get((row.resource_group, row.labels))
        if mine is None:
            return dict.fromkeys(MONTH_COLUMNS), dict.fromkeys(MONTH_COLUMNS, NOT_READ)
        return {k: mine.get(source) for k, source in MONTH_COLUMNS.items()}, {}
    return figures


#: Said for the window's figures of a group that has a row in the month to date and none in the
#: window (it spent only before the window began): nothing of it was seen in the window.
NOT_IN_WINDOW = "no device"


def month_only(month: Any, window: Any, values: Callable[[Any], dict[str, Any]],
               ) -> list[tuple[Any, dict[str, Any]]]:
    """The rows of ``month`` (:func:`month_to_date`) whose group (and labels) the window has no
    row of: groups that spent in the month before the window and nothing in it, whose cost
    month to date can still be over their budget. Each with its budget and month-to-date
    figures, and no cost in the window (:data:`NOT_IN_WINDOW`)."""
    if month is None or month is window:
        return []
    seen = {(r.resource_group, r.labels) for r in window.rows}
    out = []
    for row in month.rows:
        if (row.resource_group, row.labels) not in seen:
            v = values(row)
            figures = {k: v.get(k) for k in ("resource_group", "currency", "budget",
                                             "budget_used_ratio", "price_per_device_hour",
                                             "price_per_kwh")}
            figures.update({k: v.get(source) for k, source in MONTH_COLUMNS.items()}, cost=None)
            out.append((row, figures))
    return out


def month_note(read: bool) -> str:
    """Why some month-to-date figures are :data:`NOT_READ`."""
    if not read:
        return ("Month to date (" + NOT_READ + "): it is read only for the budgets, and no group "
                "has one, so the cost month to date and the forecast to the month's end are "
                "not shown; a report whose window starts on the first of the month (--period "
                "this-month, last-month) has them.")
    return ("Month to date (" + NOT_READ + "): the groups marked so had no device in the month "
            "to date (their cost in the window is from the month before).")

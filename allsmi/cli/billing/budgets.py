"""Budgets read as month to date, whatever the export's window.

A group's ``budget_per_month`` is a monthly figure, and people read "budget used" as "used so far
this month". So ``budget_used_ratio`` and ``forecast_month_end_cost`` are computed from the month
to date: from the first of the calendar month holding the window's end (in ``--tz``) to the
window's end, from the same source as the export (the ledger, Prometheus, the simulation). For
``--period yesterday`` on the 15th, that is the 1st to the end of the 14th: the ratio is the
14 days' cost over the budget, the forecast those 14 days extrapolated to the month. A window
that starts on the first of its month already is that month to date (no second pass).

Each row gets the figures of the row with the same keys (group, vendor, host, holder...) over
the month to date; a row with no such row there (a window that reaches back into the month
before, where alone the row's devices were) keeps ``None``.

The month to date is read whenever the configuration budgets a group, whether or not the
window saw it: a group that spent earlier in the month and nothing in the window has no row in
the window, yet may be over its budget (:func:`group_totals` are the month to date's, every
group of it).

The month to date's warnings are the report's (said once), and so are its partial answers
(:func:`with_partial`): the coverage lowered to 0, exit status 3, as for the window's own. A
month to date with data for less of its device time than the coverage threshold is said
(:func:`short_month`): its figures count only what was recorded.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any, Callable, NamedTuple

#: What the second pass is for, as its progress line (and ``--verbose``) says.
PURPOSE = "month to date, for the budgets"
#: What tells a row from another: its grouping keys and its group's labels (a group whose
#: labels changed during the month has a row per set of labels).
KEYS = ("resource_group", "labels", "vendor", "model", "host", "user", "namespace", "pod", "job")


def month_start(window: Any) -> dt.datetime:
    """The first instant of the calendar month holding the window's last instant."""
    last = window.end - dt.timedelta(microseconds=1)
    return last.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def month_to_date(plan: Any, report: Any, build: Callable[[Any], Any],
                  threshold: float | None = None) -> Any:
    """``report`` with each budgeted row's ``budget_used_ratio`` and ``forecast_month_end_cost``
    taken from the month to date (module docstring); ``build(plan)`` makes a report. A month to
    date whose budgeted groups' data cover less than ``threshold`` of it is said
    (:func:`short_month`)."""
    if not budgeted(plan.config) and not any(row.budget is not None for row in report.rows):
        return report  # (a budget of 0 is one)
    first = month_start(report.window)
    # the window is the month to date (or the whole month); one that starts in an earlier
    # month is not: its month to date is the part from the first of the month holding its end
    if report.window.start.timestamp() == first.timestamp():
        return report
    from allsmi.accounting.periods import Window
    to_date = build(replace(plan, window=Window(first, report.window.end), purpose=PURPOSE))
    by_key = {tuple(getattr(r, k, None) for k in KEYS): r for r in to_date.rows}
    rows = []
    for row in report.rows:
        if row.budget is None:
            rows.append(row)
            continue
        month = by_key.get(tuple(getattr(row, k, None) for k in KEYS))
        rows.append(replace(row, budget_used_ratio=None if month is None else month.budget_used_ratio,
                            forecast_month_end_cost=None if month is None
                            else month.forecast_month_end_cost))
    # The month to date's warnings (said on stderr as it was read) are the budget columns';
    # its partial answers, the document's, as the window's own (coverage 0, exit 3).
    from allsmi.accounting.periods import iso
    span = f"the month to date ({iso(first)} to {iso(report.window.end)})"
    short, totals = short_month(to_date, threshold, span), group_totals(to_date.rows)
    if short:
        from allsmi.cli.billing.reportcmd import say
        say([short[1]], said=plan.said)
        totals = tuple(t._replace(partial=True) if t.group in short[0] else t for t in totals)
    notes = tuple(dict.fromkeys(tuple(report.notes) + tuple(to_date.notes)
                                + ((short[1],) if short else ())))
    report = with_partial(report, to_date.warnings, f"{span} for the budgets")
    return replace(report, rows=tuple(rows) if isinstance(report.rows, tuple) else rows,
                   budget_totals=totals, notes=notes)


def short_month(to_date: Any, threshold: float | None,
                span: str) -> tuple[set[str], str] | None:
    """Where the month to date (``to_date``) has data for less than ``threshold`` of its device
    time (a ledger begun during the month, a recorder stopped for days: what makes an export of
    that span exit 3), the budgeted groups whose rows are below it, and a warning naming them:
    their ``budget_used_ratio`` and ``forecast_month_end_cost`` count only what was recorded, so
    they may be low (an overrun is said as "at least"). ``None`` when it is covered, or its gap
    is in groups without a budget."""
    if threshold is None or to_date.coverage_ratio is None or to_date.coverage_ratio >= threshold:
        return None
    low: dict[str, float] = {}
    for row in to_date.rows:
        ratio = row.coverage_ratio
        if row.budget is not None and ratio is not None and ratio < threshold:
            low[row.resource_group] = min(ratio, low.get(row.resource_group, ratio))
    if not low:
        return None
    named = ", ".join(f"{group} {ratio:.1%}" for group, ratio in sorted(low.items()))
    return set(low), (
        f"{span}, which budget_used_ratio and forecast_month_end_cost are read from, has data "
        f"for {to_date.coverage_ratio:.2%} of its device time, below the threshold "
        f"{threshold:.2%} (lowest: group {named}): they "
        "count only the usage recorded, so they may be low (a ledger begun during the month, a "
        "recorder stopped for a while)")


def with_partial(report: Any, found: Any, reading: str) -> Any:
    """``report`` vouching also for the partial answers ``found`` by another reading it was
    made from (``reading`` names it: ``the month to date (... to ...) for the budgets``), as
    for its own: each new one in its ``warnings``, after ``reading ``, and its coverage lowered
    to 0 (the command exits 3)."""
    new = [w for w in dict.fromkeys(found or ()) if w not in report.warnings]
    if not new:
        return report
    return replace(report, coverage_ratio=0.0, warnings=tuple(report.warnings) + tuple(
        f"{ANOTHER_READING}{reading}: {w}" for w in new))


#: How a partial answer of another reading than the window's begins (:func:`with_partial`).
ANOTHER_READING = "reading "


def budgeted(config: Any) -> bool:
    """Whether the configuration gives some group a ``budget_per_month`` (0 included)."""
    return any(group.budget_per_month is not None
               for group in (getattr(config, "groups", None) or {}).values())


def group_totals(rows: Any) -> tuple[BudgetTotal, ...]:
    """Per budgeted group, its budget, currency, cost and forecast to the month's end summed
    over ``rows``: the month to date's rows hold every group and holder of the month, where a
    shorter window's rows hold only those it saw. A sum leaving out rows where it is unknown
    (a device that reports no energy, priced per kWh) is at least it (``partial``): costs are
    never negative, so a known part above the budget is an overrun whatever the rest."""
    used: dict[str, list[Any]] = {}
    for row in rows:
        if row.budget is not None:
            used.setdefault(row.resource_group, []).append(row)
    out = []
    for group, group_rows in sorted(used.items()):
        costs = [r.cost for r in group_rows]
        forecasts = [r.forecast_month_end_cost for r in group_rows]
        out.append(BudgetTotal(group, group_rows[0].budget, group_rows[0].currency or "",
                               _sum(costs), _sum(forecasts), None in costs + forecasts))
    return tuple(out)


class BudgetTotal(NamedTuple):
    """A budgeted group over the month to date (:func:`group_totals`)."""

    group: str
    budget: float
    currency: str
    cost: float | None
    forecast: float | None
    partial: bool = False
    """Whether ``cost`` and ``forecast`` leave out rows where they are unknown."""


def _sum(values: list[Any]) -> float | None:
    """The sum of the known values; ``None`` when none is known."""
    known = [v for v in values if v is not None]
    return float(sum(known)) if known else None

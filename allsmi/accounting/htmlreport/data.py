"""What the HTML report shows, computed from the export's own rows.

Every figure is a value of an export column (:func:`allsmi.accounting.formats.json_row`, the
CSV's numbers at the CSV's precision) or a sum of such values, so a table of the report and the
CSV export of the same window and options agree to the printed digit. An unknown value stays
unknown (``None``): it is shown as such and left out of charts, never drawn as 0.

The activity columns (``active_device_hours``, ``efficiency_ratio``, ``waiting_<reason>_seconds``
and ``waiting_<reason>_cost``, ``activity_method``) are the export's too; where no row of the
window knows them (hardware that reports no compute activity), the report says "not measured".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from allsmi.accounting.formats import json_row
from allsmi.accounting.htmlreport.month import (
    MONTH_COLUMNS, NOT_IN_WINDOW, NOT_READ, month_figures, month_only, month_to_date)
from allsmi.accounting.htmlreport.notes import page_notes
from allsmi.accounting.htmlreport.sums import (
    budget_once, currency_of, money_column, money_currencies, money_figures, money_keys,
    money_sum, partial_columns, ratio, reason_columns, several, total)
from allsmi.accounting.report import HOLDER_KEYS, Report, Row
from allsmi.schema.formatting import money_rank
from allsmi.schema import WAITING_REASONS
from allsmi.schema.text import clean_text

#: What each holder may have been waiting on (issue 31), in the order they are shown.
REASONS = WAITING_REASONS
#: Holders listed one by one in the table (the rest are summed in one line).
TABLE_HOLDERS = 100
#: Holders drawn in the ranking chart.
CHART_HOLDERS = 20
#: Shown for the share of a group's device time that no holder held (the export's empty keys).
NO_HOLDER = "(no holder)"
#: A window longer than this is trended by month instead of by day.
MAX_DAYS = 62


@dataclass(frozen=True)
class Views:
    """The export's rows the report is made of, all over one window from one source."""

    groups: Report
    """Grouped by ``resource_group``."""
    holders: Report
    """Grouped by the ``--group-by`` keys (holders by default)."""
    pools: Report
    """Grouped by ``resource_group``, ``vendor``, ``model``."""
    trend: tuple[tuple[str, Report], ...]
    """One report per day (per month for long windows), grouped by ``resource_group``."""
    threshold: float
    """The coverage below which the export exits 3."""
    trend_unit: str = "day"
    """What one step of ``trend`` is: ``day`` or ``month``."""
    notes: tuple[str, ...] = ()
    """The source's warnings (conflicting ledger rows, series left out), as the export says
    them on stderr."""
    overruns: tuple[str, ...] = ()
    """The groups above their budget, as said on stderr (the export's ``budget_notes``)."""
    month: Report | None = None
    """Grouped by ``resource_group`` over the month to date, where it was read for the budgets
    (:mod:`.month`)."""


def values(row: Row) -> dict[str, Any]:
    """The row's export columns, as the JSON export gives them (the CSV's precision)."""
    return json_row(row)


def coverage(report: Report) -> float | None:
    """The report's ``coverage_ratio`` as the export's JSON gives it (6 decimals), so that the
    page's figure and its ``data-value`` are the export's."""
    return None if report.coverage_ratio is None else round(report.coverage_ratio, 6)


def label(value: str | None, empty: str = "-") -> str:
    """A name as shown: control and bidirectional characters made visible, never reordered."""
    return empty if value is None or value == "" else clean_text(value, 200)


def joined(names: Iterable[str], separator: str) -> str:
    """Names (each already :func:`label`) in one text, each isolated (U+2068 ... U+2069) so that
    one written right to left never reorders its neighbours: ``team=צוות, job=42`` showed the
    ``42`` on the wrong side of the Hebrew name."""
    return separator.join(f"\u2068{name}\u2069" for name in names)


@dataclass(frozen=True)
class Line:
    """One line of a section: its name(s) and its figures (export column -> value)."""

    names: tuple[str, ...]
    figures: dict[str, Any]
    currency: str | None = None
    partial: frozenset[str] = frozenset()
    """Columns whose sum leaves out lines where the value is unknown (shown as at least it)."""
    empty: dict[str, str] = field(default_factory=dict)
    """What a column without a value says instead of "unknown": "no price" (nothing summed in
    it is priced), or nothing (no line bills in that column's currency: a blank cell)."""


def _sum_lines(rows: Sequence[dict[str, Any]], columns: Iterable[str]) -> dict[str, Any]:
    """Each column's total; the efficiency of the totals (active / allocated), unknown as the
    export's is where the activity of some of the rows' allocated time is (a row with allocated
    hours and no efficiency): never that time counted as inactive."""
    out = {c: total(r.get(c) for r in rows) for c in columns}
    if "active_device_hours" in out:
        unknown = any(r.get("allocated_device_hours") and r.get("efficiency_ratio") is None
                      for r in rows)
        out["efficiency_ratio"] = None if unknown else ratio(
            out["active_device_hours"], out.get("allocated_device_hours"))
    return out


HOUR_COLUMNS = ("observed_device_hours", "allocated_device_hours", "used_device_hours",
                "active_device_hours", "idle_allocated_device_hours", "billed_device_hours")
MONEY_COLUMNS = ("cost", "idle_cost", "forecast_month_end_cost")
OTHER_COLUMNS = ("energy_kwh", "carbon_gco2e", "device_count")


@dataclass
class Content:
    """Everything the page shows, in the order it shows it."""

    views: Views
    activity: bool = False
    """Whether the export has the activity columns (issue 31)."""
    reasons: dict[str, dict[str, str]] = field(default_factory=dict)
    groups: list[Line] = field(default_factory=list)
    group_totals: list[Line] = field(default_factory=list)
    """The groups' sums: one line, or one per currency when the groups bill in several."""
    budget_groups: list[Line] = field(default_factory=list)
    """The window's groups, then those of the month to date alone (:func:`.month.month_only`)."""
    budget_totals: list[Line] = field(default_factory=list)
    holders: list[Line] = field(default_factory=list)
    holders_rest: list[Line] = field(default_factory=list)
    holders_total: list[Line] = field(default_factory=list)
    holder_keys: tuple[str, ...] = ()
    most_held: list[Line] = field(default_factory=list)
    """The holders that held the most device-hours, as many as the chart draws."""
    pools: list[Line] = field(default_factory=list)
    trend: list[Line] = field(default_factory=list)
    waiting: list[Line] = field(default_factory=list)
    """Per waiting reason some holder knows, all holders together: its device-hours, their
    share of the holders' allocated ones, and its cost."""
    waiting_costs: tuple[tuple[str, str, str], ...] = ()
    """The waiting table's cost columns: ``(title, key, currency)``, one per currency where
    the groups bill in several (:func:`.sums.money_keys`)."""
    burn: list[Line] = field(default_factory=list)
    """Per step of the trend, each priced group's cost so far in the window (its figures are
    keyed by the group's own name, whole); unknown on a step whose cost is."""
    burn_columns: tuple[tuple[str, str], ...] = ()
    """The burn's columns: ``(the group's name as shown, its key in the figures)``, so that
    two groups shown alike (names cut at 200 characters) stay apart."""
    currencies: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """What the report cannot show, and why (no data, no prices, no budgets...)."""

    @property
    def trend_unit(self) -> str:
        return self.views.trend_unit

    @property
    def priced(self) -> bool:
        return any(line.figures.get("cost") is not None for line in self.groups)

    @property
    def budgeted(self) -> bool:
        return any(line.figures.get("budget") is not None for line in self.budget_groups)

    @property
    def budget_priced(self) -> bool:
        """Whether some group has a cost in the window or the month to date."""
        return self.priced or any(line.figures.get("month_to_date_cost") is not None
                                  for line in self.budget_groups)


def _group_lines(groups: Report, month_rows: Report | None) -> list[Line]:
    """Per group, its export row and its month-to-date figures (:mod:`.month`)."""
    month = month_figures(month_rows, values)
    lines = []
    for row in groups.rows:
        v = values(row)
        v["group_labels"] = joined((f"{label(k)}={label(x)}" for k, x in row.labels), ", ")
        figures, empty = month(row)
        lines.append(Line((label(row.resource_group),), {**v, **figures}, row.currency,
                          empty=empty))
    return lines


def _month_only_lines(rows: Sequence[tuple[Row, dict[str, Any]]]) -> list[Line]:
    """The budget table's line of each group of the month to date alone (:func:`month_only`)."""
    return [Line((label(row.resource_group),), {**figures, "group_labels": joined(
        (f"{label(k)}={label(x)}" for k, x in row.labels), ", ")}, row.currency,
        empty={"cost": NOT_IN_WINDOW}) for row, figures in rows]


def _budget_totals(lines: Sequence[Line], window: Sequence[Line],
                   currencies: Sequence[str]) -> list[Line]:
    """The budget table's sums: the budgets and month-to-date figures over ``lines`` (every
    group of the month to date), the cost in the window from ``window`` (the window's totals:
    a group the window did not see leaves nothing out of it)."""
    seen = {line.names: line for line in window}
    out = []
    for line in _totals(budget_once(line.figures for line in lines),
                        ("budget",) + tuple(MONTH_COLUMNS), currencies):
        mine = seen.get(line.names)
        figures, partial, empty = dict(line.figures), set(line.partial), dict(line.empty)
        if mine is not None and "cost" in mine.figures:
            figures["cost"] = mine.figures["cost"]
            partial |= {"cost"} & mine.partial
            if "cost" in mine.empty:
                empty["cost"] = mine.empty["cost"]
        out.append(Line(line.names, figures, line.currency, frozenset(partial), empty))
    return out


def _pool_lines(report: Report, columns: Sequence[str],
                currencies: Sequence[str]) -> list[Line]:
    """The pools (vendor and model) across groups: sums of the export's rows, their amounts
    one per currency where the groups bill in several (:mod:`.sums`)."""
    pools: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in report.rows:
        pools.setdefault((row.vendor or "", row.model or ""), []).append(values(row))
    plain = [c for c in columns if not money_column(c)]
    lines = []
    for (vendor, model), rows in sorted(pools.items()):
        figures = _sum_lines(rows, plain)
        # used / allocated: unknown where the use of some allocated time is, as the efficiency
        used = None if any(r.get("allocated_device_hours") and r.get("used_device_hours") is None
                           for r in rows) else ratio(figures.get("used_device_hours"),
                                                     figures.get("allocated_device_hours"))
        # percent: what the efficiency chart draws
        for name, share in (("used_efficiency", used),
                            ("active_efficiency", figures.get("efficiency_ratio"))):
            figures[name] = None if share is None else 100.0 * share
        sums, partial, empty = money_figures(rows, [c for c in columns if money_column(c)],
                                             currencies)
        figures.update(sums)
        one = currencies[0] if len(currencies) == 1 and figures.get("cost") is not None else None
        lines.append(Line((label(vendor), label(model)), figures, one,
                          partial_columns(rows, plain) | partial, empty))
    return lines


def _totals(rows: Sequence[dict[str, Any]], columns: Sequence[str],
            currencies: Sequence[str]) -> list[Line]:
    """The sum of ``rows``: one line; with several currencies, the money columns are summed
    per currency on lines of their own (costs in different currencies do not add up), one per
    currency some row bills in. A sum that leaves out rows where it is unknown is partial,
    and a cost of which nothing is priced says "no price" (:func:`.sums.money_sum`)."""
    plain = [c for c in columns if not money_column(c)]
    amounts = [c for c in columns if money_column(c)]
    whole = _sum_lines(rows, plain)
    partial = partial_columns(rows, plain)
    if not several(currencies):
        sums, left_out, empty = money_figures(rows, amounts, currencies)
        return [Line(("total",), {**whole, **sums}, currencies[0] if currencies else None,
                     partial | left_out, empty)]
    # The whole line has no money figure and the currency lines only money figures: a column
    # left out of a total line is shown blank (it is not unknown: it is not summed there).
    lines = [Line(("total",), whole, partial=partial)]
    for currency in currencies:
        if any(currency_of(r) == currency for r in rows):
            sums, left_out, empty = money_figures(rows, amounts, currencies, currency,
                                                  keyed=False)
            lines.append(Line((f"total ({currency})",), sums, currency, frozenset(left_out),
                              empty))
    return lines


def _holder_order(line: Line) -> tuple[Any, ...]:
    """Most money first within each currency (in alphabetical order: amounts in different
    currencies do not compare), then the holders whose cost is unknown (never ranked as 0);
    ties by allocated device-hours, then by name."""
    f = line.figures
    return money_rank(f.get("cost"), line.currency, f.get("allocated_device_hours")) + (line.names,)


def _holder_lines(report: Report, keys: Sequence[str],
                  group_allocated: dict[str, float | None]) -> list[Line]:
    lines = []
    for row in report.rows:
        v = values(row)
        # each holder's allocated hours as a share of its group's, used and active as shares
        # of what it held
        v["allocated_share_ratio"] = ratio(v.get("allocated_device_hours"),
                                           group_allocated.get(row.resource_group))
        v["used_share_ratio"] = ratio(v.get("used_device_hours"), v.get("allocated_device_hours"))
        v["active_share_ratio"] = v.get("efficiency_ratio")  # active / allocated, where known
        names = [label(getattr(row, k)) for k in keys]
        held = [i for i, k in enumerate(keys) if k in HOLDER_KEYS]
        if held and all(getattr(row, keys[i]) is None for i in held):
            names[held[0]] = NO_HOLDER  # the devices' time that no holder was seen to hold
        lines.append(Line(tuple(names), v, row.currency))
    return sorted(lines, key=_holder_order)


def content(views: Views) -> Content:
    """The page's content from the views (see :class:`Content`)."""
    c = Content(views)
    groups = views.groups
    month = month_to_date(groups, views.month)
    c.groups = _group_lines(groups, month)
    extra = _month_only_lines(month_only(month, groups, values))
    c.budget_groups = c.groups + extra
    # measured: some row knows it (an export without activity has the columns, all empty)
    c.activity = any(line.figures.get("active_device_hours") is not None for line in c.groups)
    c.reasons = reason_columns(values(row) for row in views.holders.rows)
    reason_cols = [col for cols in c.reasons.values() for col in cols.values()]
    summed = HOUR_COLUMNS + MONEY_COLUMNS + OTHER_COLUMNS + tuple(reason_cols)
    c.currencies = money_currencies(line.figures for line in c.budget_groups)
    c.pools = _pool_lines(views.pools, summed, c.currencies)
    c.group_totals = _totals(budget_once(line.figures for line in c.groups),
                             summed + ("budget",) + tuple(MONTH_COLUMNS), c.currencies)
    if month is None:  # not read: nothing summed
        for line in c.group_totals:
            line.empty.update({k: NOT_READ for k in MONTH_COLUMNS if k in line.figures})
    c.group_totals[0].figures["coverage_ratio"] = coverage(groups)
    c.budget_totals = _budget_totals(c.budget_groups, c.group_totals, c.currencies) if extra \
        else c.group_totals
    c.holder_keys = tuple(views.holders.group_by)
    allocated = {row.resource_group: values(row).get("allocated_device_hours")
                 for row in groups.rows}
    every = _holder_lines(views.holders, c.holder_keys, allocated)
    c.holders = every[:TABLE_HOLDERS]
    c.most_held = sorted(every, key=lambda line: (
        -(line.figures.get("allocated_device_hours") or 0.0), line.names))[:CHART_HOLDERS]
    rest = every[TABLE_HOLDERS:]
    if rest:  # (one line per currency too where the groups bill in several)
        c.holders_rest = [Line((f"{len(rest)} more holders" + line.names[0][len("total"):],),
                               line.figures, line.currency, line.partial)
                          for line in _totals([line.figures for line in rest], summed,
                                              c.currencies)]
    c.holders_total = _totals([line.figures for line in every], summed, c.currencies)
    _waiting(c, [line.figures for line in every])
    priced = [row.resource_group for row, line in zip(groups.rows, c.groups)
              if line.figures.get("cost") is not None]
    currency = {row.resource_group: row.currency for row in groups.rows}
    c.burn_columns = tuple((label(group) + (f" ({currency[group]})" if several(c.currencies)
                                            else ""), group) for group in priced)
    so_far: dict[str, float] = dict.fromkeys(priced, 0.0)
    gaps: set[str] = set()  # groups with a day of data whose cost is unknown: left out so far
    for name, report in views.trend:
        rows = [values(row) for row in report.rows]
        day = _totals(rows, summed, c.currencies)[0] if rows else Line((), {})
        figures, partial, empty = dict(day.figures), set(day.partial), dict(day.empty)
        if rows and several(c.currencies):  # the day's amounts, a column per currency
            sums, left_out, said = money_figures(rows, ("cost", "idle_cost"), c.currencies)
            figures.update(sums)
            partial |= left_out
            empty.update(said)
        figures["coverage_ratio"] = coverage(report)
        c.trend.append(Line((name,), figures, partial=frozenset(partial), empty=empty))
        costs = {row.resource_group: values(row).get("cost") for row in report.rows}
        burn: dict[str, Any] = {}
        for group in priced:
            cost = costs.get(group)
            if cost is not None:
                so_far[group] += cost
            elif group in costs:
                gaps.add(group)
            burn[group] = None if cost is None else so_far[group]
        c.burn.append(Line((name,), burn, partial=frozenset(gaps)))
    page_notes(c, month is not None)
    return c


def _waiting(c: Content, holders: Sequence[dict[str, Any]]) -> None:
    """Per waiting reason, all holders together: its device-hours, their share of the holders'
    allocated ones and its cost, per currency where the groups bill in several (amounts in
    different currencies do not add up); a sum that leaves out holders where it is unknown
    (an unpriced group's cost) is marked as a lower bound, as every total."""
    held = total(f.get("allocated_device_hours") for f in holders)
    c.waiting_costs = money_keys("cost", "cost", c.currencies)
    for reason, columns in c.reasons.items():
        seconds, cost = columns["seconds"], columns["cost"]
        hours = total(f.get(seconds) for f in holders)
        hours = None if hours is None else hours / 3600.0
        figures: dict[str, Any] = {"hours": hours, "share": ratio(hours, held)}
        # left out: a holder's allocated time whose reasons are unknown, a reason's time whose
        # cost is (rows without allocated time, or without that reason, leave nothing out)
        partial, empty = set(), {}
        if partial_columns(holders, (seconds,)):  # (:func:`.sums.left_out`)
            partial |= {"hours", "share"}
        for _, key, currency in c.waiting_costs:
            figures[key], short, said = money_sum(holders, cost, currency, c.currencies)
            if short:
                partial.add(key)
            if said is not None:  # nothing is priced: "no price", not unknown
                empty[key] = said
        c.waiting.append(Line((reason,), figures, partial=frozenset(partial), empty=empty))

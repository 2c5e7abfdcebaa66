"""The report's page: its sections' tables (one beside every chart, holding the chart's numbers)
and the HTML, written by Jinja2 with autoescaping from ``report.html.j2``: every name from the
data (a group, a pod, a label) is escaped text, never markup.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Sequence

from allsmi.accounting.htmlreport.charts import Chart, charts, svg
from allsmi.accounting.htmlreport.data import (
    Content, Line, Views, content, coverage, label)
from allsmi.accounting.htmlreport.sums import money_keys, several
from allsmi.accounting.periods import iso

#: How each kind of figure is printed: decimals (percent for ratios). The CSV has more; a
#: figure printed here is the CSV's rounded to these decimals.
DECIMALS = {"hours": 2, "money": 2, "kwh": 2, "grams": 0, "ratio": 1, "percent": 1, "count": 0}
NOT_MEASURED = "not measured"
UNKNOWN = "unknown"
#: Activity columns (issue 31): absent from an export that does not measure activity.
ACTIVITY = ("active_device_hours", "efficiency_ratio", "active_share_ratio",
            "active_efficiency")


@dataclass(frozen=True)
class Cell:
    text: str
    value: str | None = None
    """The full value (``data-value``), for numbers."""
    numeric: bool = False
    note: str = ""


@dataclass
class Table:
    id: str
    caption: str
    head: list[tuple[str, bool]]
    body: list[list[Cell]] = field(default_factory=list)
    foot: list[list[Cell]] = field(default_factory=list)


@dataclass
class Section:
    id: str
    title: str
    intro: str
    items: list[tuple[tuple[Chart, str] | None, Table | None]]
    """Each chart (and its SVG) with the table of its numbers under it."""
    empty: str = ""
    """Why there is no chart."""


def number(value: Any, kind: str, column: str = "", activity: bool = True,
           why: str = UNKNOWN) -> Cell:
    """A figure as printed: fixed decimals, thousands separated; unknown and not measured
    said in words, never 0."""
    if value is None:
        missing = not activity and column in ACTIVITY
        return Cell(NOT_MEASURED if missing else why, None, True,
                    "na" if not missing else "na unmeasured")
    digits = DECIMALS[kind]
    shown = value * 100.0 if kind == "ratio" else value
    text = f"{shown:,.{digits}f}"
    if text.startswith("-") and not text.strip("-0.,"):  # never "-0.00"
        text = text[1:]
    text += " %" if kind in ("ratio", "percent") else ""
    return Cell(text, repr(float(value)), True)


Columns = Sequence[tuple[str, str, str]]


def _table(id: str, caption: str, names: Sequence[str], columns: Columns,
           lines: Sequence[Line], c: Content, foot: Sequence[Line] = ()) -> Table:
    head = [(n, False) for n in names] + [(title, True) for title, _, _ in columns]

    def cells(line: Line, total: bool) -> list[Cell]:
        out = [Cell(n) for n in line.names]
        out += [Cell("")] * (len(names) - len(line.names))
        f = line.figures
        for _, column, kind in columns:
            if kind == "currency":  # (by kind: a group may be called "currency")
                out.append(Cell(line.currency or f.get("currency") or ""))
            elif kind == "text":
                out.append(Cell(str(f.get(column) or "")))
            elif column not in f and total:  # not a sum (a ratio): left blank
                out.append(Cell("", None, True))
            elif f.get(column) is None and line.empty.get(column) == "":
                out.append(Cell("", None, True))  # nothing summed there (another currency)
            else:
                cell = number(f.get(column), kind, column, c.activity,
                              line.empty.get(column) or _why(f, column))
                if column in line.partial and cell.value is not None:  # a lower bound
                    cell = Cell("≥ " + cell.text, cell.value, True, "partial")
                out.append(cell)
        return out

    return Table(id, caption, head, [cells(line, False) for line in lines],
                 [cells(line, True) for line in foot])


def _why(figures: dict[str, Any], column: str) -> str:
    """What an empty figure means: no budget, no price, or unknown."""
    if column in ("budget", "budget_used_ratio") and figures.get("budget") is None:
        return "no budget"
    if ("cost" in column and "price_per_device_hour" in figures
            and figures.get("price_per_device_hour") is None
            and figures.get("price_per_kwh") is None):
        return "no price"
    return UNKNOWN


BUDGET_COLUMNS: Columns = (
    ("labels", "group_labels", "text"), ("currency", "currency", "currency"),
    ("cost in window", "cost", "money"), ("cost month to date", "month_to_date_cost", "money"),
    ("budget", "budget", "money"), ("budget used month to date", "budget_used_ratio", "ratio"),
    ("forecast month end", "month_end_forecast_cost", "money"))
HOUR_COLUMNS: Columns = (
    ("devices", "device_count", "count"), ("observed device-hours", "observed_device_hours", "hours"),
    ("allocated device-hours", "allocated_device_hours", "hours"),
    ("used device-hours", "used_device_hours", "hours"),
    ("active device-hours", "active_device_hours", "hours"),
    ("idle device-hours", "idle_allocated_device_hours", "hours"),
    ("efficiency (active / allocated)", "efficiency_ratio", "ratio"),
    ("activity source", "activity_method", "text"),
    ("energy kWh", "energy_kwh", "kwh"), ("carbon gCO2e", "carbon_gco2e", "grams"),
    ("coverage", "coverage_ratio", "ratio"))
POOL_COLUMNS: Columns = (
    ("devices", "device_count", "count"), ("allocated device-hours", "allocated_device_hours", "hours"),
    ("used device-hours", "used_device_hours", "hours"),
    ("active device-hours", "active_device_hours", "hours"),
    ("idle device-hours", "idle_allocated_device_hours", "hours"),
    ("used / allocated", "used_efficiency", "percent"),
    ("active / allocated", "active_efficiency", "percent"),
    ("currency", "currency", "currency"), ("cost", "cost", "money"))
WAITING_COLUMNS: Columns = (("device-hours", "hours", "hours"),
                             ("share of allocated", "share", "ratio"), ("cost", "cost", "money"))
TREND_COLUMNS: Columns = (
    ("allocated device-hours", "allocated_device_hours", "hours"),
    ("active device-hours", "active_device_hours", "hours"),
    ("idle device-hours", "idle_allocated_device_hours", "hours"),
    ("cost", "cost", "money"), ("idle cost", "idle_cost", "money"),
    ("energy kWh", "energy_kwh", "kwh"), ("coverage", "coverage_ratio", "ratio"))


def _holder_columns(c: Content) -> Columns:
    cols: list[tuple[str, str, str]] = [
        ("allocated device-hours", "allocated_device_hours", "hours"),
        ("share of group's allocated", "allocated_share_ratio", "ratio"),
        ("used / allocated", "used_share_ratio", "ratio"),
        ("active / allocated", "active_share_ratio", "ratio"),
        ("idle device-hours", "idle_allocated_device_hours", "hours"),
        ("currency", "currency", "currency"), ("cost", "cost", "money"),
        ("idle cost", "idle_cost", "money")]
    for reason, names in c.reasons.items():
        if c.priced:
            cols.append((f"cost waiting: {reason}", names["cost"], "money"))
        else:
            cols.append((f"seconds waiting: {reason}", names["seconds"], "count"))
    return cols


#: Groups per cost-so-far table: the chart's colours, and what an A4 page holds at print size.
BURN_GROUPS_PER_TABLE = 8


def _burn_tables(burn: Columns, c: Content) -> list[tuple[str | None, Table | None]]:
    """The cost so far per group, under its chart: a column per group, in tables of at most
    :data:`BURN_GROUPS_PER_TABLE` groups (``table-burn``, ``table-burn-2``, ...), so that every
    group is there and each table fits a printed page."""
    unit, per = c.trend_unit, BURN_GROUPS_PER_TABLE
    caption = f"Cost so far in the window per group, {unit} by {unit}"
    if len(burn) <= per:
        return [("burn", _table("table-burn", caption, [unit], burn, c.burn, c) if burn else None)]
    return [("burn" if i == 0 else None,
             _table("table-burn" + (f"-{i // per + 1}" if i else ""),
                    f"{caption} (groups {i + 1} to {min(i + per, len(burn))} of {len(burn)})",
                    [unit], burn[i:i + per], c.burn, c))
            for i in range(0, len(burn), per)]


def sections(c: Content) -> list[Section]:
    """The page's sections, each chart (if it has known values) with its table."""
    drawn = charts(c)

    def section(id: str, title: str, intro: str, empty: str,
                *items: tuple[str | None, Table | None]) -> Section:
        shown = [((drawn[chart], svg(drawn[chart])) if chart in drawn else None, table)
                 for chart, table in items if chart in drawn or table is not None]
        return Section(id, title, intro, shown, "" if any(f for f, _ in shown) else empty)

    unit = c.trend_unit
    burn = [(title, key, "money") for title, key in c.burn_columns] if c.burn else []
    keys = [k.replace("_", " ") for k in c.holder_keys]
    foot = c.holders_rest + c.holders_total
    waiting_columns = WAITING_COLUMNS[:2] + tuple(
        (title, key, "money") for title, key, _ in c.waiting_costs)
    ranked = "allocated device-hours (nothing is priced)"
    if c.priced:  # never an unknown cost as 0, never amounts in two currencies compared
        ranked = ("cost" if not several(c.currencies) else "cost within each currency ("
                  + ", ".join(c.currencies) + ": amounts in different currencies do not "
                  "compare)") + ", then those whose cost is unknown, by allocated device-hours"
    return [
        section("budget", "Cost against budget",
                "Each group's cost in this window; its cost in the month to date (from the "
                "first of the month holding the window's end to the window's end), the share "
                "of its monthly budget used so far, and that cost extrapolated linearly to the "
                "month's end (for every group, with a budget or not); then how the cost built "
                "up over the window.", "No costs: no group is priced."
                if not c.budget_priced else "No chart: the amounts are in several currencies ("
                + ", ".join(c.currencies) + "), which share no axis.",
                ("budget", _table("table-budget", "Cost, budget and forecast per group",
                                  ["resource group"], BUDGET_COLUMNS, c.budget_groups, c,
                                  c.budget_totals)),
                *_burn_tables(burn, c)),
        section("hours", "Allocated, active and idle device-hours",
                "Per group: device-hours allocated to holders, used (utilization-weighted), "
                "active (weighted by compute activity) and allocated but idle.",
                "No device-hours known in this window.",
                ("hours", _table("table-hours", "Device-hours, energy and carbon per group",
                                 ["resource group"], HOUR_COLUMNS, c.groups, c,
                                 c.group_totals[:1]))),  # (the others are costs only)
        section("holders", "Where the money went",
                f"The holders ({', '.join(keys)}) ranked by {ranked}: their share of the "
                "group's allocated time, how much of what they held they used and kept "
                "active, and what idle time cost."
                + ("" if c.reasons else " Waiting reasons: not measured by this export."),
                "No holder held a device in this window.",
                ("holders", _table("table-holders", "Holders by cost", keys,
                                   _holder_columns(c), c.holders, c, foot)),
                ("waiting", _table("table-waiting", "What the holders waited on, all holders",
                                   ["reason"], waiting_columns, c.waiting, c)
                 if c.waiting else None)),
        section("pools", "Efficiency per vendor and model",
                "Each pool of devices across groups: how much of its allocated time was used "
                "(utilization) and active (compute activity).",
                "No allocated time in this window.",
                ("pools", _table("table-pools", "Efficiency per vendor and model",
                                 ["vendor", "model"], _per_currency(POOL_COLUMNS, c), c.pools,
                                 c))),
        section("trend", f"Per {unit}",
                f"The window {unit} by {unit}: the same figures, summed over groups.",
                "No device data in this window.",
                ("trend_cost", None),
                ("trend", _table("table-trend", f"Per {unit}", [unit],
                                 _per_currency(TREND_COLUMNS, c), c.trend, c))),
    ]


def _per_currency(columns: Columns, c: Content) -> Columns:
    """``columns`` with each amount one column per currency where the groups bill in several
    (amounts in different currencies do not add up), and without the currency column then."""
    if not several(c.currencies):
        return columns
    out: list[tuple[str, str, str]] = []
    for title, column, kind in columns:
        if kind == "money":
            out += [(name, key, kind)
                    for name, key, _ in money_keys(column, title, c.currencies)]
        elif kind != "currency":
            out.append((title, column, kind))
    return tuple(out)


def render_html(views: Views) -> str:
    """The whole report as one self-contained HTML document."""
    import jinja2

    c = content(views)
    env = jinja2.Environment(loader=jinja2.PackageLoader("allsmi.accounting.htmlreport", "."),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    report = views.groups
    page = env.get_template("report.html.j2").render(
        title=f"allsmi report: {period_name(report.window)}",
        start=iso(report.window.start), end=iso(report.window.end),
        tz=str(report.window.start.tzinfo), source=label(report.source),
        source_data=label(report.source_data) if report.source_data else "",
        coverage=number(coverage(report), "ratio"), threshold=f"{views.threshold:.2%}",
        warnings=c.warnings, missing=c.missing, sections=_shown(c), safe_svg=_markup)
    return page


def _shown(c: Content) -> list[Section]:
    """The sections of the page: none without device data in the window, except the budgets'
    where some group's month to date has rows (it spent earlier in the month: whether it is
    over its budget is said in the table, as with data in the window)."""
    if c.views.groups.coverage_ratio is not None:
        return sections(c)
    return [s for s in sections(c) if s.id == "budget"] if c.budget_groups else []


def period_name(window: Any) -> str:
    """``2026-03`` for a calendar month, ``2026-03-14`` for a day, else both ends."""
    start, end = window.start, window.end
    midnight = dict(hour=0, minute=0, second=0, microsecond=0)
    if start == start.replace(**midnight) and end == end.replace(**midnight):
        if start.day == 1 and end.day == 1 and (end.month - start.month) % 12 == 1 \
                and end - start < dt.timedelta(days=32):
            return start.strftime("%Y-%m")
        if end - start <= dt.timedelta(hours=25) and end.date() - start.date() == dt.timedelta(days=1):
            return start.date().isoformat()
    return f"{iso(start)} to {iso(end)}"


def _markup(text: str) -> Any:
    """pygal's SVG (its text nodes escaped by its XML serializer) as markup."""
    from markupsafe import Markup
    return Markup(text)

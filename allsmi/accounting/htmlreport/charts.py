"""The report's charts: what each one draws (:class:`Chart`), and drawing it as inline SVG with
pygal (the ``allsmi[report]`` extra; see docs/report.md for why pygal).

A chart is made only of known values: an unknown one is a missing bar or point (pygal leaves
``None`` out), never a bar of height 0. A missing bar looks like a bar of height 0, so the label
of a bar chart's line with an unknown value says which it is (``npu (not drawn: idle)``); a
line chart's missing point is a gap in its line. Every axis of amounts starts at 0 (a line
chart's too), so that the lowest line never reads as nothing. The SVG is deterministic (its id
is the chart's, its comments are removed, the ids inside it start with its own, so that ids are
unique on the page) and carries no script, no font and no link: its colours follow the page's
text colour (``currentColor``), so one drawing serves the light and the dark page.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

from allsmi.accounting.htmlreport.data import CHART_HOLDERS, Content, joined

#: Colour-blind-safe series colours (Okabe and Ito), the same in light and dark.
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#999999")


#: Series per row of a chart's legend, and the height of a row (CSS px of the drawing).
LEGEND_COLUMNS = 4
LEGEND_ROW = 24
#: The drawing's width (CSS px of the drawing; the page scales it to the column).
WIDTH = 800
#: A name's characters shown on a chart's axis (the table beside it has it whole), and the
#: height a character of a label slanted under the plot takes (CSS px of the drawing).
LABEL_LENGTH = 40
LABEL_SLANT = 4

#: What to do without the extra (the pip of the Python that runs allsmi).
EXTRA_HINT = f"install the extra: {sys.executable} -m pip install 'allsmi[report]'"


class ChartsUnavailable(RuntimeError):
    """pygal or Jinja2 is not installed."""


@dataclass(frozen=True)
class Chart:
    """One chart: ``series`` of values, one per label (``None``: unknown, not drawn)."""

    id: str
    title: str
    kind: str
    """``bar`` (vertical), ``hbar`` (horizontal) or ``line``."""
    labels: tuple[str, ...]
    series: tuple[tuple[str, tuple[float | None, ...]], ...]
    unit: str = ""

    @property
    def marks(self) -> int:
        """Bars or points drawn: the known values."""
        return sum(v is not None for _, values in self.series for v in values)


def require_libraries() -> None:
    """Raise :class:`ChartsUnavailable` (naming the extra) unless pygal and Jinja2 import."""
    try:
        import jinja2  # noqa: F401
        import pygal  # noqa: F401
    except ImportError as exc:
        raise ChartsUnavailable(f"allsmi report needs {exc.name or 'pygal and jinja2'}: "
                                f"{EXTRA_HINT}") from None


def _series(lines: Sequence[Any], columns: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
    """``(name, values)`` per column that has a known value on some line."""
    out = []
    for title, column in columns:
        vals = tuple(line.figures.get(column) for line in lines)
        if any(v is not None for v in vals):
            out.append((title, vals))
    return tuple(out)


def charts(c: Content) -> dict[str, Chart]:
    """The charts of the report's sections (a section with nothing known has none)."""
    out: dict[str, Chart] = {}
    group_names = tuple(line.names[0] for line in c.groups)
    one_currency = len(c.currencies) == 1  # amounts in several are never drawn on one axis
    if c.budget_priced and one_currency:
        out["budget"] = Chart("budget", "Cost in the window and month to date, month-end "
                              "forecast and budget per group", "hbar",
                              tuple(line.names[0] for line in c.budget_groups),
                              _series(c.budget_groups, (
                                  ("cost in window", "cost"),
                                  ("cost month to date", "month_to_date_cost"),
                                  ("forecast month end", "month_end_forecast_cost"),
                                  ("budget", "budget"))), c.currencies[0])
    if c.priced and len(c.currencies) == 1 and c.burn:
        lines = _series(c.burn, c.burn_columns)
        which = "per group"
        if len(lines) > len(COLOURS):  # a colour each, never one for two groups
            which = f"the {len(COLOURS)} costliest of {len(lines)} groups (every group in the table)"
            costliest = set(sorted(range(len(lines)), reverse=True, key=lambda i: max(
                (v for v in lines[i][1] if v is not None), default=0.0))[:len(COLOURS)])
            lines = tuple(line for i, line in enumerate(lines) if i in costliest)
        out["burn"] = Chart("burn", f"Cost so far in the window, {which}, {c.trend_unit} by "
                            f"{c.trend_unit}", "line", tuple(line.names[0] for line in c.burn),
                            lines, c.currencies[0])
    hours = (("allocated", "allocated_device_hours"), ("active", "active_device_hours"),
             ("idle", "idle_allocated_device_hours"))
    out["hours"] = Chart("hours", "Allocated, active and idle device-hours per group", "bar",
                         group_names, _series(c.groups, hours), "device-hours")
    by_cost = c.priced and one_currency  # else by device-hours: the most held, not the first
    ranked = c.holders[:CHART_HOLDERS] if by_cost else c.most_held  # by cost in the table
    names = tuple(joined((n for n in line.names if n != "-"), " / ") or "(nobody)" for line in ranked)
    if by_cost:
        out["holders"] = Chart("holders", f"The {len(ranked)} holders that cost the most",
                               "hbar", names, _series(ranked, (("cost", "cost"),
                                                               ("idle cost", "idle_cost"))),
                               c.currencies[0])
    else:
        out["holders"] = Chart("holders", f"The {len(ranked)} holders that held the most",
                               "hbar", names, _series(ranked, (
                                   ("allocated", "allocated_device_hours"),
                                   ("idle", "idle_allocated_device_hours"))), "device-hours")
    if c.waiting:
        out["waiting"] = Chart("waiting", "What the holders waited on (device-hours)", "bar",
                               tuple(line.names[0] for line in c.waiting),
                               _series(c.waiting, (("device-hours", "hours"),)), "device-hours")
    pools = [line for line in c.pools if line.figures.get("allocated_device_hours")]
    out["pools"] = Chart("pools", "Efficiency per vendor and model (share of allocated time)",
                         "bar", tuple(line.names[1] if line.names[1] != "-" else line.names[0]
                                      for line in pools),
                         _series(pools, (("used", "used_efficiency"),
                                         ("active", "active_efficiency"))), "%")
    days = tuple(line.names[0] for line in c.trend)
    out["trend"] = Chart("trend", "Device-hours per day" if c.trend_unit == "day" else
                         "Device-hours per month", "line", days,
                         _series(c.trend, hours), "device-hours")
    if c.priced and len(c.currencies) == 1:
        out["trend_cost"] = Chart("trend_cost", f"Cost per {c.trend_unit}", "line", days,
                                  _series(c.trend, (("cost", "cost"), ("idle cost", "idle_cost"))),
                                  c.currencies[0])
    return {k: v for k, v in out.items() if v.marks}


def svg(chart: Chart) -> str:
    """The chart as an inline ``<svg>`` element (pygal)."""
    import pygal
    from pygal.style import Style

    style = Style(background="transparent", plot_background="transparent",
                  foreground="currentColor", foreground_strong="currentColor",
                  foreground_subtle="#8888", colors=COLOURS, font_family="sans-serif",
                  label_font_size=13, major_label_font_size=13, legend_font_size=14,
                  title_font_size=16, value_font_size=12, tooltip_font_size=12,
                  opacity=".9", opacity_hover=".9", transition="0ms")
    kind = {"bar": pygal.Bar, "hbar": pygal.HorizontalBar, "line": pygal.Line}[chart.kind]
    rows = len(chart.labels)
    labels = axis_labels(chart)
    height = max(320, 60 + rows * 16 * max(1, len(chart.series))) if chart.kind == "hbar" else 380
    if chart.kind != "hbar" and rows > 6:  # labels slanted under the plot: room for them
        height += LABEL_SLANT * max(0, max(map(len, labels)) - LABEL_LENGTH // 2)
    # room for the legend under the plot, a row per LEGEND_COLUMNS series: pygal's height is
    # the whole drawing's, and a legend taller than it leaves the plot no height (pygal then
    # never returns, splitting the axis title into lines of no width)
    columns = legend_columns(chart, labels)
    height += LEGEND_ROW * -(-len(chart.series) // columns)
    graph = kind(style=style, js=[], disable_xml_declaration=True, explicit_size=False,
                 width=WIDTH, height=height, legend_at_bottom=True,
                 legend_at_bottom_columns=columns,
                 truncate_label=-1, truncate_legend=30, show_x_guides=False,
                 include_x_axis=True,
                 # a horizontal chart's amounts under the plot: only its major ones labelled
                 # (each minor one's too ran together: "6000800010000")
                 **({"show_minor_x_labels": False} if chart.kind == "hbar" else {
                     "x_label_rotation": 30 if rows > 6 else 0,
                     "show_minor_x_labels": rows <= 16,
                     "x_labels_major_every": max(1, rows // 10)}),
                 print_values=False, dots_size=3, allow_interruptions=True,
                 classes=("pygal-chart", f"chart-{chart.id}"),
                 y_title=chart.unit if chart.kind != "hbar" else None)
    graph.title = f"{chart.title} ({chart.unit})" if chart.kind == "hbar" else chart.title
    graph.uuid = f"svg-{chart.id}"
    # pygal draws a horizontal chart's first label at the bottom: the first line goes on top
    order = (lambda xs: list(reversed(xs))) if chart.kind == "hbar" else list
    graph.x_labels = order(labels)
    for name, vals in chart.series:
        graph.add(name, order(vals))
    graph.add_xml_filter(_strip_comments)
    return graph.render(is_unicode=True)


def legend_columns(chart: Chart, labels: Sequence[str]) -> int:
    """Series per row of the legend: at most :data:`LEGEND_COLUMNS`, as many as the plot's
    width holds side by side (pygal lays the legend out over the plot's width, the drawing's
    less its labels: beside a horizontal chart, and past a slanted label's end, names take
    room; with more columns than fit, the series' names are drawn over each other). Widths
    as pygal estimates text: 0.6 of the font size a character."""
    if chart.kind == "hbar":
        taken = 0.6 * 13 * max(map(len, labels), default=0)
    elif len(labels) > 6:  # slanted by 30 degrees: the last one's end is past the plot's
        taken = 0.87 * 0.6 * 13 * len(labels[-1]) - 0.9 * (WIDTH - 80) / len(labels)
    else:
        taken = 0.0
    plot = WIDTH - 80 - max(0.0, taken)
    item = 0.6 * 14 * max((min(len(title), 30) for title, _ in chart.series), default=0) + 24
    return max(1, min(LEGEND_COLUMNS, int(plot // item)))


def axis_labels(chart: Chart) -> list[str]:
    """The chart's labels as drawn: cut to :data:`LABEL_LENGTH`; in a bar chart, a line with an
    unknown value says which (its bar is missing, which would read as 0) after the cut."""
    out = []
    for i, name in enumerate(chart.labels):
        if len(name) > LABEL_LENGTH:
            name = name[:LABEL_LENGTH - 1] + "\u2026"
        missing = [title for title, values in chart.series if values[i] is None]
        if chart.kind != "line" and missing:
            name += " (not drawn)" if len(missing) == len(chart.series) and len(missing) > 1 \
                else f" (not drawn: {', '.join(missing)})"
        out.append(name)
    return out


def _strip_comments(root: Any) -> Any:
    """pygal's comments (a generation date among them: the output stays the same bytes) and
    its script (the chart's configuration for its tooltips, even with ``js=[]``: the page runs
    no script, and its Content-Security-Policy would refuse it); the ids inside the drawing
    prefixed with its own (pygal gives every chart's legend ``activate-serie-0``...: an id
    appears once on a page)."""
    own = root.get("id") or ""
    for parent in list(root.iter()):
        for child in list(parent):
            if not isinstance(child.tag, str) or child.tag.rsplit("}", 1)[-1] == "script":
                parent.remove(child)
            elif child.get("id") and not child.get("id").startswith(own + "-"):
                child.set("id", f"{own}-{child.get('id')}")
    return root

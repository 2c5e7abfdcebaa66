"""What the report's charts and sums say beside its tables: a line chart's axis starts at 0 (the
lowest line never reads as nothing), a bar missing for an unknown value is said on its label
(a missing bar looks like a bar of 0), ids are unique on the page (every chart's legend once
had the same ones), the legend's names are never drawn over each other, and a total of the
holders' waiting costs is marked at least only where it leaves out a holder's waiting."""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterator

import pytest

from allsmi.accounting.htmlreport.data import Views, content
from allsmi.accounting.htmlreport.page import render_html
from allsmi.schema import WAITING_REASONS

from .browser import browser, open_page
from .support import NO_BUDGETS, a_past_day, allsmi
from .test_report_money import H100, money_views

GE = "\u2265 "


class _Page(HTMLParser):
    """Every id of the page; per chart, the texts of its axes (``x``: the names, ``y``: the
    amounts) and of its legend; per table, its rows' cells."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.axes: dict[tuple[str, str], list[str]] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self._open: list[tuple[str, str]] = []  # (tag, class)
        self._chart = self._table = ""
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"] or "")
        if tag == "figure":
            self._chart = (a.get("id") or "")[len("chart-"):]
        if tag == "table":
            self._table = a.get("id") or ""
            self.tables[self._table] = []
        if tag == "tr" and self._table:
            self.tables[self._table].append([])
        if tag in ("td", "th") and self._table:
            self._cell = []
        if tag not in ("meta", "br"):  # (void)
            self._open.append((tag, a.get("class") or ""))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.extend(v or "" for k, v in attrs if k == "id" and v)  # (<path ... />)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        if tag == "table":
            self._table = ""
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if not self._open or self._open[-1][0] != "text":
            return
        classes = [c for _, cls in self._open for c in cls.split()]
        where = "y" if "y" in classes and "axis" in classes else \
            "x" if "x" in classes and "axis" in classes else \
            "legend" if "legend" in classes else ""
        if where:
            self.axes.setdefault((self._chart, where), []).append(data)


def _parsed(page: str) -> _Page:
    parsed = _Page()
    parsed.feed(page)
    return parsed


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> _Page:
    """A past day of the simulated mixed node, priced without budgets (a second of work): its
    npu group's idle time and its MIG pools' use are unknown, and the holders of no device
    (the time nobody held) have no waiting costs, having no waiting time."""
    work = tmp_path_factory.mktemp("day")
    (work / "c.toml").write_text(NO_BUDGETS)
    out = allsmi("report", "--config", "c.toml", "--simulate", "mixed", "--period",
                 a_past_day(), "-o", "day.html", cwd=work)
    assert out.returncode == 0, out.stderr
    return _parsed((work / "day.html").read_text())


def _amounts(page: _Page, chart: str) -> list[float]:
    return [float(t.replace(",", "")) for t in page.axes[(chart, "y")]]


def test_every_line_charts_axis_starts_at_zero(day: _Page) -> None:
    """Allocated (about 860 device-hours a day) beside idle (about 190) on an axis from 200
    drew idle on the axis, as if none; the cost so far of the cheapest group likewise."""
    lines = ("burn", "trend", "trend_cost")
    assert all((chart, "y") in day.axes for chart in lines)
    for chart in lines:
        assert min(_amounts(day, chart)) == 0, (chart, day.axes[(chart, "y")])
    for chart in ("hours", "pools", "waiting"):  # (bars start at 0 anyway)
        assert min(_amounts(day, chart)) == 0, chart


def _column(page: _Page, table: str, title: str) -> dict[str, str]:
    head, *rows = page.tables[table]
    return {row[0]: row[head.index(title)] for row in rows}


def test_a_bar_missing_for_an_unknown_value_is_said_on_its_label(day: _Page) -> None:
    """npu's idle device-hours are unknown: its idle bar is missing, which read as none idle."""
    idle = _column(day, "table-hours", "idle device-hours")
    names = day.axes[("hours", "x")]
    assert idle["npu"] == "unknown" and "npu (not drawn: idle)" in names
    for group, cell in idle.items():
        if group != "total":
            assert (f"{group} (not drawn: idle)" in names) == (cell == "unknown"), group
            assert (group in names) == (cell != "unknown"), group
    # the pools: a MIG profile's use is unknown (its active time is known)
    head, *rows = day.tables["table-pools"]
    used, active = head.index("used / allocated"), head.index("active / allocated")
    drawn = day.axes[("pools", "x")]
    mig = [row for row in rows if "MIG" in row[1]]
    assert mig
    for row in rows:
        missing = [name for name, at in (("used", used), ("active", active))
                   if row[at] == "unknown"]
        shown = row[1] if len(missing) < 2 else row[1] + " (not drawn)"
        if len(missing) == 1:
            shown += f" (not drawn: {missing[0]})"
        assert shown in drawn, (row, drawn)
    assert any(row[used] == "unknown" != row[active] for row in mig)


def test_every_id_is_once_on_the_page(day: _Page) -> None:
    """pygal gives each chart's legend the ids activate-serie-0, -1...: eight charts, eight of
    each (an id names one element of a document)."""
    assert len(day.ids) > 20
    assert sorted(i for i in set(day.ids) if day.ids.count(i) > 1) == []


def test_the_holders_total_waiting_costs_are_the_waiting_tables(day: _Page) -> None:
    """The time nobody held has no waiting time, so no waiting cost (empty in the export): it
    leaves nothing out, and the holders' total of each reason's cost is whole, as the waiting
    table says it (it was marked at least there)."""
    waiting = _column(day, "table-waiting", "cost")
    head, *rows = day.tables["table-holders"]
    total = next(row for row in rows if row[0] == "total")
    assert set(waiting) == set(WAITING_REASONS)
    for reason, cost in waiting.items():
        assert not cost.startswith(GE) and cost[0].isdigit(), (reason, cost)
        assert total[head.index(f"cost waiting: {reason}")] == cost, reason


def _waiting_views(unknown_user: str) -> Views:
    """Two holders of a priced group waiting on input; ``unknown_user``'s waiting not known."""
    views = money_views([("a", *H100, "ann"), ("a", *H100, "bob")],
                        '[groups.a]\nprice_per_device_hour = 2.0\ncurrency = "EUR"\n',
                        waiting=True)
    holders = views.holders
    rows = tuple(dataclasses.replace(r, waiting_seconds=None, waiting_cost=None)
                 if r.user == unknown_user else r for r in holders.rows)
    return dataclasses.replace(views, holders=dataclasses.replace(holders, rows=rows))


def test_a_waiting_cost_leaving_out_a_holders_unknown_waiting_is_at_least() -> None:
    """bob held the device half the time, what he waited on unknown: each reason's device-hours
    and cost leave his out (both at least, not only the hours)."""
    c = content(_waiting_views("bob"))
    line = {line.names[0]: line for line in c.waiting}["input"]
    assert {"hours", "share", "cost"} <= line.partial
    total = c.holders_total[0]
    assert "waiting_input_cost" in total.partial and "waiting_input_seconds" in total.partial
    whole = content(_waiting_views("nobody"))
    assert not {line.names[0]: line for line in whole.waiting}["input"].partial
    assert "waiting_input_cost" not in whole.holders_total[0].partial


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    yield from browser()


@pytest.mark.integration
def test_a_legend_beside_long_names_is_never_drawn_over_itself(
        chrome: Any, tmp_path: Path) -> None:
    """The budget chart's four series beside a group of a 40-character name: pygal lays the
    legend over the plot's width, which the name narrows; four columns drew "cost month to
    date" over "forecast month end"."""
    group = "g" * 40
    config = (f'[groups.{group}]\nprice_per_device_hour = 2.0\ncurrency = "EUR"\n'
              'budget_per_month = 100000\n')
    path = tmp_path / "long.html"
    path.write_text(render_html(money_views([(group, *H100, "ann")], config)))
    opened = open_page(chrome, path)
    try:
        boxes = opened.page.evaluate("""() => Array.from(document.querySelectorAll(
            '#chart-budget svg .legends text')).map(t => {
              const r = t.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom];
            })""")
    finally:
        opened.page.close()
    assert len(boxes) == 4
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = a[1] <= b[0] or b[1] <= a[0] or a[3] <= b[2] or b[3] <= a[2]
            assert apart, (a, b)


@pytest.mark.parametrize("top", [30000.0, 260.0, 2.6, 97.0])
def test_a_horizontal_charts_amounts_never_run_together(top: float) -> None:
    """Every minor amount under a horizontal chart was labelled too, 37 px apart for five-digit
    figures: "6000800010000". Only the major ones are: each label's width (as pygal estimates
    text, 0.6 of the font size a character) fits before the next one's start."""
    import re

    from allsmi.accounting.htmlreport.charts import Chart, svg
    chart = Chart("budget", "Cost", "hbar", ("inference", "npu", "training"),
                  (("cost", (top * 0.87, top / 4, top / 2)), ("budget", (top, None, top * 0.4))), "USD")
    drawing = svg(chart)
    axis = re.search(r'<g class="axis x.*?(?=<g class="axis y|<g class="series)', drawing, re.S)
    assert axis is not None
    labels = [(float(x), text) for x, text in
              re.findall(r'<text x="([\d.]+)"[^>]*>([^<]+)</text>', axis.group(0))]
    assert len(labels) >= 2, labels
    for (x, text), (next_x, _) in zip(labels, labels[1:]):
        assert next_x - x > 0.6 * 13 * (len(text) + len(_)) / 2, labels


def test_a_name_written_right_to_left_never_reorders_its_neighbours(tmp_path: Path) -> None:
    """A holder's names (group / user / job) and a group's labels are joined into one text: a
    Hebrew user beside a numeric job showed the job on the wrong side. Each name is isolated
    (U+2068 ... U+2069), in the charts' drawings as in the tables."""
    from allsmi.accounting.htmlreport.charts import Chart, svg
    from allsmi.accounting.htmlreport.data import joined
    text = joined(("training", "\u05d3\u05d5\u05d3", "42"), " / ")
    assert text == "\u2068training\u2069 / \u2068\u05d3\u05d5\u05d3\u2069 / \u206842\u2069"
    assert joined((), " / ") == ""
    drawing = svg(Chart("holders", "Holders", "hbar", (text,), (("cost", (1.0,)),), "USD"))
    assert text in drawing

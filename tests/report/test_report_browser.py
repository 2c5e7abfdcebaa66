"""The report opened in a real headless browser (chromium through Playwright): a month of the
simulated mixed node with budgets (training over its forecast, inference under), and a day of
holders with hostile names. No console error, no request but the file itself, every chart
with as many bars or points as its table has known values, the tables' numbers equal to the
CSV export of the same window and options, nothing wider than the page at 1280 x 800 or on a
390 px phone or printed on A4 (forty priced groups too), hostile names shown as text."""

from __future__ import annotations

import calendar
import datetime as dt
from pathlib import Path
from typing import Any, Iterator

import pytest

from .browser import OVERFLOW, browser, header, marks, open_page, table
from .support import (
    BUDGETS, HOSTILE_USERS, NO_BUDGETS, a_past_day, allsmi, csv_rows, hostile_scenario, last_month,
    printed)

pytestmark = [pytest.mark.integration]

GROUPS = ("inference", "npu", "training")


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    yield from browser()


def _month(work: Path) -> tuple[Path, list[dict[str, str]]]:
    """Last month of the simulated mixed node: the report, and the CSV export (default
    grouping) of the same window and options."""
    (work / "c.toml").write_text(BUDGETS)
    args = ("--config", "c.toml", "--simulate", "mixed", "--period", last_month())
    out = allsmi("report", *args, "-o", "month.html", cwd=work)
    assert out.returncode == 0, out.stderr
    # as the export says it (a whole month: its forecast is its cost)
    assert "group training cost" in out.stderr and "above its monthly budget" in out.stderr
    export = allsmi("export", *args, cwd=work)
    assert export.returncode == 0, export.stderr
    return work / "month.html", csv_rows(export.stdout)


def _hostile(work: Path) -> tuple[Path, list[dict[str, str]]]:
    """A day of holders with hostile names: the report and the export by holder. Priced, without
    budgets: a budget's columns are the month to date, which the export by holder replayed
    (the day's month up to it: 20 s of CPU instead of 1 s) for columns this test never reads."""
    (work / "c.toml").write_text(NO_BUDGETS)
    scenario = hostile_scenario(work / "hostile.toml")
    args = ("--config", "c.toml", "--simulate", str(scenario), "--period", a_past_day())
    out = allsmi("report", *args, "-o", "day.html", cwd=work)
    assert out.returncode == 0, out.stderr
    keys = "resource_group,user,namespace,pod,job"
    export = allsmi("export", *args, "--group-by", keys, cwd=work)
    assert export.returncode == 0, export.stderr
    return work / "day.html", csv_rows(export.stdout)


def _sum(rows: list[dict[str, str]], column: str) -> float | None:
    cells = [float(r[column]) for r in rows if r[column] != ""]
    return sum(cells) if cells else None


def _shown(value: float | None, digits: int = 2) -> str:
    return "unknown" if value is None else printed(value, digits)


def _known(cells: list[str]) -> int:
    return sum(c not in ("unknown", "not measured", "no price", "no budget") for c in cells)


@pytest.mark.long(70)
def test_a_month_of_the_simulated_node_in_the_browser(chrome: Any, tmp_path: Path) -> None:
    """One test, so that the month is replayed once whichever worker runs it."""
    month = _month(tmp_path)
    _opens_clean_and_fits_at_desktop_and_phone_width(chrome, month, tmp_path)
    _tables_equal_the_csv_export(chrome, month)
    _charts_draw_one_mark_per_known_value(chrome, month)
    _dark_and_print(chrome, month)


def _opens_clean_and_fits_at_desktop_and_phone_width(
        chrome: Any, month: tuple[Path, list[dict[str, str]]], tmp_path: Path) -> None:
    path, _ = month
    for width, height in ((1280, 800), (390, 844)):
        opened = open_page(chrome, path, width, height)
        try:
            assert opened.errors == [] and opened.console == []
            assert opened.requests == [path.as_uri()]  # nothing fetched: all inline
            assert opened.page.evaluate(OVERFLOW) == [], f"overflow at {width} px"
            shot = tmp_path / f"report-{width}.png"
            opened.page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        finally:
            opened.page.close()


def _tables_equal_the_csv_export(chrome: Any, month: tuple[Path, list[dict[str, str]]]) -> None:
    path, rows = month
    opened = open_page(chrome, path)
    page = opened.page
    try:
        by_group = {g: [r for r in rows if r["resource_group"] == g] for g in GROUPS}
        budget = {line[0]: line for line in table(page, "table-budget")}
        head = header(page, "table-budget")
        assert head == ["resource group", "labels", "currency", "cost in window",
                        "cost month to date", "budget", "budget used month to date",
                        "forecast month end"]
        cost, to_date, limit, forecast = (head.index(t) for t in (
            "cost in window", "cost month to date", "budget", "forecast month end"))
        for group, mine in by_group.items():
            line = budget[group]
            # a whole month is its own month to date: every group's forecast is its cost
            assert line[cost] == line[to_date] == _shown(_sum(mine, "cost")), group
            assert line[forecast] == _shown(_sum(mine, "forecast_month_end_cost")), group
            labels = {k[len("label_"):]: v for k, v in mine[0].items()
                      if k.startswith("label_") and v}
            assert line[1] == ", ".join(f"\u2068{k}={v}\u2069" for k, v in sorted(labels.items()))
        assert budget["training"][limit] == "5,000.00" and budget["npu"][limit] == "no budget"
        # the training group is forecast over its budget, inference under
        assert float(budget["training"][forecast].replace(",", "")) > 5000
        assert float(budget["inference"][forecast].replace(",", "")) < 1_000_000
        assert budget["total"][cost] == budget["total"][to_date] == _shown(_sum(rows, "cost"))
        assert budget["total"][forecast] == _shown(_sum(rows, "forecast_month_end_cost"))
        hours = {line[0]: line for line in table(page, "table-hours")}
        head = header(page, "table-hours")
        for column, title in (("allocated_device_hours", "allocated device-hours"),
                              ("observed_device_hours", "observed device-hours"),
                              ("used_device_hours", "used device-hours"),
                              ("active_device_hours", "active device-hours"),
                              ("energy_kwh", "energy kWh")):
            at = head.index(title)
            for group, mine in by_group.items():
                assert hours[group][at] == _shown(_sum(mine, column)), (group, column)
            assert hours["total"][at] == _shown(_sum(rows, column)), column
        at = head.index("carbon gCO2e")
        assert hours["total"][at] == _shown(_sum(rows, "carbon_gco2e"), 0)
        # the trend: a line per day of the month, adding up to the month
        trend = table(page, "table-trend")
        year, mon = map(int, last_month().split("-"))
        assert len(trend) == calendar.monthrange(year, mon)[1]
        assert trend[0][0] == dt.date(year, mon, 1).isoformat()
        total = sum(float(line[1].replace(",", "")) for line in trend)
        assert total == pytest.approx(_sum(rows, "allocated_device_hours"), abs=0.01 * len(trend))
    finally:
        page.close()


def _charts_draw_one_mark_per_known_value(
        chrome: Any, month: tuple[Path, list[dict[str, str]]]) -> None:
    path, rows = month
    opened = open_page(chrome, path)
    page = opened.page
    try:
        charts = page.evaluate("Array.from(document.querySelectorAll('figure[data-chart]'))"
                               ".map(f => f.dataset.chart)")
        # (the simulated node's holders wait on each reason: its chart is there)
        assert charts == ["budget", "burn", "hours", "holders", "waiting", "pools", "trend_cost",
                          "trend"]
        assert table(page, "table-waiting") and marks(page, "waiting") > 0
        # the cost so far per group, a point per day and priced group; on the last day each
        # group's cost so far is its cost in the window
        burn = table(page, "table-burn")
        assert header(page, "table-burn") == ["day", *GROUPS]
        assert marks(page, "burn") == sum(_known(line[1:]) for line in burn)
        by_group = {g: [r for r in rows if r["resource_group"] == g] for g in GROUPS}
        for i, group in enumerate(GROUPS, start=1):
            assert float(burn[-1][i].replace(",", "")) == pytest.approx(
                _sum(by_group[group], "cost"), abs=0.01)
        budget = [line for line in table(page, "table-budget") if line[0] in GROUPS]
        head = header(page, "table-budget")
        assert marks(page, "budget") == sum(_known([line[head.index(t)] for line in budget])
                                            for t in ("cost in window", "cost month to date",
                                                      "budget", "forecast month end")
                                            ) == 11  # npu: no budget
        hours = [line for line in table(page, "table-hours") if line[0] in GROUPS]
        head = header(page, "table-hours")
        assert marks(page, "hours") == sum(_known([line[head.index(t)] for line in hours])
                                           for t in ("allocated device-hours",
                                                     "active device-hours",
                                                     "idle device-hours"))
        holders = table(page, "table-holders")[:20]
        head = header(page, "table-holders")
        assert marks(page, "holders") == sum(_known([line[head.index(t)] for line in holders])
                                             for t in ("cost", "idle cost"))
        pools = table(page, "table-pools")
        head = header(page, "table-pools")
        # one line per vendor and model of the export (MIG profiles are models of their own)
        assert [tuple(line[:2]) for line in pools] == sorted({(r["vendor"], r["model"])
                                                              for r in rows})
        assert marks(page, "pools") == sum(_known([line[head.index(t)] for line in pools])
                                           for t in ("used / allocated", "active / allocated"))
        trend = table(page, "table-trend")
        head = header(page, "table-trend")
        assert marks(page, "trend") == sum(_known([line[head.index(t)] for line in trend])
                                           for t in ("allocated device-hours",
                                                     "active device-hours",
                                                     "idle device-hours"))
        assert marks(page, "trend_cost") == sum(_known([line[head.index(t)] for line in trend])
                                                for t in ("cost", "idle cost"))
    finally:
        page.close()


def _dark_and_print(chrome: Any, month: tuple[Path, list[dict[str, str]]]) -> None:
    path, _ = month
    opened = open_page(chrome, path, dark=True)
    try:
        background = opened.page.evaluate(
            "getComputedStyle(document.documentElement).backgroundColor")
        text = opened.page.evaluate("getComputedStyle(document.querySelector("
                                    "'#chart-hours svg .title')).fill")
        assert background == "rgb(13, 17, 23)" and text == "rgb(230, 237, 243)"
        # printed: the width of A4 less its margins (186 mm, 703 CSS px), nothing wider
        opened.page.emulate_media(media="print")
        opened.page.set_viewport_size({"width": 703, "height": 1000})
        assert opened.page.evaluate(OVERFLOW) == []
        pdf = opened.page.pdf(format="A4")
        assert pdf.startswith(b"%PDF") and pdf.count(b"/Type /Page\n") + \
            pdf.count(b"/Type /Page ") + pdf.count(b"/Type/Page") >= 2
    finally:
        opened.page.close()


def test_hostile_names_are_text_in_the_dom(chrome: Any, tmp_path: Path) -> None:
    path, rows = _hostile(tmp_path)
    opened = open_page(chrome, path, 390, 844)
    page = opened.page
    try:
        assert opened.errors == [] and opened.console == []
        assert opened.requests == [path.as_uri()]
        assert page.evaluate("document.querySelectorAll('script, img, iframe, object').length") == 0
        cells = page.evaluate("Array.from(document.querySelectorAll('#table-holders td'))"
                              ".map(td => td.textContent)")
        labels = page.evaluate("Array.from(document.querySelectorAll('#chart-holders svg text'))"
                               ".map(t => t.textContent)")
        assert HOSTILE_USERS[0] in cells and HOSTILE_USERS[1] in cells
        assert HOSTILE_USERS[3] in cells
        # the bidirectional override is never in the page: a visible U+FFFD stands for it
        assert "evil\ufffdgpj.exe" in cells
        body = page.evaluate("document.body.innerText")
        assert "\u202e" not in body and "\u202e" not in "".join(labels)
        assert any(name in label for name in HOSTILE_USERS for label in labels)
        assert page.evaluate(OVERFLOW) == []
        # the holders' figures are the export's, by the same keys
        head = header(page, "table-holders")
        exported = {tuple(r[k] or "-" for k in ("resource_group", "user", "namespace", "pod",
                                                 "job")): r for r in rows}
        shown = table(page, "table-holders")
        checked = 0
        for line in shown:
            key = tuple(line[:5])
            if key not in exported:
                continue  # the lines "N more holders" and "total"
            row = exported[key]
            for title, column in (("cost", "cost"), ("allocated device-hours",
                                                     "allocated_device_hours")):
                want = float(row[column]) if row[column] else None
                assert line[head.index(title)] == _shown(want), (key, column)
            checked += 1
        assert checked >= 10
        totals = {line[0]: line for line in shown}
        assert totals["total"][head.index("cost")] == _shown(_sum(rows, "cost"))
    finally:
        page.close()


def test_forty_priced_groups_print_within_an_a4_page(chrome: Any, tmp_path: Path) -> None:
    """The cost so far has a column per group: forty groups in one table were wider than any
    page. In tables of eight groups, nothing is wider than A4 less its margins when printed."""
    from allsmi.accounting.htmlreport.page import render_html

    from .test_report_money import H100, money_views
    groups = [f"team-{i:02d}" for i in range(40)]
    config = "".join(f'[groups."{g}"]\nprice_per_device_hour = {1 + i}\ncurrency = "EUR"\n'
                     for i, g in enumerate(groups))
    path = tmp_path / "forty.html"
    path.write_text(render_html(money_views([(g, *H100, f"u{i}") for i, g in enumerate(groups)],
                                            config)))
    opened = open_page(chrome, path, 703, 1000)
    try:
        opened.page.emulate_media(media="print")
        assert opened.page.evaluate(OVERFLOW) == []
        assert opened.page.evaluate("document.querySelectorAll('table[id^=table-burn]').length") == 5
    finally:
        opened.page.close()


#: The WCAG 2 contrast ratio of an element's text colour against the page's background.
CONTRAST = """(el) => {
  const lum = (css) => {
    const [r, g, b] = css.match(/[\\d.]+/g).slice(0, 3).map(Number).map(v => {
      v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const fg = lum(getComputedStyle(el).color);
  const bg = lum(getComputedStyle(document.documentElement).backgroundColor);
  return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
}"""


@pytest.mark.parametrize("dark", [False, True])
def test_the_words_that_stand_for_a_missing_value_are_readable(
        chrome: Any, tmp_path: Path, dark: bool) -> None:
    """"unknown", "no price", "no budget", "not measured" (and the muted notes) are the page's
    answer where a figure is missing: text at least 4.5:1 against the page (WCAG AA for text of
    its size), in light and dark, not a faint grey that a reader skips."""
    from allsmi.accounting.htmlreport.page import render_html

    from .test_report_money import H100, money_views
    path = tmp_path / "missing.html"
    path.write_text(render_html(money_views([("a", *H100, "alice"), ("b", *H100, "bob")],
                                            '[groups.a]\nprice_per_device_hour = 2.0\n'
                                            'currency = "EUR"\n', unknown="a:idle")))
    opened = open_page(chrome, path, dark=dark)
    try:
        page = opened.page
        words = page.evaluate("Array.from(document.querySelectorAll('td.na'))"
                              ".map(td => td.textContent)")
        assert {"unknown", "no price", "no budget"} <= set(words), words
        for selector in ("td.na", ".muted", ".empty"):
            for element in page.query_selector_all(selector):
                ratio = page.evaluate(CONTRAST, element)
                assert ratio >= 4.5, (selector, element.text_content(), ratio)
    finally:
        opened.page.close()

"""The report shows the export's activity columns (issue 31: ``active_device_hours``,
``efficiency_ratio``, ``waiting_<reason>_seconds`` and ``_cost``, ``activity_method``) where the
rows know them, and says "not measured" where no row does; never a 0 for either."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

from allsmi.accounting.htmlreport.data import Views, content
from allsmi.accounting.htmlreport.page import render_html
from allsmi.accounting.periods import Window
from allsmi.accounting.report import Part, Report, build_report
from allsmi.config import parse_config
from allsmi.schema import WAITING_REASONS

CONFIG = """\
[groups.training]
price_per_device_hour = 2.0
currency = "EUR"
budget_per_month = 1000
"""
START = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
WINDOW = Window(START, START + dt.timedelta(days=2))


def _parts(seconds: float) -> tuple[list[Part], list[Part]]:
    common = dict(resource_group="training", labels=(), vendor="nvidia", model="H100",
                  host="n1", device="n1/0", observed_s=seconds, allocated_s=seconds * 0.5,
                  busy_s=seconds * 0.25, busy_observed_s=seconds, energy_j=None,
                  idle_s=seconds * 0.1)
    return [Part(**common)], [Part(**common, namespace="ml", pod="<b>pod</b>")]


def _report(keys: tuple[str, ...], seconds: float, window: Window, active: bool) -> Report:
    parts, holders = _parts(seconds)
    report = build_report(parts, window, keys, parse_config(CONFIG), holder_parts=holders,
                          source="test")
    if not active:
        return report
    # as the export has them once activity is measured: 20 % of the allocated time active,
    # an hour waiting on input (2.00 of the cost) and two on nothing (4.00)
    waits = tuple(3600.0 if r == "input" else 7200.0 if r == "nothing" else 0.0
                  for r in WAITING_REASONS)
    costs = tuple(2.0 if r == "input" else 4.0 if r == "nothing" else 0.0
                  for r in WAITING_REASONS)
    rows = tuple(dataclasses.replace(r, active_device_hours=r.allocated_device_hours * 0.2,
                                     efficiency_ratio=0.2, activity_method="sm_active",
                                     waiting_seconds=waits, waiting_cost=costs)
                 for r in report.rows)
    return dataclasses.replace(report, rows=rows)


def _views(active: bool) -> Views:
    keys = ("resource_group", "namespace", "pod")
    days = tuple((f"2026-03-0{d + 1}", _report(("resource_group",), 86400.0,
                                               Window(START + dt.timedelta(days=d),
                                                      START + dt.timedelta(days=d + 1)), active))
                 for d in range(2))
    return Views(_report(("resource_group",), WINDOW.seconds, WINDOW, active),
                 _report(keys, WINDOW.seconds, WINDOW, active),
                 _report(("resource_group", "vendor", "model"), WINDOW.seconds, WINDOW, active),
                 days, 0.95)


def _cells(page: str, table: str) -> list[str]:
    body = page.split(f'id="{table}"')[1].split("</table>")[0]
    return re.findall(r"<td[^>]*>([^<]*)</td>", body)


def test_activity_columns_are_shown_when_the_export_has_them() -> None:
    views = _views(active=True)
    c = content(views)
    assert c.activity and list(c.reasons) == list(WAITING_REASONS)
    page = render_html(views)
    assert "Compute activity is not measured" not in page and "not measured" not in page
    hours = _cells(page, "table-hours")
    assert "4.80" in hours  # 48 h x 0.5 allocated x 0.2 active
    assert "20.0 %" in hours  # efficiency, and the totals' own
    holders = page.split('id="table-holders"')[1].split("</table>")[0]
    assert ">cost waiting: input</th>" in holders and ">cost waiting: nothing</th>" in holders
    cells = _cells(page, "table-holders")
    assert "2.00" in cells and "4.00" in cells
    assert ">sm_active</td>" in page.split('id="table-hours"')[1].split("</table>")[0]
    # what the holders waited on, all holders: a bar per reason, its hours and cost
    waiting = _cells(page, "table-waiting")
    assert waiting[:4] == ["computing", "0.00", "0.0 %", "0.00"]
    assert waiting[4:8] == ["input", "1.00", f"{100 / 24:.1f} %", "2.00"]
    chart = page.split('id="chart-waiting"')[1].split("</figure>")[0]
    assert chart.count('class="rect reactive tooltip-trigger"') == len(WAITING_REASONS)
    assert "&lt;b&gt;pod&lt;/b&gt;" in holders and "<b>pod" not in holders
    # the hours chart draws the active series
    chart = page.split('id="chart-hours"')[1].split("</figure>")[0]
    assert ">active</text>" in chart


def test_without_activity_the_report_says_not_measured() -> None:
    views = _views(active=False)
    c = content(views)
    assert not c.activity and c.reasons == {} and c.waiting == []
    page = render_html(views)
    assert "Compute activity is not measured by this export" in page
    hours = _cells(page, "table-hours")
    assert hours.count("not measured") == 2 * 2  # active and efficiency, group and total
    chart = page.split('id="chart-hours"')[1].split("</figure>")[0]
    assert ">active</text>" not in chart

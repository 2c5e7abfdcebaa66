"""The report at scale and at its edges, without a browser: many priced groups (a chart's
legend of one line per group), the report's coverage as the export's JSON gives it, and
``-o -`` (stdout)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from allsmi.accounting.htmlreport.charts import COLOURS, Chart, charts, svg
from allsmi.accounting.htmlreport.data import content
from allsmi.accounting.htmlreport.page import render_html

from .support import allsmi
from .test_report_money import H100, money_views


@pytest.mark.timeout(60)
def test_a_chart_with_a_legend_taller_than_its_plot_is_drawn() -> None:
    """The burn chart has a line per priced group: 120 groups' legend (30 rows) once left the
    plot no height, and pygal never returned (the report of a big fleet hung)."""
    days = tuple(f"2026-03-{d:02d}" for d in range(1, 4))
    chart = Chart("burn", "Cost so far", "line", days,
                  tuple((f"group-{i}", (1.0 * i, 2.0 * i, None)) for i in range(120)), "USD")
    drawing = svg(chart)
    assert drawing.startswith("<svg") and drawing.count('class="legend') >= 120


@pytest.mark.timeout(120)
def test_two_hundred_priced_groups_give_a_page_of_bounded_size() -> None:
    groups = [f"g{i:03d}" for i in range(200)]
    config = "".join(f'[groups.{g}]\nprice_per_device_hour = 2.5\ncurrency = "USD"\n'
                     f'budget_per_month = 1000\n' for g in groups)
    page = render_html(money_views([(g, *H100, f"u{i}") for i, g in enumerate(groups)], config))
    assert all(f"<td>{g}</td>" in page for g in groups)
    assert len(page.encode()) < 2_000_000


def test_the_burn_chart_draws_no_more_groups_than_it_has_colours() -> None:
    """Beyond its eight colours two groups' lines would look alike (colour the only carrier of
    which is which): the chart draws the costliest eight and says so; the table has every one."""
    groups = [f"g{i:02d}" for i in range(12)]
    config = "".join(f'[groups.{g}]\nprice_per_device_hour = {1 + i}\ncurrency = "USD"\n'
                     for i, g in enumerate(groups))
    views = money_views([(g, *H100, f"u{i}") for i, g in enumerate(groups)], config)
    burn = charts(content(views))["burn"]
    assert [name for name, _ in burn.series] == groups[-len(COLOURS):]  # the dearest
    assert f"the {len(COLOURS)} costliest of 12 groups" in burn.title
    page = render_html(views)
    # every group in the tables, at most eight a table (each fits a printed page)
    first = page.split('id="table-burn"')[1].split("</table>")[0]
    second = page.split('id="table-burn-2"')[1].split("</table>")[0]
    assert "table-burn-3" not in page
    assert [g for g in groups if f">{g}<" in first] == groups[:8]
    assert [g for g in groups if f">{g}<" in second] == groups[8:]
    assert "(groups 1 to 8 of 12)" in first and "(groups 9 to 12 of 12)" in second
    assert page.count('id="chart-burn"') == 1


def test_the_coverage_is_the_exports_rounded_to_six_decimals() -> None:
    views = money_views([("a", *H100, "u")])
    views = dataclasses.replace(views, groups=dataclasses.replace(
        views.groups, coverage_ratio=0.6643364197530864))
    page = render_html(views)
    assert re.search(r'id="coverage" data-value="([^"]*)"', page).group(1) == "0.664336"
    assert 'data-value="0.6643364197530864"' not in page


def test_output_dash_is_stdout_not_a_file_called_dash(tmp_path: Path) -> None:
    out = allsmi("report", "--simulate", "mixed", "--since", "2026-10-02T10:00:00Z",
                 "--until", "2026-10-02T11:00:00Z", "-o", "-", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("<!DOCTYPE html>") and out.stdout.rstrip().endswith("</html>")
    assert not (tmp_path / "-").exists()

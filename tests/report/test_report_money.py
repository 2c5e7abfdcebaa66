"""Sums of money in the HTML report, on the page's data model and its HTML (no browser, no
CLI): amounts in different currencies are never added and never dropped (one figure per
currency, in every table where a sum spans groups: totals, pools, days, what the holders waited
on), a sum that leaves out unknown or unpriced lines is marked as at least it, and a sum of
which nothing is priced says "no price", as its lines do, never "unknown"."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Sequence

from allsmi.accounting.htmlreport.charts import charts
from allsmi.accounting.htmlreport.data import Views, content
from allsmi.accounting.htmlreport.page import render_html
from allsmi.accounting.periods import Window
from allsmi.accounting.report import Part, Report, build_report
from allsmi.config import parse_config
from allsmi.schema import WAITING_REASONS

START = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
DAYS = 2
GE = "\u2265 "
#: A device: (resource group, vendor, model, user); each is held half the time it is watched.
Device = tuple[str, str, str, str]
EUR_USD = ('[groups.a]\nprice_per_device_hour = 2.0\ncurrency = "EUR"\n'
           '[groups.b]\nprice_per_device_hour = 3.0\ncurrency = "USD"\n')
H100, MI300 = ("nvidia", "H100"), ("amd", "MI300X")


def _report(devices: Sequence[Device], keys: tuple[str, ...], config: str, window: Window,
            unknown: str, waiting: bool) -> Report:
    """``devices`` over ``window``; ``unknown``: ``GROUP:idle`` or ``GROUP:busy``, a group
    whose devices do not know that."""
    seconds = window.seconds
    parts, holders = [], []
    for i, (group, vendor, model, user) in enumerate(devices):
        part = Part(resource_group=group, labels=(), vendor=vendor, model=model, host="n1",
                    device=f"n1/{i}", observed_s=seconds, allocated_s=seconds * 0.5,
                    busy_s=None if unknown == f"{group}:busy" else seconds * 0.25,
                    busy_observed_s=seconds, energy_j=None,
                    idle_s=None if unknown == f"{group}:idle" else seconds * 0.1)
        parts.append(part)
        holders.append(dataclasses.replace(part, user=user))
    report = build_report(parts, window, keys, parse_config(config), holder_parts=holders,
                          source="test")
    if not waiting:
        return report
    # an hour of each row's allocated time waiting on input, costing a tenth of its cost
    waits = tuple(3600.0 if r == "input" else 0.0 for r in WAITING_REASONS)
    return dataclasses.replace(report, rows=tuple(dataclasses.replace(
        r, active_device_hours=0.0, efficiency_ratio=0.0, activity_method="test",
        waiting_seconds=waits, waiting_cost=None if r.cost is None else tuple(
            r.cost / 10 if w else 0.0 for w in waits)) for r in report.rows))


def money_views(devices: Sequence[Device], config: str = "", unknown: str = "",
           waiting: bool = False) -> Views:
    window = Window(START, START + dt.timedelta(days=DAYS))

    def report(keys: tuple[str, ...], window: Window = window) -> Report:
        return _report(devices, keys, config, window, unknown, waiting)

    days = tuple((f"2026-03-0{d + 1}", report(("resource_group",), Window(
        START + dt.timedelta(days=d), START + dt.timedelta(days=d + 1)))) for d in range(DAYS))
    return Views(report(("resource_group",)), report(("resource_group", "user")),
                 report(("resource_group", "vendor", "model")), days, 0.95)


def _table(page: str, table_id: str) -> tuple[list[str], list[list[str]]]:
    """A table's head and its rows (body, then foot) as the cells' texts."""
    part = page.split(f'id="{table_id}"')[1].split("</table>")[0]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", part.split("</thead>")[0])
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", tr) for tr in part.split("</thead>")[1]
            .split("</tr>")[:-1]]
    return head, rows


def _column(page: str, table_id: str, title: str) -> dict[str, str]:
    """``{first cell of the row: the cell under title}``."""
    head, rows = _table(page, table_id)
    return {row[0]: row[head.index(title)] for row in rows}


def test_nothing_priced_the_totals_say_no_price_as_their_lines() -> None:
    views = money_views([("a", *H100, "ann"), ("b", *MI300, "bob")])
    page = render_html(views)
    for title in ("cost in window", "cost month to date", "forecast month end"):
        assert set(_column(page, "table-budget", title).values()) == {"no price"}, title
    assert _column(page, "table-budget", "budget")["total"] == "no budget"
    for title in ("cost", "idle cost"):
        holders = _column(page, "table-holders", title)
        assert set(holders.values()) == {"no price"}, (title, holders)
        assert set(_column(page, "table-trend", title).values()) == {"no price"}, title
    head, pools = _table(page, "table-pools")
    assert {row[head.index("cost")] for row in pools} == {"no price"}, pools


def test_a_pool_in_two_currencies_gives_its_cost_in_each() -> None:
    """Groups a (EUR) and b (USD) share the H100 pool: its cost is 48.00 EUR and 72.00 USD
    (24 allocated hours each), never one "unknown" figure; a pool in one currency has
    nothing in the other (a blank cell, not unknown)."""
    views = money_views([("a", *H100, "ann"), ("b", *H100, "bob"), ("b", *MI300, "bob")], EUR_USD)
    c = content(views)
    h100 = next(line for line in c.pools if line.names == ("nvidia", "H100"))
    assert (h100.figures["cost_EUR"], h100.figures["cost_USD"]) == (48.0, 72.0)
    page = render_html(views)
    head, pools = _table(page, "table-pools")
    assert "cost (EUR)" in head and "cost (USD)" in head and "currency" not in head, head
    rows = {row[1]: row for row in pools}
    assert [rows["H100"][head.index(f"cost ({cur})")] for cur in ("EUR", "USD")] == \
        ["48.00", "72.00"], rows
    assert [rows["MI300X"][head.index(f"cost ({cur})")] for cur in ("EUR", "USD")] == \
        ["", "72.00"], rows
    assert "unknown" not in {cell for row in pools for cell in row}, pools


def test_each_day_gives_its_cost_in_each_currency_and_the_burn_names_them() -> None:
    views = money_views([("a", *H100, "ann"), ("b", *MI300, "bob")], EUR_USD)
    page = render_html(views)
    head, days = _table(page, "table-trend")
    for title, value in (("cost (EUR)", "24.00"), ("cost (USD)", "36.00"),
                         ("idle cost (EUR)", "4.80"), ("idle cost (USD)", "7.20")):
        assert [row[head.index(title)] for row in days] == [value] * DAYS, (title, days)
    head, _ = _table(page, "table-burn")
    assert head == ["day", "a (EUR)", "b (USD)"], head


def test_totals_in_several_currencies_leaving_out_an_unpriced_group_are_at_least() -> None:
    """Group c has no price and no currency: each currency's total leaves it out, so each is
    at least its sum, never shown as whole."""
    views = money_views([("a", *H100, "ann"), ("b", *MI300, "bob"), ("c", *MI300, "cid")], EUR_USD,
                   waiting=True)
    page = render_html(views)
    budget = _column(page, "table-budget", "cost in window")
    assert budget["total (EUR)"] == GE + "48.00" and budget["total (USD)"] == GE + "72.00"
    assert budget["c"] == "no price"
    holders = _column(page, "table-holders", "cost")
    assert holders["total (EUR)"] == GE + "48.00" and holders["total (USD)"] == GE + "72.00"
    head, rows = _table(page, "table-waiting")
    waiting = {row[0]: row for row in rows}["input"]
    assert waiting[head.index("cost (EUR)")] == GE + "4.80", waiting
    assert waiting[head.index("cost (USD)")] == GE + "7.20", waiting
    # the MI300X pool: b's 72.00 USD and c's unpriced share, which could be in either currency
    head, pools = _table(page, "table-pools")
    mi300 = next(row for row in pools if row[1] == "MI300X")
    assert [mi300[head.index(f"cost ({cur})")] for cur in ("EUR", "USD")] == \
        ["no price", GE + "72.00"], mi300
    # no budget chart, and no claim that nothing is priced
    assert "No costs: no group is priced." not in page
    assert "No chart: the amounts are in several currencies (EUR, USD)" in page


USD_A = '[groups.a]\nprice_per_device_hour = 2.0\ncurrency = "USD"\n'


def test_a_pool_partly_priced_costs_at_least_its_priced_groups() -> None:
    """One currency: the H100 pool of a priced and an unpriced group costs at least the priced
    one's cost, never shown as the whole pool's."""
    views = money_views([("a", *H100, "ann"), ("c", *H100, "cid")], USD_A)
    head, pools = _table(render_html(views), "table-pools")
    (h100,) = pools
    assert h100[head.index("cost")] == GE + "48.00", h100
    assert any(n.startswith("A figure marked \u2265") for n in content(views).missing)


def test_a_pool_partly_known_is_at_least_and_its_share_unknown() -> None:
    """A pool whose idle time one group does not know idles at least the rest; where one does
    not know its use, the pool's used / allocated is unknown (as the efficiency), never the
    known use over the whole allocated time."""
    head, pools = _table(render_html(money_views([("a", *H100, "ann"), ("c", *H100, "cid")], USD_A,
                                            unknown="c:idle")), "table-pools")
    assert pools[0][head.index("idle device-hours")] == GE + "4.80", pools
    head, pools = _table(render_html(money_views([("a", *H100, "ann"), ("c", *H100, "cid")], USD_A,
                                            unknown="c:busy")), "table-pools")
    assert pools[0][head.index("used / allocated")] == "unknown", pools


def test_a_budget_in_another_currency_is_never_added_to_the_others() -> None:
    """Group a bills in USD with a budget of 1000; group d has no price but a budget of 50000
    JPY: the totals give each currency's budget on its own line, never 51,000 of either, and
    no chart draws them on one axis."""
    config = ('[groups.a]\nprice_per_device_hour = 2.0\ncurrency = "USD"\n'
              'budget_per_month = 1000\n'
              '[groups.d]\ncurrency = "JPY"\nbudget_per_month = 50000\n')
    views = money_views([("a", *H100, "ann"), ("d", *MI300, "dee")], config)
    c = content(views)
    assert c.currencies == ("JPY", "USD")
    assert "budget" not in charts(c)
    page = render_html(views)
    budget = _column(page, "table-budget", "budget")
    assert budget["total (JPY)"] == "50,000.00" and budget["total (USD)"] == "1,000.00", budget
    assert "51,000.00" not in page
    cost = _column(page, "table-budget", "cost in window")
    # d's cost, were it priced, would be in JPY: the USD total leaves nothing out
    assert cost["total (JPY)"] == "no price" and cost["total (USD)"] == "48.00", cost


def test_holders_are_ranked_by_cost_within_each_currency_and_charted_by_hours() -> None:
    """ann holds two EUR devices (96.00 EUR), bob one JPY device (9,600.00 JPY): 9600 is not
    more money than 96, so the table ranks within each currency (EUR first), and the chart of
    the holders that held the most draws the holders that did (ann first)."""
    config = ('[groups.a]\nprice_per_device_hour = 2.0\ncurrency = "EUR"\n'
              '[groups.b]\nprice_per_device_hour = 400.0\ncurrency = "JPY"\n')
    views = money_views([("a", *H100, "ann"), ("a", *H100, "ann"), ("b", *MI300, "bob")], config)
    c = content(views)
    assert [line.names[1] for line in c.holders] == ["ann", "bob"]
    chart = charts(c)["holders"]
    assert "held the most" in chart.title and chart.labels == (  # each name isolated (U+2068 ... U+2069)
        "\u2068a\u2069 / \u2068ann\u2069", "\u2068b\u2069 / \u2068bob\u2069"), chart
    assert "cost within each currency (EUR, JPY" in render_html(views)


def test_a_holder_whose_cost_is_unknown_is_not_ranked_as_costing_0() -> None:
    config = '[groups.a]\nprice_per_device_hour = 0.0\ncurrency = "USD"\n'
    views = money_views([("a", *H100, "ann"), ("c", *MI300, "cid"), ("c", *MI300, "cid")], config)
    assert [line.names[1] for line in content(views).holders] == ["ann", "cid"]


def test_a_burn_after_a_day_of_unknown_cost_is_at_least() -> None:
    """Group a's first day has data but no known cost (priced by energy, none measured): its
    cost so far on the second day leaves that day out, so it is at least the second day's."""
    window = money_views([("a", *H100, "ann")], USD_A)
    first = money_views([("a", *H100, "ann")],
                        '[groups.a]\nprice_per_kwh = 0.2\ncurrency = "USD"\n')
    views = dataclasses.replace(window, trend=(first.trend[0], window.trend[1]))
    burn = _column(render_html(views), "table-burn", "a")
    assert burn == {"2026-03-01": "unknown", "2026-03-02": GE + "24.00"}, burn


def test_a_total_budget_of_the_groups_that_have_one_is_whole() -> None:
    """A group without a budget has none (not an unknown one): the groups' total budget is the
    sum of the budgets, never marked as at least it."""
    config = USD_A + 'budget_per_month = 1000\n[groups.b]\nprice_per_device_hour = 3.0\n' \
        'currency = "USD"\n'
    budget = _column(render_html(money_views([("a", *H100, "ann"), ("b", *MI300, "bob")], config)),
                     "table-budget", "budget")
    assert budget == {"a": "1,000.00", "b": "no budget", "total": "1,000.00"}, budget


def test_a_group_on_two_lines_counts_its_budget_once() -> None:
    """Group ``a``'s labels changed in the window (team aa, then zz): it has a line per set of
    labels, each with the group's budget; the total budget is the group's, once, never twice."""
    window = Window(START, START + dt.timedelta(days=DAYS))
    parts = [Part(resource_group="a", labels=(("team", team),), vendor="nvidia", model="H100",
                  host="n1", device=f"n1/{i}", observed_s=3600.0, allocated_s=3600.0,
                  busy_s=1800.0, busy_observed_s=3600.0, energy_j=None, idle_s=0.0)
             for i, team in enumerate(("aa", "zz"))]
    report = build_report(parts, window, ("resource_group",),
                          parse_config(USD_A + "budget_per_month = 1000\n"), source="test")
    head, rows = _table(render_html(Views(report, report, report, (), 0.95)), "table-budget")
    budgets = [(row[1], row[head.index("budget")]) for row in rows]
    assert budgets == [("\u2068team=aa\u2069", "1,000.00"), ("\u2068team=zz\u2069", "1,000.00"),
                       ("", "1,000.00")], budgets

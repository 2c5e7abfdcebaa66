"""``allsmi report`` from the outside, without a browser: what it writes when something is
missing (no data, no prices, no budgets), how it fails (bad options, a store failing mid-way),
and that reruns give the same bytes. The browser checks are in test_report_browser.py."""

from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from .support import BUDGETS, NO_BUDGETS, NO_PRICES, a_past_day, allsmi, csv_rows, printed

EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


#: The replay of ``--simulate`` every 15 minutes (as support.PRICED's): the day's report and
#: export in a fifth of the CPU of the default minute, for tests of names and currencies that
#: read no figure the sampling could change.
REPLAY = "[ledger]\ninterval_seconds = 900\n"


def _report(tmp_path: Path, config: str, *args: str) -> tuple[int, str, str]:
    (tmp_path / "c.toml").write_text(config)
    out = allsmi("report", "--config", "c.toml", "-o", "r.html", *args, cwd=tmp_path)
    page = (tmp_path / "r.html").read_text() if (tmp_path / "r.html").exists() else ""
    return out.returncode, page, out.stderr


def _notes(page: str) -> list[str]:
    return re.findall(r'<li class="(?:warning|missing)"[^>]*>([^<]*)</li>', page)


def test_no_prices_says_so_and_draws_no_cost(tmp_path: Path) -> None:
    code, page, err = _report(tmp_path, NO_PRICES, "--simulate", "mixed", "--period",
                              a_past_day())
    assert code == 0, err
    assert any(n.startswith("No prices:") for n in _notes(page)), _notes(page)
    # no cost chart, and no cost printed as a number: each cost cell says why it is empty
    assert 'data-chart="budget"' not in page and 'data-chart="hours"' in page
    costs = re.findall(r'<td class="num na ?"[^>]*>no price</td>', page)
    assert costs, "unpriced cost cells say 'no price'"
    assert ">0.00</td>" not in page.split('id="table-budget"')[1].split("</table>")[0]


def test_no_budgets_shows_costs_and_forecasts_without_one(tmp_path: Path) -> None:
    code, page, err = _report(tmp_path, NO_BUDGETS, "--simulate", "mixed", "--period",
                              a_past_day())
    assert code == 0, err
    assert any(n.startswith("No budgets:") for n in _notes(page)), _notes(page)
    assert 'data-chart="budget"' in page
    budget_table = page.split('id="table-budget"')[1].split("</table>")[0]
    assert budget_table.count(">no budget</td>") >= 2 * 3  # budget and budget used, 3 groups


def test_an_empty_window_writes_what_is_missing_and_exits_3(tmp_path: Path) -> None:
    code, page, err = _report(tmp_path, BUDGETS, "--simulate", "mixed",
                              "--since", "2099-01-01", "--until", "2099-01-02")
    assert code == 3
    assert "no device data for 2099-01-01T00:00:00Z to 2099-01-02T00:00:00Z" in err
    assert _notes(page) == ["No device data in this window: there is nothing to chart."]
    assert "<figure" not in page and "<table" not in page  # no chart of invented zeros


def test_reruns_give_the_same_bytes(tmp_path: Path) -> None:
    day = a_past_day()
    code, first, err = _report(tmp_path, BUDGETS, "--simulate", "mixed", "--period", day)
    assert code == 0, err
    code, second, err = _report(tmp_path, BUDGETS, "--simulate", "mixed", "--period", day)
    assert code == 0 and first == second
    assert "Generated with pygal" not in first and "<script" not in first


@pytest.mark.parametrize("args, needle", [
    (["--group-by", "colour"], "--group-by"),
    (["--period", "someday"], "someday"),
    (["--ledger", "x.db", "--simulate", "mixed"], "give one of"),
    (["--no-rollups", "--period", "yesterday"], "--no-rollups needs --prometheus"),
    (["--simulate", "mixed", "--period", "yesterday", "--coverage-threshold", "nan"],
     "'--coverage-threshold': expected a number from 0 to 1"),
])
def test_bad_options_exit_2_as_the_export(tmp_path: Path, args: list[str], needle: str) -> None:
    code, page, err = _report(tmp_path, BUDGETS, *args)
    assert code == 2 and needle in err and page == ""
    exported = allsmi("export", "--config", "c.toml", *args, cwd=tmp_path)
    assert exported.returncode == 2 and needle in exported.stderr and exported.stdout == ""


def test_an_unwritable_output_exits_1(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(BUDGETS)
    out = allsmi("report", "--config", "c.toml", "--simulate", "mixed", "--period", a_past_day(),
                 "-o", str(tmp_path / "missing" / "r.html"), cwd=tmp_path)
    assert out.returncode == 1 and "cannot write" in out.stderr


@pytest.mark.parametrize("command", ["report", "idle", "waste"])
def test_only_the_export_writes_the_exports_status_file(tmp_path: Path, command: str) -> None:
    """``[export] textfile`` is the export's status for node_exporter: a report (or idle, or
    waste) that fails, in the same cron unit as the export, never says the export failed."""
    status = tmp_path / "allsmi_export.prom"
    (tmp_path / "c.toml").write_text(BUDGETS + f'\n[export]\ntextfile = "{status}"\n')
    empty = ("--config", "c.toml", "--simulate", "mixed", "--since", "2099-01-01",
             "--until", "2099-01-02")
    out = allsmi(command, *empty, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert out.returncode == 3 and "no device data" in out.stderr, out.stderr
    assert not status.exists(), status.read_text()
    # the export itself still writes it
    out = allsmi("export", *empty, "-o", str(tmp_path / "out.csv"), cwd=tmp_path)
    assert out.returncode == 3 and "allsmi_export_success 0" in status.read_text()


class _FailingPrometheus(http.server.BaseHTTPRequestHandler):
    """Answers an empty vector to the first ``good`` queries, then 503."""

    good = 10**9
    count = 0

    def do_GET(self) -> None:  # noqa: N802
        type(self).count += 1
        ok = type(self).count <= type(self).good
        body = EMPTY_VECTOR if ok else b"store unavailable"
        self.send_response(200 if ok else 503)
        self.send_header("Content-Type", "application/json" if ok else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def store() -> Iterator[tuple[type[_FailingPrometheus], str]]:
    handler = type("Handler", (_FailingPrometheus,), {"count": 0, "good": 10**9})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_store_failing_mid_way_fails_the_report_and_writes_nothing(
        tmp_path: Path, store: tuple[type[_FailingPrometheus], str]) -> None:
    handler, url = store
    args = ("--prometheus", url, "--since", "2026-03-01", "--until", "2026-03-08")
    code, page, err = _report(tmp_path, BUDGETS, *args)
    assert code == 3 and "no device data" in err  # an empty store: said, exit 3
    queries = handler.count
    assert queries > 10  # the window, then each of its 7 days
    (tmp_path / "r.html").unlink()
    handler.count, handler.good = 0, queries // 2  # fails in the middle of the days
    code, page, err = _report(tmp_path, BUDGETS, *args)
    assert code == 1, err
    assert url in err and "503" in err
    assert page == "" and not list(tmp_path.glob("*.html*"))  # nothing, not half a report


def test_the_export_unit_writes_the_report_beside_the_export(tmp_path: Path) -> None:
    """deploy/systemd/allsmi-export.service's ExecStartPost=, run as written (paths moved
    under a temporary state directory): the month-to-date report lands beside the CSV; a
    ledger without data for the month gives a report that says so, and exit 3, which the unit
    counts as success."""
    import datetime as dt
    import shlex
    import subprocess

    from allsmi.accounting.ledger.store import Ledger

    from ..deploy.test_systemd import INSTALLED, installed_allsmi, settings
    (state := tmp_path / "state" / "allsmi" / "billing").mkdir(parents=True)
    Ledger(str(tmp_path / "state" / "allsmi" / "ledger.db")).close()
    (tmp_path / "c.toml").write_text(BUDGETS)
    unit = settings("allsmi-export.service")
    (line,) = unit["ExecStartPost"]
    line = (line.replace("%S", str(tmp_path / "state")).replace("%%", "%").replace("$$", "$")
            .replace(INSTALLED, installed_allsmi())
            .replace("/etc/allsmi/config.toml", str(tmp_path / "c.toml")))
    out = subprocess.run(shlex.split(line), capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert out.returncode in {0} | {int(c) for c in unit["SuccessExitStatus"]}, out.stderr
    month = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).strftime("%Y-%m")
    page = (state / f"report-{month}.html").read_text()
    assert "allsmi report: " in page and "No device data in this window" in page
    assert (state / f"report-{month}.html").stat().st_mode & 0o077 == 0  # owner-only


def test_without_the_extra_it_exits_2_naming_it(tmp_path: Path) -> None:
    """pygal missing (hidden by a module that fails to import): exit 2, the extra named with
    the interpreter that runs allsmi, nothing written."""
    import sys
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "pygal.py").write_text("raise ImportError('hidden', name='pygal')\n")
    import os
    import subprocess
    out = subprocess.run([sys.executable, "-m", "allsmi", "report", "--simulate", "mixed",
                          "--period", "yesterday", "-o", "r.html"], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path / "hide"),
                              "XDG_CONFIG_HOME": str(tmp_path)},
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2, out.stderr
    assert f"{sys.executable} -m pip install 'allsmi[report]'" in out.stderr
    assert not (tmp_path / "r.html").exists()


def _two_budgeted_days(tmp_path: Path) -> tuple[Any, int, str]:
    """A real ledger of the first two days of last month (training 10 EUR/h, inference 1 EUR/h,
    each with a 1000 EUR monthly budget): (the month's start, its days, the config)."""
    import calendar
    import datetime as dt

    from ..accounting.helpers import device, record, snap
    from .support import last_month
    year, month = map(int, last_month().split("-"))
    start = dt.datetime(year, month, 1, tzinfo=dt.timezone.utc)
    t0, days = start.timestamp(), calendar.monthrange(year, month)[1]
    config = ("[groups.training]\nprice_per_device_hour = 10.0\ncurrency = \"EUR\"\n"
              "budget_per_month = 1000\n\n[groups.inference]\nprice_per_device_hour = 1.0\n"
              "currency = \"EUR\"\nbudget_per_month = 1000\n")
    (tmp_path / "c.toml").write_text(config)
    from allsmi.config import parse_config
    # sampled every 5 minutes, as a collector run with interval_seconds = 300
    recorded = parse_config("[collector]\ninterval_seconds = 300\n" + config)
    record(tmp_path / "l.db", (snap(t0 + k * 300, device("GPU-t", util=50.0, users=["alice"],
                                                        group="training"),
                                    device("GPU-i", util=50.0, users=["bob"], group="inference",
                                           vendor="amd", model="MI300X"))
                               for k in range(2 * 288 + 1)), recorded)
    return start, days, config


def _budget_rows(page: str) -> dict[str, tuple[str, ...]]:
    budget = page.split('id="table-budget"')[1].split("</table>")[0]
    return {m[0]: m[1:] for m in re.findall(
        r"<tr><td>(\w+)</td><td>[^<]*</td><td>EUR</td>" + r"<td[^>]*>([^<]*)</td>" * 5, budget)}


def test_budgets_are_the_month_to_date_whatever_the_window(tmp_path: Path) -> None:
    """A window of the month's second day only: budget used and the forecast are the month to
    date's (days 1 and 2), as the export's, not the one day's."""
    import datetime as dt
    start, days, config = _two_budgeted_days(tmp_path)
    day2 = start + dt.timedelta(days=1)
    args = ("--ledger", "l.db", "--since", day2.date().isoformat(), "--until",
            (day2 + dt.timedelta(days=1)).date().isoformat())
    code, page, err = _report(tmp_path, config, *args)
    assert code == 0, err
    rows = _budget_rows(page)
    assert rows["training"] == ("240.00", "480.00", "1,000.00", "48.0 %",
                                f"{480 * days / 2:,.2f}")
    out = allsmi("export", "--config", "c.toml", *args, "--group-by", "resource_group",
                 cwd=tmp_path)
    exported = {r["resource_group"]: r for r in __import__("csv").DictReader(
        out.stdout.splitlines())}
    assert exported["training"]["budget_used_ratio"] == "0.480000"
    assert exported["training"]["forecast_month_end_cost"] == f"{480 * days / 2:.6f}"
    assert f"group training is forecast to cost {480 * days / 2:.2f} EUR this month" in err


def test_a_window_from_the_month_before_budgets_its_month_to_date(tmp_path: Path) -> None:
    """From the last day of the month before to the month's third: budget used and the
    forecast are the month to date's (days 1 and 2), as the export's; the window spans two
    months, yet the forecast is known, and over the budget, said."""
    import datetime as dt
    start, days, config = _two_budgeted_days(tmp_path)
    args = ("--ledger", "l.db", "--since", (start - dt.timedelta(days=1)).date().isoformat(),
            "--until", (start + dt.timedelta(days=2)).date().isoformat())
    code, page, err = _report(tmp_path, config, *args)
    assert code == 3, err  # the day before holds no data: coverage 2/3
    assert _budget_rows(page)["training"] == ("480.00", "480.00", "1,000.00", "48.0 %",
                                              f"{480 * days / 2:,.2f}")
    assert f"group training is forecast to cost {480 * days / 2:.2f} EUR this month" in err


def test_a_ledger_with_budgets_one_group_forecast_over_one_under(tmp_path: Path) -> None:
    """The first two days of last month in a real ledger: training has spent half its budget
    and is forecast far over it by the month's end, inference stays under; the report's budget
    table and the export say the same, and so does the warning on stderr."""
    import datetime as dt
    start, days, config = _two_budgeted_days(tmp_path)
    args = ("--ledger", "l.db", "--since", start.date().isoformat(), "--until",
            (start + dt.timedelta(days=2)).date().isoformat())
    code, page, err = _report(tmp_path, config, *args)
    assert code == 0, err
    # 48 h at 10 EUR, over the month's days / 2
    assert f"group training is forecast to cost {480 * days / 2:.2f} EUR this month, above " \
           "its budget of 1000 EUR" in err and "inference" not in err
    rows = _budget_rows(page)
    assert rows["training"] == ("480.00", "480.00", "1,000.00", "48.0 %",
                                f"{480 * days / 2:,.2f}")
    assert rows["inference"] == ("48.00", "48.00", "1,000.00", "4.8 %", f"{48 * days / 2:,.2f}")
    out = allsmi("export", "--config", "c.toml", *args, "--group-by", "resource_group",
                 cwd=tmp_path)
    exported = {r["resource_group"]: r for r in __import__("csv").DictReader(
        out.stdout.splitlines())}
    assert exported["training"]["forecast_month_end_cost"] == f"{480 * days / 2:.6f}"
    assert exported["inference"]["budget_used_ratio"] == "0.048000"


def test_a_group_called_currency_is_a_group_in_every_table(tmp_path: Path) -> None:
    """Group names are data, not column kinds: a group named ``currency`` gets its costs
    rounded and numeric in the burn table like any other group."""
    config = (REPLAY + '[groups.currency]\nprice_per_device_hour = 3.1\ncurrency = "USD"\n'
              '[groups.inference]\nprice_per_device_hour = 2.2\ncurrency = "USD"\n'
              '[[rules]]\nvendor = "nvidia"\nresource_group = "currency"\n')
    code, page, err = _report(tmp_path, config, "--simulate", "mixed", "--period", a_past_day())
    assert code == 0, err
    burn = page.split('id="table-burn"')[1].split("</table>")[0]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", burn.split("</thead>")[0])
    row = re.findall(r"<td([^>]*)>([^<]*)</td>", burn.split("<tbody>")[1].split("</tr>")[0])
    cell = row[head.index("currency")]
    assert "data-value" in cell[0] and re.fullmatch(r"[\d,]+\.\d\d", cell[1]), (head, row)


def test_two_groups_shown_alike_keep_their_own_costs(tmp_path: Path) -> None:
    """Two group names alike in their first 200 characters (shown cut, alike): the burn keeps
    each group's own cost so far, never one merged (or doubled) column."""
    first, second = "g" * 230 + "1", "g" * 230 + "2"
    config = (REPLAY + f'[groups.{first}]\nprice_per_device_hour = 3.1\ncurrency = "USD"\n'
              f'[groups.{second}]\nprice_per_device_hour = 100.0\ncurrency = "USD"\n'
              f'[[rules]]\nvendor = "nvidia"\nresource_group = "{first}"\n'
              f'[[rules]]\nvendor = "amd"\nresource_group = "{second}"\n')
    code, page, err = _report(tmp_path, config, "--simulate", "mixed", "--period", a_past_day())
    assert code == 0, err
    out = allsmi("export", "--config", "c.toml", "--simulate", "mixed", "--period", a_past_day(),
                 "--group-by", "resource_group", cwd=tmp_path)
    cost = {r["resource_group"]: float(r["cost"]) for r in __import__("csv").DictReader(
        out.stdout.splitlines()) if r["cost"]}
    burn = page.split('id="table-burn"')[1].split("</table>")[0]
    last = burn.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[-2]
    shown = [float(v) for v in re.findall(r'data-value="([^"]+)"', last)]
    assert {first, second} <= set(cost), cost
    assert sorted(shown) == pytest.approx(sorted(cost.values()), rel=1e-6), (shown, cost)


def test_several_currencies_are_never_drawn_on_one_axis(tmp_path: Path) -> None:
    """Groups in EUR, JPY and USD: no cost chart (the tables give each amount in its
    currency), the holders charted by device-hours, and a note that says so."""
    config = (REPLAY + '[groups.training]\nprice_per_device_hour = 3.0\ncurrency = "EUR"\n'
              '[groups.inference]\nprice_per_device_hour = 400.0\ncurrency = "JPY"\n'
              '[groups.npu]\nprice_per_device_hour = 2.0\ncurrency = "USD"\n')
    code, page, err = _report(tmp_path, config, "--simulate", "mixed", "--period", a_past_day())
    assert code == 0, err
    for chart in ("budget", "burn", "trend_cost"):
        assert f'data-chart="{chart}"' not in page, chart
    assert 'data-chart="holders"' in page and "holders that held the most" in page
    assert any("(EUR, JPY, USD)" in n and "charts draw none" in n for n in _notes(page)), \
        _notes(page)


def test_a_total_that_leaves_out_unknowns_is_marked_at_least(tmp_path: Path) -> None:
    """The simulated node's NPU group has no idle time known: the groups' total idle is the
    others' sum, shown as "at least" (never as if whole), with a note saying what it means."""
    code, page, err = _report(tmp_path, BUDGETS, "--simulate", "mixed", "--period", a_past_day())
    assert code == 0, err
    hours = page.split('id="table-hours"')[1].split("</table>")[0]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", hours.split("</thead>")[0])
    body = [re.findall(r"<td[^>]*>([^<]*)</td>", tr) for tr in
            hours.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:-1]]
    foot = re.findall(r"<td[^>]*>([^<]*)</td>", hours.split("<tfoot>")[1].split("</tr>")[0])
    idle = next(i for i, name in enumerate(head) if "idle" in name)
    assert any(row[idle] == "unknown" for row in body), body
    assert foot[idle].startswith("\u2265 "), foot
    known = [row[0] for row in body if row[idle] != "unknown"]
    assert known and all(not cell.startswith("\u2265") for row in body for cell in row)
    assert any(n.startswith("A figure marked \u2265") for n in _notes(page)), _notes(page)


def _table_rows(page: str, table_id: str) -> tuple[list[str], list[list[str]]]:
    """A table's head and its rows (body, then foot) as the cells' texts."""
    part = page.split(f'id="{table_id}"')[1].split("</table>")[0]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", part.split("</thead>")[0])
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", tr) for tr in part.split("</thead>")[1]
            .split("</tr>")[:-1]]
    return head, rows


def test_several_currencies_total_per_currency_and_nothing_known_says_unknown(
        tmp_path: Path) -> None:
    """Groups in EUR and USD: the hours' total is one line of known figures (no line of
    "unknown" device-hours per currency), the whole total leaves costs blank (not
    "unknown", not "no budget"), and each waiting reason's cost is given per currency."""
    config = BUDGETS.replace('currency = "USD"\nbudget_per_month = 1000000',
                             'currency = "EUR"\nbudget_per_month = 1000000')
    assert "EUR" in config
    code, page, err = _report(tmp_path, config, "--simulate", "mixed", "--period", a_past_day())
    assert code == 0, err
    _, hours = _table_rows(page, "table-hours")
    totals = [row for row in hours if row[0].startswith("total")]
    assert [row[0] for row in totals] == ["total"], totals
    assert "unknown" not in totals[0][1:5], totals
    head, budget = _table_rows(page, "table-budget")
    whole = next(row for row in budget if row[0] == "total")
    assert all(whole[head.index(t)] == "" for t in ("cost in window", "cost month to date",
                                                    "budget", "forecast month end")), whole
    head, waiting = _table_rows(page, "table-waiting")
    assert head[-2:] == ["cost (EUR)", "cost (USD)"], head
    assert all("unknown" not in row[1:] and not any(c.startswith("\u2265") for c in row)
               for row in waiting), waiting


def test_waiting_costs_leaving_out_an_unpriced_group_are_marked_at_least(
        tmp_path: Path) -> None:
    """The AMD devices in a group without a price: what all holders waited on costs at least
    the priced holders' sum, marked as such, never printed as if whole."""
    config = '[ledger]\ninterval_seconds = 900\n[[rules]]\nvendor = "amd"\nresource_group = "lab"\n'
    code, page, err = _report(tmp_path, config, "--simulate", "mixed", "--period", a_past_day())
    assert code == 0, err
    head, waiting = _table_rows(page, "table-waiting")
    computing = next(row for row in waiting if row[0] == "computing")
    assert computing[head.index("cost")].startswith("\u2265 "), waiting


def test_waiting_costs_with_nothing_priced_say_no_price(tmp_path: Path) -> None:
    code, page, err = _report(tmp_path, NO_PRICES, "--simulate", "mixed", "--period",
                              a_past_day())
    assert code == 0, err
    head, waiting = _table_rows(page, "table-waiting")
    assert waiting and {row[head.index("cost")] for row in waiting} == {"no price"}, waiting


def _budget_table(page: str) -> dict[str, dict[str, str]]:
    """The budget table, ``{first cell: {column title: cell text}}`` (the total line too)."""
    import html
    budget = page.split('id="table-budget"')[1].split("</table>")[0]
    head = [html.unescape(h) for h in re.findall(r"<th[^>]*>([^<]*)</th>", budget)]
    out = {}
    for line in re.findall(r"<tr>(.*?)</tr>", budget.split("</thead>")[1]):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", line)]
        out[cells[0]] = dict(zip(head, cells))
    return out


def _figure(text: str) -> float:
    return float(text.replace(",", ""))


def test_every_groups_forecast_is_the_month_to_dates_with_a_budget_or_not(
        tmp_path: Path) -> None:
    """A day that does not start the month, training and inference with a budget, npu
    without: every group's cost month to date and forecast are those of the export of the month
    to date (the 1st to the window's end), never the npu's one day extrapolated beside the
    others' month to date; the cost in the window is the window's; the totals add the rows."""
    import datetime as dt
    day = dt.date.fromisoformat(a_past_day())
    code, page, err = _report(tmp_path, BUDGETS, "--simulate", "mixed", "--period", day.isoformat())
    assert code == 0, err
    table = _budget_table(page)
    window = {r["resource_group"]: r for r in csv_rows(allsmi(
        "export", "--config", "c.toml", "--simulate", "mixed", "--period", day.isoformat(),
        "--group-by", "resource_group", cwd=tmp_path).stdout)}
    month = {r["resource_group"]: r for r in csv_rows(allsmi(
        "export", "--config", "c.toml", "--simulate", "mixed", "--since",
        day.replace(day=1).isoformat(), "--until", (day + dt.timedelta(days=1)).isoformat(),
        "--group-by", "resource_group", cwd=tmp_path).stdout)}
    assert set(window) == set(month) == {"inference", "npu", "training"}
    for group in window:
        line = table[group]
        assert line["cost in window"] == printed(float(window[group]["cost"])), group
        assert line["cost month to date"] == printed(float(month[group]["cost"])), group
        assert line["forecast month end"] == printed(
            float(month[group]["forecast_month_end_cost"])), group
    assert table["npu"]["budget used month to date"] == "no budget"
    # the month to date is more than the day: the two costs are not the same figure
    assert _figure(table["npu"]["cost month to date"]) > _figure(table["npu"]["cost in window"])
    for column in ("cost in window", "cost month to date", "forecast month end"):
        assert _figure(table["total"][column]) == pytest.approx(
            sum(_figure(table[g][column]) for g in window), abs=0.011), column


def test_without_budgets_a_day_shows_no_forecast_of_the_day_alone(tmp_path: Path) -> None:
    """No budget, a day that does not start the month: the month to date is not replayed
    for the page (a simulation's costs a replay of it), so its cost and forecast are "—",
    explained, on every line and the total, never the day's cost x the month's days."""
    code, page, err = _report(tmp_path, NO_BUDGETS, "--simulate", "mixed", "--period",
                              a_past_day(), "--verbose")
    assert code == 0, err
    assert "month to date" not in err and err.count("replaying") == 1, err
    table = _budget_table(page)
    assert set(table) == {"inference", "npu", "training", "total"}
    for name, line in table.items():
        assert line["cost month to date"] == line["forecast month end"] == "—", (name, line)
        assert line["cost in window"][0].isdigit(), (name, line)
    notes = _notes(page)
    assert any(n.startswith("Month to date (—): it is read only for the budgets") for n in
               notes), notes
    assert "No budgets: no group has budget_per_month; costs are shown without one." in notes


@pytest.mark.parametrize("inference_budget", ["", "budget_per_month = 100000\n"])
def test_a_budgeted_group_without_a_device_in_the_window_is_held_to_its_budget(
        tmp_path: Path, inference_budget: str) -> None:
    """training spent 239 EUR on the month's first day and nothing on the second, over its
    100 EUR budget; inference ran both days. Over the second day, training has no row in the
    window, yet its month to date is over budget: the report's budget table has its line (its
    budget, cost month to date, budget used and forecast; no device in the window, which leaves
    the window's total whole) and the report and the export both say it is over budget, whether
    or not a group of the window has a budget. The export's rows stay the window's."""
    import csv
    import datetime as dt
    import json

    from allsmi.config import parse_config

    from ..accounting.helpers import device, record, snap
    from .support import last_month
    year, month = map(int, last_month().split("-"))
    start = dt.datetime(year, month, 1, tzinfo=dt.timezone.utc)
    days = __import__("calendar").monthrange(year, month)[1]
    config = ("[groups.training]\nprice_per_device_hour = 10.0\ncurrency = \"EUR\"\n"
              "budget_per_month = 100\n\n[groups.inference]\nprice_per_device_hour = 1.0\n"
              "currency = \"EUR\"\n" + inference_budget)
    (tmp_path / "c.toml").write_text(config)
    recorded = parse_config("[collector]\ninterval_seconds = 300\n" + config)
    record(tmp_path / "l.db", (snap(start.timestamp() + k * 300, *(
        [device("GPU-t", util=50.0, users=["alice"], group="training")] if k < 288 else []),
        device("GPU-i", util=50.0, users=["bob"], group="inference", vendor="amd",
               model="MI300X")) for k in range(2 * 288 + 1)), recorded)
    day2 = start + dt.timedelta(days=1)
    args = ("--ledger", "l.db", "--since", day2.date().isoformat(), "--until",
            (day2 + dt.timedelta(days=1)).date().isoformat())
    spent = 287 * 300 / 3600 * 10.0  # its last sample at 23:55
    # (its device seen half the month to date: for all the ledger knows, the rest unrecorded)
    said = f"group training cost at least {spent:.2f} EUR this month to date, above its " \
        "monthly budget of 100 EUR"
    code, page, err = _report(tmp_path, config, *args)
    assert code == 0, err
    assert said in err, err
    assert "has data for 74.91% of its device time, below the threshold 95.00% (lowest: group " \
        "training 49.8%)" in err, err
    rows = _budget_rows(page)
    assert rows["training"] == ("no device", f"{spent:.2f}", "100.00", f"{spent:.1f} %",
                                f"{spent * days / 2:,.2f}"), rows
    assert rows["inference"][:2] == ("24.00", "48.00"), rows
    foot = page.split('id="table-budget"')[1].split("</table>")[0].split("<tfoot")[1]
    total = re.findall(r"<td[^>]*>([^<]*)</td>", foot)
    # the window's cost is whole (training's leaves nothing out of it), the month's has both
    assert total[3:6] == ["24.00", f"{48 + spent:.2f}",
                          "100,100.00" if inference_budget else "100.00"], total
    assert any(said in n for n in _notes(page)), _notes(page)
    out = allsmi("export", "--config", "c.toml", *args, "--group-by", "resource_group",
                 "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert [r["resource_group"] for r in document["rows"]] == ["inference"]
    assert said in out.stderr and said in document["warnings"], out.stderr
    out = allsmi("export", "--config", "c.toml", *args, "--group-by", "resource_group",
                 cwd=tmp_path)
    assert [r["resource_group"] for r in csv.DictReader(out.stdout.splitlines())] == \
        ["inference"] and said in out.stderr, out.stderr


def test_a_window_without_device_data_still_shows_the_month_to_dates_budgets(
        tmp_path: Path) -> None:
    """The month's third day, when no device reported (the ledger holds days 1 and 2): the page
    says there is no device data in the window (exit 3, as the export), yet its budget table
    holds each budgeted group's month to date, training's over its budget, as with data in
    the window; never a page whose only sign of the overrun is a line among the warnings."""
    import datetime as dt
    start, days, config = _two_budgeted_days(tmp_path)
    day3 = start + dt.timedelta(days=2)
    code, page, err = _report(tmp_path, config, "--ledger", "l.db", "--since",
                              day3.date().isoformat(), "--until",
                              (day3 + dt.timedelta(days=1)).date().isoformat())
    assert code == 3 and "no device data for" in err, err
    rows = _budget_rows(page)
    assert rows["training"] == ("no device", "480.00", "1,000.00", "48.0 %",
                                f"{480 * days / 3:,.2f}"), rows
    assert rows["inference"][:2] == ("no device", "48.00"), rows
    assert "No device data in this window: there is nothing to chart, only the month to date " \
        "of the groups with a budget (below)." in _notes(page)
    assert 'id="table-holders"' not in page and 'id="table-hours"' not in page

"""Budgets per resource group: ``[groups.NAME] budget_per_month``, the export's
``budget``, ``budget_used_ratio`` and ``forecast_month_end_cost`` columns, the exporter's
``allsmi_resource_group_budget_per_month``. (The alerts are unit-tested by promtool:
deploy/prometheus/allsmi-rules.test.yml.)"""

from __future__ import annotations

import calendar
import csv
import datetime as dt
import io
import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from .fleet import simulated_exporters

CONFIG = """\
[[rules]]
resource_group = "training"
vendor = "nvidia"

[groups.training]
price_per_device_hour = 2.0
currency = "EUR"
budget_per_month = {budget}
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "allsmi", "export", "--config", "c.toml", *args],
                          cwd=cwd, env={**os.environ, "XDG_CONFIG_HOME": str(cwd)},
                          capture_output=True, text=True, timeout=300)


def _ledger(tmp_path: Path) -> Path:
    """A ledger of one training GPU held all the time from 2026-03-01 00:00 to 2026-03-03 00:00
    UTC (a sample a minute): 24 device-hours a day, 48 EUR a day at 2 EUR an hour."""
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.config import parse_config

    from .helpers import T0, device, snap
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, parse_config(CONFIG.format(budget=1000)
                                          + "\n[ledger]\nmax_gap_seconds = 120\n"))
    start = T0 - 86400  # 2026-03-01T00:00:00Z
    for k in range(2 * 1440 + 1):
        rec.on_snapshot(replace(snap(start + 60 * k, device("GPU-a", util=50.0, users=["alice"],
                                                            group="training", power=300.0)),
                                monotonic=1000.0 + 60 * k))
    rec.close()
    return db


def test_budget_columns_are_the_month_to_date_whatever_the_window(tmp_path: Path) -> None:
    """--period 2026-03-02 (the 2nd of the month): its cost is one day's, but the budget used
    and the forecast are the month to date's (the 1st and the 2nd), as a reader of "budget used"
    expects."""
    db = _ledger(tmp_path)
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=1000))
    out = run("--ledger", str(db), "--period", "2026-03-02", "--group-by", "resource_group",
              "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    assert row["cost"] == pytest.approx(48.0, rel=1e-3)  # the window: one day
    assert row["budget_used_ratio"] == pytest.approx(96.0 / 1000, rel=1e-3)  # the 1st and the 2nd
    assert row["forecast_month_end_cost"] == pytest.approx(96.0 / 2 * 31, rel=1e-3)
    assert "group training is forecast to cost 1488.00 EUR this month" in out.stderr, out.stderr
    # A window that starts on the first of its month is its own month to date.
    out = run("--ledger", str(db), "--since", "2026-03-01", "--until", "2026-03-02",
              "--group-by", "resource_group", "--format", "json", cwd=tmp_path)
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    assert row["budget_used_ratio"] == pytest.approx(48.0 / 1000, rel=1e-3)
    assert row["forecast_month_end_cost"] == pytest.approx(48.0 * 31, rel=1e-3)
    # Under budget so far: nothing said.
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=10**5))
    out = run("--ledger", str(db), "--period", "2026-03-02", "--group-by", "resource_group",
              cwd=tmp_path)
    assert out.returncode == 0 and "budget" not in out.stderr, out.stderr
    rows = {r["resource_group"]: r for r in csv.DictReader(io.StringIO(out.stdout))}
    assert float(rows["training"]["budget_used_ratio"]) == pytest.approx(96.0 / 1e5, rel=1e-3)


def test_a_window_from_the_month_before_budgets_its_month_to_date(tmp_path: Path) -> None:
    """2026-02-28 to 2026-03-03: the cost is the window's three days (144 EUR), but the budget
    used and the forecast are the month to date's, from the first of the month holding the
    window's end (the 1st and the 2nd: 96 EUR), not the window's cost over a monthly budget
    with no forecast at all."""
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.config import parse_config

    from .helpers import T0, device, snap
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, parse_config(CONFIG.format(budget=1000)
                                          + "\n[ledger]\nmax_gap_seconds = 120\n"))
    start = T0 - 2 * 86400  # 2026-02-28T00:00:00Z
    for k in range(3 * 1440 + 1):
        rec.on_snapshot(replace(snap(start + 60 * k, device("GPU-a", util=50.0, users=["alice"],
                                                            group="training", power=300.0)),
                                monotonic=1000.0 + 60 * k))
    rec.close()
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=1000))
    out = run("--ledger", str(db), "--since", "2026-02-28", "--until", "2026-03-03",
              "--group-by", "resource_group", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    assert row["cost"] == pytest.approx(144.0, rel=1e-3)  # the window: three days
    assert row["budget_used_ratio"] == pytest.approx(96.0 / 1000, rel=1e-3)
    assert row["forecast_month_end_cost"] == pytest.approx(96.0 / 2 * 31, rel=1e-3)
    assert "group training is forecast to cost 1488.00 EUR this month" in out.stderr, out.stderr


def test_a_month_to_date_with_little_data_is_said_and_its_overrun_is_at_least(
        tmp_path: Path) -> None:
    """A ledger begun on the 10th, one day recorded: the month to date (the 1st to the 11th)
    holds data for a tenth of its device time, so the budget used and the forecast count only
    what was recorded. The export says so (stderr and the JSON's warnings, exit status
    unchanged: the window itself is whole) and says the overrun as a lower bound."""
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.config import parse_config

    from .helpers import T0, device, snap
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, parse_config(CONFIG.format(budget=100)
                                          + "\n[ledger]\nmax_gap_seconds = 120\n"))
    start = T0 + 8 * 86400  # 2026-03-10T00:00:00Z
    for k in range(1440 + 1):
        rec.on_snapshot(replace(snap(start + 60 * k, device("GPU-a", util=50.0, users=["alice"],
                                                            group="training", power=300.0)),
                                monotonic=1000.0 + 60 * k))
    rec.close()
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=100))
    out = run("--ledger", str(db), "--period", "2026-03-10", "--group-by", "resource_group",
              "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    row = next(r for r in document["rows"] if r["resource_group"] == "training")
    assert row["coverage_ratio"] == pytest.approx(1.0)
    assert row["forecast_month_end_cost"] == pytest.approx(48.0 / 10 * 31, rel=1e-3)
    short = ("the month to date (2026-03-01T00:00:00Z to 2026-03-11T00:00:00Z), which "
             "budget_used_ratio and forecast_month_end_cost are read from, has data for 10.00% "
             "of its device time, below the threshold 95.00% (lowest: group training 10.0%): "
             "they count only the usage recorded, so they may be low")
    over = "group training is forecast to cost at least 148.80 EUR this month, above its " \
        "budget of 100 EUR"
    assert [w[:len(short)] for w in document["warnings"]] == [short, over[:len(short)]], \
        document["warnings"]
    assert over in document["warnings"] and short in out.stderr and over in out.stderr
    # a threshold it meets says nothing of it
    out = run("--ledger", str(db), "--period", "2026-03-10", "--coverage-threshold", "0.1",
              "--format", "json", cwd=tmp_path)
    assert json.loads(out.stdout)["warnings"] == [over.replace("at least ", "")], out.stderr


def test_a_budget_of_0_is_a_budget_and_any_cost_is_above_it(tmp_path: Path) -> None:
    """``budget_per_month = 0`` (documented: 0 to 1e+15): a group that must not spend. Its
    forecast is the month to date's like any budgeted group's, and its cost so far is said to
    be above it (not only its forecast), as the exporter's ``AllsmiGroupBudgetExceeded`` says;
    the ratio to 0 is unknown, never 0 or infinite."""
    db = _ledger(tmp_path)
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=0))
    out = run("--ledger", str(db), "--period", "2026-03-02", "--group-by", "resource_group",
              "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    row = next(r for r in document["rows"] if r["resource_group"] == "training")
    assert row["budget"] == 0 and row["budget_used_ratio"] is None
    assert row["forecast_month_end_cost"] == pytest.approx(96.0 / 2 * 31, rel=1e-3)
    said = "group training cost 96.00 EUR this month to date, above its monthly budget of 0 EUR"
    assert said in out.stderr and said in document["warnings"], out.stderr


def test_a_budget_too_small_for_a_finite_ratio_has_no_ratio(tmp_path: Path) -> None:
    """``budget_per_month = 1e-320`` (in range: above 0): the cost over it is no finite number.
    The JSON export failed with a traceback (JSON holds no ``inf``) and the CSV printed ``inf``;
    as for a budget of 0, there is no ratio, and the cost is said to be above the budget."""
    db = _ledger(tmp_path)
    (tmp_path / "c.toml").write_text(CONFIG.format(budget="1e-320"))
    args = ("--ledger", str(db), "--period", "2026-03-02", "--group-by", "resource_group")
    out = run(*args, "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    assert row["budget"] and row["budget_used_ratio"] is None and row["cost"] == 48.0
    assert "above its monthly budget" in out.stderr
    out = run(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(r for r in csv.DictReader(io.StringIO(out.stdout)))
    assert row["budget_used_ratio"] == "" and "inf" not in out.stdout


@pytest.mark.parametrize("price,budget,said", [
    # a budget of a million: as the budget column prints it, never "1e+06"
    ("100000", "1000000", "group training cost 4800000.00 EUR this month to date, above its "
                          "monthly budget of 1000000 EUR"),
    # a tiny budget: never "0.00 EUR, above its budget of 0.0001 EUR"
    ("0.00001", "0.0001", "group training cost 0.00048 EUR this month to date, above its "
                          "monthly budget of 0.0001 EUR"),
])
def test_over_budget_says_amounts_as_the_columns_print_them(tmp_path: Path, price: str,
                                                            budget: str, said: str) -> None:
    """The 1st and 2nd of the month, 48 device-hours: the warning's budget is printed as the
    ``budget`` column prints it, and its cost with the digits that show it above the budget."""
    db = _ledger(tmp_path)
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=budget).replace(
        "price_per_device_hour = 2.0", f"price_per_device_hour = {price}"))
    out = run("--ledger", str(db), "--period", "2026-03-02", "--group-by", "resource_group",
              "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["warnings"] == [said] and f"allsmi: {said}\n" in out.stderr, out.stderr


def test_a_row_takes_the_month_to_date_of_its_own_labels(tmp_path: Path) -> None:
    """The group's labels changed at the start of the 2nd (team zz, then aa): the month to
    date has a row per set of labels. The window's row (aa, half a day: 24 EUR) takes the
    budget used and forecast of aa's month to date (24 EUR), never zz's (48 EUR), and so
    agrees with the export of the month to date itself."""
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.config import parse_config

    from .helpers import T0, device, snap
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, parse_config(CONFIG.format(budget=1000)
                                          + "\n[ledger]\nmax_gap_seconds = 120\n"))
    start = T0 - 86400  # 2026-03-01T00:00:00Z
    for k in range(2 * 1440 + 1):
        team = "zz" if k < 1440 else "aa"
        rec.on_snapshot(replace(snap(start + 60 * k, device(
            "GPU-a", util=50.0, users=["alice"], group="training", power=300.0,
            labels={"team": team})), monotonic=1000.0 + 60 * k))
    rec.close()
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=1000))
    rows = {}
    for since in ("2026-03-02", "2026-03-01"):
        out = run("--ledger", str(db), "--since", since, "--until", "2026-03-02T12:00:00Z",
                  "--group-by", "resource_group", "--format", "json", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        rows[since] = {r["labels"]["team"]: r for r in json.loads(out.stdout)["rows"]}
    (window,) = rows["2026-03-02"].values()
    month = rows["2026-03-01"]["aa"]
    assert window["cost"] == month["cost"] == pytest.approx(24.0, rel=1e-3)
    assert window["budget_used_ratio"] == month["budget_used_ratio"] == pytest.approx(0.024)
    assert window["forecast_month_end_cost"] == month["forecast_month_end_cost"]


def test_a_known_overrun_is_said_beside_rows_of_unknown_cost(tmp_path: Path) -> None:
    """A group priced per kWh holds a GPU (300 W) and a TPU that reports no energy: grouped by
    vendor, the TPU's row has no cost. The GPU alone cost 144 EUR this month, over the 1 EUR
    budget: that is said whatever the grouping (with resource_group alone, the group's one row
    has the GPU's energy), as at least the known part, never hidden by the unknown one."""
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.config import parse_config

    from .helpers import T0, device, snap
    config = '[groups.training]\nprice_per_kwh = 10.0\ncurrency = "EUR"\nbudget_per_month = 1\n'
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, parse_config(config + "\n[ledger]\nmax_gap_seconds = 120\n"))
    start = T0 - 86400  # 2026-03-01T00:00:00Z
    for k in range(2 * 1440 + 1):
        rec.on_snapshot(replace(snap(start + 60 * k, device(
            "GPU-a", util=50.0, users=["alice"], group="training", power=300.0), device(
            "TPU-b", util=50.0, users=["bob"], group="training", vendor="google", model="v5e")),
            monotonic=1000.0 + 60 * k))
    rec.close()
    (tmp_path / "c.toml").write_text(config)
    for group_by, least in (("resource_group", ""), ("resource_group,vendor", "at least ")):
        out = run("--ledger", str(db), "--period", "2026-03-02", "--group-by", group_by,
                  "--format", "json", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        said = f"group training cost {least}144.00 EUR this month to date, above its monthly " \
            "budget of 1 EUR"
        assert json.loads(out.stdout)["warnings"] == [said], (group_by, out.stderr)


def test_over_budget_is_said_of_the_group_whoever_the_window_saw(tmp_path: Path) -> None:
    """alice held the GPU on the 1st, bob on the 2nd: grouped by user, the 2nd's window has
    bob's row only (his 48 EUR of the month), yet the group's month to date is 96 EUR, over a
    60 EUR budget: the warning is the group's, as with --group-by resource_group."""
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.config import parse_config

    from .helpers import T0, device, snap
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, parse_config(CONFIG.format(budget=60)
                                          + "\n[ledger]\nmax_gap_seconds = 120\n"))
    start = T0 - 86400  # 2026-03-01T00:00:00Z
    for k in range(2 * 1440 + 1):
        user = "alice" if k < 1440 else "bob"
        rec.on_snapshot(replace(snap(start + 60 * k, device("GPU-a", util=50.0, users=[user],
                                                            group="training", power=300.0)),
                                monotonic=1000.0 + 60 * k))
    rec.close()
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=60))
    said = []
    for group_by in ("resource_group", "resource_group,user"):
        out = run("--ledger", str(db), "--period", "2026-03-02", "--group-by", group_by,
                  "--format", "json", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        said.append([line for line in out.stderr.splitlines() if "training" in line])
        rows = [r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training"]
        assert sum(r["cost"] for r in rows) == pytest.approx(48.0, rel=1e-3)
    assert said[0] == said[1] == [
        "allsmi: group training cost 96.00 EUR this month to date, above its monthly budget "
        "of 60 EUR"], said


def test_a_month_from_its_first_day_forecasts_from_itself(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=100))
    first = dt.date.today().replace(day=1)
    first_of_last = (first - dt.timedelta(days=1)).replace(day=1)
    # The first day of last month is its own month to date: the day's cost x the month's days.
    out = run("--simulate", "mixed", "--period", first_of_last.isoformat(), "--group-by",
              "resource_group", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    days = calendar.monthrange(first_of_last.year, first_of_last.month)[1]
    assert row["forecast_month_end_cost"] == pytest.approx(row["cost"] * days, rel=1e-5)
    assert row["budget_used_ratio"] == pytest.approx(row["cost"] / 100, rel=1e-5)
    assert row["cost"] > 100 / days and "group training" in out.stderr  # over budget: named
    # A group without a budget: empty budget columns, a forecast all the same.
    other = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] != "training"
                 and r["cost"])
    assert other["budget"] is None and other["budget_used_ratio"] is None
    assert other["forecast_month_end_cost"] == pytest.approx(other["cost"] * days, rel=1e-5)


@pytest.mark.parametrize("table,needle", [
    ('budget_per_month = 5000\n', "a group with a budget needs a currency"),
    ('currency = "EUR"\nbudget_per_month = -1\n', "budget_per_month"),
    ('currency = "EUR"\nbudget_per_month = "lots"\n', "must be a number"),
    ('currency = "EUR"\nbudget_per_month = 1e16\n', "from 0 to 1e+15"),
])
def test_bad_budgets_exit_2_naming_the_key(tmp_path: Path, table: str, needle: str) -> None:
    (tmp_path / "c.toml").write_text("[groups.training]\n" + table)
    out = run("--simulate", "mixed", "--period", "yesterday", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and "c.toml" in out.stderr and "Traceback" not in out.stderr


def test_the_exporter_publishes_the_budget(tmp_path: Path) -> None:
    with simulated_exporters(tmp_path, CONFIG.format(budget=5000) + "\n[groups.empty]\n",
                             config_name="c.toml") as serve:
        (target,) = serve.targets
        with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as resp:  # noqa: S310
            text = resp.read().decode()
    lines = [x for x in text.splitlines() if x.startswith("allsmi_resource_group_budget_per_month")]
    assert lines == ['allsmi_resource_group_budget_per_month{resource_group="training",'
                     'currency="EUR"} 5000.0'], lines
    assert "# TYPE allsmi_resource_group_budget_per_month gauge" in text

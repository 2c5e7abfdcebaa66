"""Budgets per resource group (issue 22): ``[groups.NAME] budget_per_month``, the export's
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


def test_budget_columns_and_the_forecast(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=5000))
    out = run("--simulate", "mixed", "--period", "yesterday", "--group-by", "resource_group",
              cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {r["resource_group"]: r for r in csv.DictReader(io.StringIO(out.stdout))}
    train = rows["training"]
    assert train["budget"] == "5000" and train["currency"] == "EUR"
    cost = float(train["cost"])
    assert cost > 0
    assert float(train["budget_used_ratio"]) == pytest.approx(cost / 5000, abs=1e-6)
    yesterday = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=1)
    days = calendar.monthrange(yesterday.year, yesterday.month)[1]
    assert float(train["forecast_month_end_cost"]) == pytest.approx(cost * days, rel=1e-6)
    # A group without a budget: empty budget columns, a forecast all the same.
    other = next(r for g, r in rows.items() if g != "training" and r["cost"])
    assert other["budget"] == "" and other["budget_used_ratio"] == ""
    assert float(other["forecast_month_end_cost"]) == pytest.approx(float(other["cost"]) * days,
                                                                     rel=1e-6)
    forecast = cost * days
    if forecast > 5000:  # the mixed scenario's training group costs ~360 EUR a day
        assert "group training is forecast to cost" in out.stderr, out.stderr
    # Under budget: nothing said.
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=10**9))
    out = run("--simulate", "mixed", "--period", "yesterday", "--group-by", "resource_group",
              "--format", "json", cwd=tmp_path)
    assert out.returncode == 0 and "budget" not in out.stderr, out.stderr
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    assert row["budget"] == 1e9 and row["budget_used_ratio"] == pytest.approx(cost / 1e9, abs=1e-6)


def test_a_whole_month_forecasts_its_own_cost(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONFIG.format(budget=100))
    first = dt.date.today().replace(day=1)
    last_month = (first - dt.timedelta(days=1)).strftime("%Y-%m")
    day = (first - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    # one day of last month: the day's cost x the month's days; the month itself: its cost.
    # (a day is enough to check the factor without replaying a month)
    out = run("--simulate", "mixed", "--period", day, "--group-by", "resource_group", "--format",
              "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    days = calendar.monthrange(int(last_month[:4]), int(last_month[5:]))[1]
    assert row["forecast_month_end_cost"] == pytest.approx(row["cost"] * days, rel=1e-5)
    assert row["cost"] > 100 / days and "group training" in out.stderr  # over budget: named
    # A window across two months has no forecast.
    out = run("--simulate", "mixed", "--since", f"{day}T23:00:00Z", "--until",
              f"{first.isoformat()}T01:00:00Z", "--group-by", "resource_group", "--format",
              "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    assert row["forecast_month_end_cost"] is None and row["budget"] == 100


@pytest.mark.parametrize("table,needle", [
    ('budget_per_month = 5000\n', "a group with a budget needs a currency"),
    ('currency = "EUR"\nbudget_per_month = -1\n', "budget_per_month"),
    ('currency = "EUR"\nbudget_per_month = "lots"\n', "must be a number"),
    ('currency = "EUR"\nbudget_per_month = 1e16\n', "at most"),
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

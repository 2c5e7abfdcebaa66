"""``allsmi export`` says what it cannot bill from the ledger: groups the configuration no longer
declares (their price unknown), and time the ledger no longer holds at the resolution the
window needs. A subprocess over a real ledger."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import T0, config, device, record, snap
from .test_export_cli import run

DECLARED = """
[groups.inference]
price_per_device_hour = 1.0
currency = "EUR"

[[rules]]
model = "A100"
resource_group = "batch"
"""
SINCE, UNTIL = "2026-03-02T00:00:00Z", "2026-03-02T01:00:00Z"
#: The ledger holds that hour alone, so its month to date (from the 1st) has data for 4 % of its
#: device time, which a budget's export says (test_budgets.py); these tests count other warnings.
MONTH_UNCHECKED = ("--coverage-threshold", "0")


@pytest.fixture()
def renamed(tmp_path: Path) -> Path:
    """An hour of four devices in groups ``training`` and ``old-pool`` (since renamed away),
    ``inference`` (declared, priced), ``batch`` (a rule's: declared, no price)."""
    (tmp_path / "config.toml").write_text(DECLARED)
    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + t, device("GPU-t", power=100.0, users=["ann"], group="training"),
                     device("GPU-o", power=100.0, users=["bo"], group="old-pool"),
                     device("GPU-i", power=100.0, users=["cy"], group="inference"),
                     device("GPU-b", power=100.0, users=["di"], group="batch", model="A100"))
                for t in range(0, 3601, 10)])
    return db


def _export(db: Path, tmp_path: Path, fmt: str, *extra: str) -> tuple[str, list[str]]:
    out = run("--ledger", str(db), "--config", "config.toml", "--since", SINCE, "--until", UNTIL,
              "--format", fmt, *extra, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return out.stdout, [line for line in out.stderr.splitlines() if "warning" in line]


def test_undeclared_groups_are_named_once_and_keep_an_empty_cost(renamed: Path,
                                                                 tmp_path: Path) -> None:
    text, warned = _export(renamed, tmp_path, "json", "--group-by", "resource_group,user")
    assert len(warned) == 1, warned
    assert "old-pool, training are billed but not declared" in warned[0]
    assert "inference" not in warned[0] and "batch" not in warned[0]
    cost = {(r["resource_group"], r["user"]): r["cost"] for r in json.loads(text)["rows"]}
    assert cost[("training", "ann")] is None and cost[("old-pool", "bo")] is None
    assert cost[("inference", "cy")] == 1.0

    text, warned = _export(renamed, tmp_path, "csv")
    assert len(warned) == 1 and "old-pool, training" in warned[0]
    by_group = {r["resource_group"]: r["cost"] for r in csv.DictReader(io.StringIO(text))}
    assert by_group == {"batch": "", "inference": "1.000000", "old-pool": "", "training": ""}

    # FOCUS requires a number: an unpriced charge is 0 there, flagged as not priced.
    text, warned = _export(renamed, tmp_path, "focus")
    assert len(warned) == 1 and "old-pool, training" in warned[0]
    charges = [c for c in csv.DictReader(io.StringIO(text))
               if c["SubAccountId"] in ("training", "old-pool")]
    assert charges and {c["x_PriceConfigured"] for c in charges} == {"false"}


@pytest.mark.parametrize("text", [DECLARED + "\n[groups.training]\n[groups.old-pool]\n",
                                  "[[rules]]\nmodel = \"A100\"\nresource_group = \"batch\"\n"],
                         ids=["all-declared", "no-groups-priced"])
def test_declared_groups_are_not_warned_about(renamed: Path, tmp_path: Path, text: str) -> None:
    """Every group declared; or a configuration that declares no group (nothing is priced)."""
    (tmp_path / "config.toml").write_text(text)
    _, warned = _export(renamed, tmp_path, "csv")
    assert warned == []


def test_a_window_cut_inside_a_pruned_day_says_what_it_cannot_bill(tmp_path: Path) -> None:
    """Quarter hours pruned by rollup_retention_days, days kept: a Europe/Berlin window starts at
    23:00 UTC inside a day held only whole. Its first hour is not billed, and said so; the
    coverage counts it as unobserved (24 of 25 hours: above the 0.95 threshold, exit 0)."""
    cfg = ("[ledger]\nretention_days = 0.01\nrollup_retention_days = 0.05\n"
           "max_gap_seconds = 120\n")
    (tmp_path / "config.toml").write_text(cfg)
    db = tmp_path / "ledger.db"
    start = T0 - 5400  # 2026-03-01T22:30:00Z to 2026-03-03T00:30:00Z, a sample a minute
    record(db, [snap(start + t, device(power=100.0, users=["ann"]))
                for t in range(0, 26 * 3600 + 1, 60)], config(cfg))
    out = run("--ledger", str(db), "--config", "config.toml", "--tz", "Europe/Berlin",
              "--since", "2026-03-02", "--until", "2026-03-03T01:00", "--format", "json",
              cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warned = [line for line in out.stderr.splitlines() if "warning" in line]
    assert len(warned) == 1, out.stderr
    assert "not billed: 2026-03-01T23:00:00Z to 2026-03-02T00:00:00Z of the window" in warned[0]
    assert "quarter hours only from 2026-03-02T23:30:00Z on" in warned[0]
    assert "rollup_retention_days" in warned[0]
    doc = json.loads(out.stdout)
    assert doc["warnings"] == [warned[0].removeprefix("allsmi: warning: ")]  # said, and kept
    assert doc["coverage_ratio"] == pytest.approx(24 / 25)
    (row,) = doc["rows"]
    assert row["coverage_ratio"] == pytest.approx(24 / 25)
    assert row["observed_device_hours"] == pytest.approx(24.0)

    # Billed in UTC, the same days are read whole: nothing to say.
    out = run("--ledger", str(db), "--config", "config.toml", "--since", "2026-03-02T00:00:00Z",
              "--until", "2026-03-03T00:00:00Z", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr
    assert json.loads(out.stdout)["coverage_ratio"] == 1.0


def test_a_budget_s_month_to_date_does_not_say_a_warning_again(renamed: Path,
                                                                tmp_path: Path) -> None:
    """With a budget, an hour's export reads the month to date too (for the budget's columns):
    the same source warning is said once, not once per reading."""
    (tmp_path / "config.toml").write_text(DECLARED.replace(
        'currency = "EUR"', 'currency = "EUR"\nbudget_per_month = 1000.0', 1))
    _, warned = _export(renamed, tmp_path, "csv", *MONTH_UNCHECKED)
    assert len(warned) == 1 and "old-pool, training" in warned[0], warned


def _said(stderr: str) -> list[str]:
    return [line.removeprefix("allsmi: warning: ") for line in stderr.splitlines()
            if line.startswith("allsmi: warning: ")]


def test_the_json_carries_every_warning_said_once(renamed: Path, tmp_path: Path) -> None:
    """The undeclared groups' warning, said on stderr, is in the JSON's ``warnings`` too, once,
    word for word (a bill read by a program, without its stderr, still says its cost is short);
    with a budget the month to date is read too and says it again nowhere."""
    (tmp_path / "config.toml").write_text(DECLARED.replace(
        'currency = "EUR"', 'currency = "EUR"\nbudget_per_month = 1000.0', 1))
    out = run("--ledger", str(renamed), "--config", "config.toml", "--since", SINCE, "--until",
              UNTIL, "--format", "json", *MONTH_UNCHECKED, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    said = _said(out.stderr)
    assert len(said) == 1 and "old-pool, training are billed but not declared" in said[0]
    assert json.loads(out.stdout)["warnings"] == said


def test_a_budget_overrun_is_in_the_json_warnings(renamed: Path, tmp_path: Path) -> None:
    """A group above its budget is named on stderr and in the JSON's ``warnings``, once."""
    (tmp_path / "config.toml").write_text(DECLARED.replace(
        'currency = "EUR"', 'currency = "EUR"\nbudget_per_month = 0.5', 1))
    out = run("--ledger", str(renamed), "--config", "config.toml", "--since", SINCE, "--until",
              UNTIL, "--format", "json", *MONTH_UNCHECKED, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    overrun = "group inference cost 1.00 EUR this month to date, above its monthly budget of " \
              "0.5 EUR"
    assert out.stderr.count(overrun) == 1 and f"allsmi: {overrun}\n" in out.stderr
    warnings = json.loads(out.stdout)["warnings"]
    assert warnings == _said(out.stderr) + [overrun]


def _command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / "xdg"), "ALLSMI_LEDGER": ""}
    return subprocess.run([sys.executable, "-m", "allsmi", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_the_html_report_says_a_warning_once_with_a_budget(renamed: Path,
                                                            tmp_path: Path) -> None:
    """``allsmi report`` reads the month to date too (for the budgets), as the export does:
    the same source warning is said once, not once per reading."""
    pytest.importorskip("pygal")
    pytest.importorskip("jinja2")
    (tmp_path / "config.toml").write_text(DECLARED.replace(
        'currency = "EUR"', 'currency = "EUR"\nbudget_per_month = 1000.0', 1))
    out = _command("report", "--ledger", str(renamed), "--config", "config.toml", "--since",
                   SINCE, "--until", UNTIL, "-o", "r.html", *MONTH_UNCHECKED, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    said = _said(out.stderr)
    assert len(said) == 1 and "old-pool, training are billed but not declared" in said[0], said


def test_idle_json_carries_the_warnings_said(renamed: Path, tmp_path: Path) -> None:
    """``allsmi idle --format json`` (the same rows) carries the same warnings as the export."""
    out = _command("idle", "--ledger", str(renamed), "--config", "config.toml", "--since",
                   SINCE, "--until", UNTIL, "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    said = _said(out.stderr)
    assert len(said) == 1 and json.loads(out.stdout)["warnings"] == said

"""Periods as a cron job meets them: the first minute of a day, week or month, dates past what a
calendar holds, and days of 23 and 25 hours in ``--tz`` zones, billed by ``allsmi export`` (a
subprocess) from a real ledger whose raw minutes have expired (roll-ups only)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from allsmi.accounting.periods import PeriodError, UTC, parse_period, window_from, zone

from ..builtonce import built_once
from .helpers import T0, config, device, record, snap


def export(tmp_path: Path, *args: str, faketime: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_CONFIG": "",
           "ALLSMI_LEDGER": ""}
    command = [sys.executable, "-m", "allsmi", "export", *args]
    if faketime is not None:
        command = ["faketime", faketime, *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("period", ["today", "this-week", "this-month"])
@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])
def test_a_period_in_its_first_minute_is_refused_not_billed_as_a_gap(period: str, tz: str) -> None:
    """At 00:00:30 on Monday the 1st (local time) ``today``, ``this-week`` and ``this-month``
    run from midnight to the current minute, midnight: nothing. That is not "no device data"
    (exit 3, which alerts on a recorder gap every night at midnight): it is said as an empty
    window, like an empty --since/--until."""
    zone_ = zone(tz)
    now = dt.datetime(2026, 6, 1, 0, 0, 30, tzinfo=zone_)  # a Monday, the 1st
    with pytest.raises(PeriodError, match="the window is empty"):
        parse_period(period, zone_, now)
    with pytest.raises(PeriodError, match="the window is empty"):
        window_from(period, None, None, zone_, now)
    # a minute later the minute is billed
    later = parse_period(period, zone_, now + dt.timedelta(minutes=1))
    assert later.seconds == 60


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (apt-get install faketime)")
def test_this_month_on_the_first_at_half_past_midnight_exits_2_with_nothing_on_stdout(
        tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    start = dt.datetime(2026, 2, 28, 23, 0, tzinfo=UTC).timestamp()
    record(db, [snap(start + 20 * i, device(power=100, util=50, users=["ann"]))
                for i in range(181)])
    out = export(tmp_path, "--ledger", str(db), "--period", "this-month", "--format", "json",
                 "--textfile", str(tmp_path / "export.prom"), faketime="2026-03-01 00:00:30")
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert "the window is empty" in out.stderr and "no device data" not in out.stderr
    assert 'allsmi_export_failure_info{reason="config"} 1' in (tmp_path / "export.prom").read_text()
    # last-month is there already
    done = export(tmp_path, "--ledger", str(db), "--period", "last-month", "--format", "json",
                  "--coverage-threshold", "0", faketime="2026-03-01 00:00:30")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"][0]["observed_device_hours"] == pytest.approx(1.0)


@pytest.mark.parametrize("args", [
    ("--period", "9999-12"),  # its end is in the year 10000
    ("--period", "0000-01"),
    ("--period", "9999-12-31"),
    ("--period", "0001-01-01", "--tz", "Asia/Tokyo"),  # before the year 1 in UTC
    ("--since", "9999-12-31T23:00:00", "--tz", "America/New_York"),
    ("--since", "0001-01-01", "--until", "0001-02-01", "--tz", "Asia/Tokyo"),
    # in the calendar, but the month after it (the forecast to the month's end) is not
    ("--since", "9999-12-01", "--until", "9999-12-02"),
])
def test_dates_beyond_the_calendar_are_bad_options_not_tracebacks(tmp_path: Path,
                                                                  args: tuple[str, ...]) -> None:
    db = tmp_path / "ledger.db"
    record(db, [])
    out = export(tmp_path, "--ledger", str(db), *args)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert "out of range" in out.stderr and "Traceback" not in out.stderr


#: 2026-03-27T00:00Z to 2026-03-31T00:00Z and 2026-10-23T00:00Z to 2026-11-03T00:00Z hold
#: every DST change of 2026 in Europe/Berlin and America/New_York but New York's spring one.
SPRING, FALL = (dt.datetime(2026, 3, 27, tzinfo=UTC), 4), (dt.datetime(2026, 10, 23, tzinfo=UTC), 11)


@pytest.fixture(scope="module")
def dst_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One GPU held all along around both European DST changes, its raw minutes pruned (kept
    0.01 days): the days are billed from the quarter-hour and daily roll-ups alone."""
    def build(directory: Path) -> None:
        cfg = config("[ledger]\nretention_days = 0.01\nmax_gap_seconds = 120\n")
        for first, days in (SPRING, FALL):
            start = first.timestamp()
            record(directory / "ledger.db",
                   [snap(start + 60 * i, device(power=100, util=50, users=["ann"]))
                    for i in range(days * 1440 + 1)], cfg)

    return built_once(tmp_path_factory, "dst-ledger", build) / "ledger.db"


@pytest.mark.parametrize("period,tz,hours", [
    ("2026-03-29", "Europe/Berlin", 23), ("2026-10-25", "Europe/Berlin", 25),
    ("2026-11-01", "America/New_York", 25), ("2026-03-28", "Europe/Berlin", 24),
    ("2026-10-26", "Europe/Berlin", 24), ("2026-10-25", "UTC", 24)])
def test_days_of_23_and_25_hours_bill_their_hours_from_the_roll_ups(
        tmp_path: Path, dst_ledger: Path, period: str, tz: str, hours: int) -> None:
    out = export(tmp_path, "--ledger", str(dst_ledger), "--period", period, "--tz", tz,
                 "--format", "json", "--group-by", "resource_group")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    [row] = data["rows"]
    assert row["observed_device_hours"] == pytest.approx(hours, abs=1e-6)
    assert row["allocated_device_hours"] == pytest.approx(hours, abs=1e-6)
    assert row["coverage_ratio"] == pytest.approx(1.0)
    again = export(tmp_path, "--ledger", str(dst_ledger), "--period", period, "--tz", tz,
                   "--format", "json", "--group-by", "resource_group")
    assert again.stdout == out.stdout  # reruns are byte-identical


@pytest.mark.parametrize("how", ["env", "flag"])
def test_a_ledger_path_with_a_tilde_is_in_the_home_directory(tmp_path: Path, how: str) -> None:
    """``ALLSMI_LEDGER=~/ledger.db`` in a crontab or a unit's Environment= (neither expands
    '~'), or ``--ledger ~/ledger.db`` in an ExecStart=: the path named a directory '~' below the
    working directory, a different one for the recorder (a service: '/') and the export (cron:
    $HOME), which found "no ledger". '~' is the home directory, as in ``[ledger] path``."""
    home = tmp_path / "home"
    home.mkdir()
    record(home / "ledger.db", [snap(T0 + 20 * i, device(power=100, users=["ann"]))
                                for i in range(181)])
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "ALLSMI_CONFIG": "", "ALLSMI_LEDGER": "~/ledger.db" if how == "env" else ""}
    args = ["--ledger", "~/ledger.db"] if how == "flag" else []
    out = subprocess.run([sys.executable, "-m", "allsmi", "export", *args, "--since",
                          "2026-03-02T00:00:00Z", "--until", "2026-03-02T01:00:00Z"],
                         env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "~").exists()

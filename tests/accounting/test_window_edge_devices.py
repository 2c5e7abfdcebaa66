"""Devices that stop or start at a window's edge: a device is billed, and counted in coverage,
for the time it was seen inside the window only. One whose last sample lies exactly on the
window's start (an interval, quarter-hour or day boundary) is not in the next window at all
(never a row of 0 hours that halves its coverage and makes the export exit 3), nor is one that
stopped, or started, inside the interval an edge cuts on the window's other side."""

from __future__ import annotations

import csv
import datetime as dt
import io
from pathlib import Path

import pytest

from ..conftest import run_allsmi
from .helpers import T0, config, device, record, snap


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ledger(path: Path, spans: dict[str, tuple[float, float]], every: float = 10.0) -> Path:
    """Each device (named by its model) sampled every ``every`` seconds over its span,
    both ends included."""
    end = max(b for _, b in spans.values())
    snaps, t = [], min(a for a, _ in spans.values())
    while t <= end:
        snaps.append(snap(t, *(device(f"GPU-{m}", model=m, power=100.0, users=["ann"])
                               for m, (a, b) in sorted(spans.items()) if a <= t <= b)))
        t += every
    record(path, snaps, config(f"[collector]\ninterval_seconds = {every}"))
    return path


def _export(db: Path, *window: str) -> tuple[int, dict[str, dict[str, str]], str]:
    result = run_allsmi("export", "--ledger", str(db), "--group-by", "model", *window)
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(result.stdout))}
    return result.returncode, rows, result.stderr


@pytest.fixture(scope="module")
def hours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stops on the hour; C stops 30 s past it; D starts 30 s past 01:30; B runs all along."""
    return _ledger(tmp_path_factory.mktemp("edge") / "ledger.db",
                   {"A": (T0, T0 + 3600), "B": (T0, T0 + 7200), "C": (T0, T0 + 3630),
                    "D": (T0 + 5430, T0 + 7200)})


def test_a_device_stopped_on_the_windows_start_is_not_in_it(hours: Path) -> None:
    code, rows, err = _export(hours, "--since", _iso(T0 + 3600), "--until", _iso(T0 + 3630))
    assert code == 0, err
    assert set(rows) == {"B", "C"}  # A's last sample, on 01:00:00, closed its time before
    assert float(rows["C"]["observed_device_hours"]) == pytest.approx(30 / 3600, abs=1e-6)
    assert float(rows["C"]["coverage_ratio"]) == pytest.approx(1.0, abs=1e-6)


def test_devices_seen_only_outside_the_cut_intervals_are_not_in_the_window(hours: Path) -> None:
    # C stopped at 01:00:30 and D started at 01:30:30, inside the minutes the edges cut
    code, rows, err = _export(hours, "--since", _iso(T0 + 3630), "--until", _iso(T0 + 5430))
    assert code == 0, err
    assert set(rows) == {"B"}
    assert float(rows["B"]["observed_device_hours"]) == pytest.approx(0.5, abs=1e-6)
    assert float(rows["B"]["coverage_ratio"]) == pytest.approx(1.0, abs=1e-6)


def test_a_device_seen_in_part_of_a_cut_interval_is_billed_that_part(hours: Path) -> None:
    # the window ends 30 s past the hour, when C stopped: all of C's last minute is billed
    code, rows, err = _export(hours, "--since", _iso(T0), "--until", _iso(T0 + 3630))
    assert code == 0, err
    assert set(rows) == {"A", "B", "C"}
    assert float(rows["C"]["observed_device_hours"]) == pytest.approx(3630 / 3600, abs=1e-6)
    assert float(rows["A"]["observed_device_hours"]) == pytest.approx(1.0, abs=1e-6)
    # D started at 01:30:30: from then, its minute is D's whole, none of it before
    code, rows, err = _export(hours, "--since", _iso(T0 + 5400), "--until", _iso(T0 + 5460))
    assert float(rows["D"]["observed_device_hours"]) == pytest.approx(30 / 3600, abs=1e-6)
    assert float(rows["D"]["coverage_ratio"]) == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize(("stop", "window"), [
    # a day boundary: the next day is read from the daily roll-ups
    (T0 + 86400, ("--period", "2026-03-03")),
    (T0 + 86400, ("--since", "2026-03-03T00:00:00Z", "--until", "2026-03-03T01:00:00Z")),
    # local midnight in a zone half an hour off UTC: a quarter hour's boundary
    (T0 + 86400 - 5.5 * 3600, ("--period", "2026-03-03", "--tz", "Asia/Kolkata")),
])
def test_a_device_stopped_on_a_roll_up_boundary_is_not_in_the_next_window(
        tmp_path: Path, stop: float, window: tuple[str, ...]) -> None:
    db = _ledger(tmp_path / "ledger.db", {"A": (T0, stop), "B": (T0, T0 + 2 * 86400)}, every=60)
    code, rows, err = _export(db, *window)
    assert code == 0, err  # not "data covers 50.00% ..." (exit 3): nothing is missing
    assert set(rows) == {"B"}
    assert float(rows["B"]["coverage_ratio"]) == pytest.approx(1.0, abs=1e-6)


def test_a_device_sampled_less_often_than_bridged_still_shows_its_gap(tmp_path: Path) -> None:
    """Samples too far apart to bridge are the device's only trace: it stays in the window,
    its time unobserved (coverage 0, exit 3), never dropped from the bill."""
    snaps = [snap(T0 + t, device("GPU-A", model="A", power=100.0)) for t in range(0, 7201, 600)]
    db = tmp_path / "ledger.db"
    record(db, snaps)
    code, rows, _ = _export(db, "--since", _iso(T0 + 3600), "--until", _iso(T0 + 7200))
    assert code == 3
    assert set(rows) == {"A"} and float(rows["A"]["coverage_ratio"]) == 0.0

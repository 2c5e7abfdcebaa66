"""Durations on the monotonic clock (issue 9, item 7).

A collector whose wall clock steps 25 s forward, and later 25 s back, while its monotonic clock
runs evenly: the ledger (a real SQLite file, read by ``allsmi export``) books exactly the time and
energy that passed, neither the inflated 145 s for 120 s nor a lost minute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.accounting.recorder import LedgerRecorder
from allsmi.collection.collector import Collector
from allsmi.config import parse_config
from allsmi.schema import DeviceSample, ProcessSample

from .helpers import T0, Clocks, SteadyBackend, device, export_first_hour, rows, snap

WATTS = 300.0
#: Two GPUs at half utilization, each with one process.
GPUS = [DeviceSample(id=f"GPU-{i}", vendor="nvidia", kind="gpu", backend="steady", index=i,
                     name="Steady GPU", health="ok", utilization_percent=50.0, power_watts=WATTS,
                     processes=(ProcessSample(pid=1, user="ann"),)) for i in range(2)]


@pytest.mark.parametrize("step,at", [(25.0, 60), (-25.0, 60), (-90.0, 60),
                                     # an NTP step soon after boot, back past the first sample:
                                     # the wall clock runs into the recorder's own time (issue 32,
                                     # item 3)
                                     (-90.0, 10), (-30.0, 10), (-200.0, 50)])
def test_wall_clock_steps_neither_inflate_nor_lose_time(tmp_path: Path, step: float,
                                                        at: int) -> None:
    db = tmp_path / "ledger.db"
    clocks = Clocks()
    config = parse_config("")
    collector = Collector([SteadyBackend(GPUS)], config, interval_seconds=2.0, clock=clocks.wall,
                          monotonic=clocks.monotonic)
    recorder = LedgerRecorder(db, config)
    collector.subscribe(recorder.on_snapshot)
    try:
        for cycle in range(181):  # 360 s of monotonic time, sampled every 2 s
            if cycle == at:
                clocks.offset += step  # NTP steps the wall clock (or a VM resumes)
            if cycle == 120 and step > 0:
                clocks.offset -= step  # and back again
            collector.collect_once()
            clocks.steady += 2.0
    finally:
        collector.close()
        recorder.close()
    assert recorder.unwritten == 0 and recorder.last_error is None
    assert recorder.refused_intervals == 0
    row = export_first_hour(tmp_path, db, since="2026-03-01T23:00:00Z")
    seconds = 2 * 360.0  # two devices
    assert row["observed_device_hours"] == pytest.approx(seconds / 3600, abs=1e-6)
    assert row["allocated_device_hours"] == pytest.approx(seconds / 3600, abs=1e-6)
    assert row["used_device_hours"] == pytest.approx(seconds / 2 / 3600, abs=1e-6)
    assert row["energy_kwh"] == pytest.approx(WATTS * seconds / 3.6e6, abs=1e-6)
    assert rows(db, "SELECT MAX(observed_ms) FROM intervals")[0][0] <= 60_000


def test_snapshots_without_a_monotonic_time_still_use_the_wall_clock(tmp_path: Path) -> None:
    """Snapshots parsed from JSON (another host's) carry no monotonic time."""
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, parse_config(""))
    for t in range(0, 121, 10):
        rec.on_snapshot(snap(T0 + t, device("GPU-a", power=100.0)))
    rec.close()
    assert rows(db, "SELECT SUM(observed_ms), SUM(energy_mj) FROM intervals") == [
        (120_000, 100 * 120 * 1000)]


# -- issue 19 item 5: forward steps, corrections, and recorder restarts -------------------------

def _run(db: Path, clocks: Clocks, seconds: int, steps: dict[int, float] | None = None,
         config_text: str = "") -> LedgerRecorder:
    """One recorder life sampling every 2 s for ``seconds``; ``steps``: second -> wall step."""
    config = parse_config(config_text)
    collector = Collector([SteadyBackend(GPUS)], config, interval_seconds=2.0, clock=clocks.wall,
                          monotonic=clocks.monotonic)
    recorder = LedgerRecorder(db, config)
    collector.subscribe(recorder.on_snapshot)
    try:
        for t in range(0, seconds + 1, 2):
            clocks.offset += (steps or {}).get(t, 0.0)
            collector.collect_once()
            clocks.steady += 2.0
    finally:
        collector.close()
        recorder.close()
    clocks.steady -= 2.0  # the last sample's time
    assert recorder.unwritten == 0 and recorder.last_error is None
    return recorder


def _observed(db: Path) -> dict[str, int]:
    return dict(rows(db, "SELECT d.device_id, SUM(i.observed_ms) FROM intervals i "
                         "JOIN devices d ON d.dev = i.dev GROUP BY d.device_id"))


def test_a_forward_step_set_right_again_puts_no_minute_in_the_future(tmp_path: Path) -> None:
    """+2 days for 10 s, then corrected: placement stays on the real time line (no minute two
    days ahead, then or 70 s later), the raw minutes are neither rolled up early nor pruned."""
    db = tmp_path / "ledger.db"
    clocks = Clocks()
    end_wall = clocks.wall() + 300
    rec = _run(db, clocks, 300, {120: 2 * 86400.0, 130: -2 * 86400.0})
    assert abs(clocks.wall() - end_wall) < 1e-6
    assert rec.refused_intervals == 0
    (latest,) = rows(db, "SELECT MAX(start) FROM intervals")[0]
    assert latest <= end_wall, "a minute was placed in the future"
    starts = [s for (s,) in rows(db, "SELECT DISTINCT start FROM intervals ORDER BY start")]
    assert starts == [T0 + 60 * m for m in range(6)], "raw minutes were pruned or misplaced"
    assert _observed(db) == {"GPU-0": 300_000, "GPU-1": 300_000}
    assert rows(db, "SELECT COUNT(*) FROM quarters") == [(0,)], "rolled up by a future clock"


def test_a_short_forward_step_then_a_restart_loses_nothing(tmp_path: Path) -> None:
    """+3 min for 5 s in the first life; the second life starts on the correct clock: every
    second of both lives is kept (none refused as overlapping the first life's minutes)."""
    db = tmp_path / "ledger.db"
    clocks = Clocks()
    first = _run(db, clocks, 120, {60: 180.0, 66: -180.0})
    clocks.steady += 10.0  # the restart
    second = _run(db, clocks, 130)
    assert first.refused_intervals == 0 and second.refused_intervals == 0
    assert _observed(db) == {"GPU-0": 250_000, "GPU-1": 250_000}
    (latest,) = rows(db, "SELECT MAX(start) FROM intervals")[0]
    assert latest <= clocks.wall()


def test_a_lasting_forward_step_is_followed_and_prunes_no_real_minute(tmp_path: Path) -> None:
    """A VM resumed three days later (or a wrong clock that stays): placement follows it after
    FORWARD_CONFIRM_SECONDS; rows before the step are still there (retention is 2 days)."""
    from allsmi.accounting.placement import FORWARD_CONFIRM_SECONDS

    db = tmp_path / "ledger.db"
    clocks = Clocks()
    rec = _run(db, clocks, 400, {120: 3 * 86400.0}, "[ledger]\nretention_days = 2\n")
    assert rec.refused_intervals == 0
    assert _observed(db) == {"GPU-0": 400_000, "GPU-1": 400_000}
    starts = [s for (s,) in rows(db, "SELECT DISTINCT start FROM intervals ORDER BY start")]
    assert starts[0] == T0, "minutes before the step were pruned by the clock in the future"
    assert starts[-1] >= T0 + 3 * 86400, "the lasting step was never followed"
    before = [s for s in starts if s < T0 + 86400]
    assert before[-1] >= T0 + 120 + FORWARD_CONFIRM_SECONDS - 60


def test_time_refused_as_already_recorded_is_counted_and_published(tmp_path: Path) -> None:
    """A second life whose wall clock is 90 s behind what the first recorded: the minutes that
    collide are refused, counted, logged and published, never silently."""
    from allsmi.exporter.exposition import Exposition
    from allsmi.exporter.builder import exporter_families

    db = tmp_path / "ledger.db"
    clocks = Clocks()
    _run(db, clocks, 180)
    clocks.offset -= 90.0
    second = _run(db, clocks, 60)
    assert second.refused_intervals >= 2
    health = Exposition(ledger=second).health()
    assert health.ledger_refused == second.refused_intervals
    (family,) = [f for f in exporter_families(health)
                 if f.name == "allsmi_ledger_refused_intervals"]
    assert family.samples[0].value == float(second.refused_intervals)

"""Durations on the monotonic clock (issue 9, item 7).

A collector whose wall clock steps 25 s forward, and later 25 s back, while its monotonic clock
runs evenly: the ledger (a real SQLite file, read by ``allsmi export``) books exactly the time and
energy that passed, neither the inflated 145 s for 120 s nor a lost minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from allsmi.accounting.recorder import LedgerRecorder
from allsmi.backend_api import Backend, ProbeResult
from allsmi.collector import Collector
from allsmi.config import parse_config
from allsmi.schema import DeviceSample, ProcessSample

from .helpers import T0, device, rows, snap

WATTS = 300.0


class _Steady(Backend):
    name = "steady"
    vendor = "nvidia"

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> list[DeviceSample]:
        return [DeviceSample(id=f"GPU-{i}", vendor="nvidia", kind="gpu", backend=self.name, index=i,
                             name="Steady GPU", health="ok", utilization_percent=50.0,
                             power_watts=WATTS, processes=(ProcessSample(pid=1, user="ann"),))
                for i in range(2)]


class _Clocks:
    """A wall clock the test steps, and a monotonic clock that never steps."""

    def __init__(self) -> None:
        self.steady = 1000.0
        self.offset = T0 + 5 - self.steady

    def wall(self) -> float:
        return self.steady + self.offset

    def monotonic(self) -> float:
        return self.steady


def _export(tmp_path: Path, db: Path) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_CONFIG": ""}
    out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--ledger", str(db),
                          "--since", "2026-03-02T00:00:00Z", "--until", "2026-03-02T01:00:00Z",
                          "--format", "json", "--group-by", "resource_group"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 3), out.stderr
    return json.loads(out.stdout)["rows"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("step", [25.0, -25.0, -90.0])
def test_wall_clock_steps_neither_inflate_nor_lose_time(tmp_path: Path, step: float) -> None:
    db = tmp_path / "ledger.db"
    clocks = _Clocks()
    config = parse_config("")
    collector = Collector([_Steady()], config, interval_seconds=2.0, clock=clocks.wall,
                          monotonic=clocks.monotonic)
    recorder = LedgerRecorder(db, config)
    collector.subscribe(recorder.on_snapshot)
    try:
        for cycle in range(181):  # 360 s of monotonic time, sampled every 2 s
            if cycle == 60:
                clocks.offset += step  # NTP steps the wall clock (or a VM resumes)
            if cycle == 120 and step > 0:
                clocks.offset -= step  # and back again
            collector.collect_once()
            clocks.steady += 2.0
    finally:
        collector.close()
        recorder.close()
    assert recorder.unwritten == 0 and recorder.last_error is None
    row = _export(tmp_path, db)
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

"""The usage integrator shared by the exporter and the ledger, and "unknown allocation" end to end."""

from __future__ import annotations

import csv
import datetime as dt
import io
from dataclasses import replace
from pathlib import Path

import pytest

from allsmi.schema import DeviceSample, HostSample, ProcessSample, Snapshot
from allsmi.usage import UsageIntegrator

T0 = 1_790_000_000.0
PROC = (ProcessSample(7, "alice", "train.py", 1 << 30),)


def dev(**values: object) -> DeviceSample:
    base = DeviceSample(id="GPU-a", vendor="nvidia", kind="gpu", backend="nvidia", name="H100",
                        resource_group="train", health="ok")
    return replace(base, **values)  # type: ignore[arg-type]


def snap(t: float, *devices: DeviceSample) -> Snapshot:
    return Snapshot(timestamp=dt.datetime.fromtimestamp(T0 + t, dt.timezone.utc),
                    host=HostSample("node"), devices=devices)


def test_trapezoids_gaps_resets_and_unknowns() -> None:
    integ = UsageIntegrator(max_gap_seconds=30)
    assert integ.update(snap(0, dev(power_watts=100.0, utilization_percent=0.0, processes=()))) == []
    [a] = integ.update(snap(10, dev(power_watts=300.0, utilization_percent=100.0, processes=PROC)))
    assert (a.observed_seconds, a.energy_joules, a.busy_seconds, a.allocated_seconds) == (10, 2000, 5, 5)
    assert integ.update(snap(100, dev(power_watts=300.0, processes=PROC))) == []  # 90 s gap: not bridged
    [b] = integ.update(snap(110, dev(power_watts=300.0, processes=PROC)))
    assert b.busy_seconds is None and b.energy_joules == 3000 and b.allocated_seconds == 10
    # the hardware counter wins over integrated power, and a reset falls back to the integral
    integ.update(snap(120, dev(power_watts=300.0, energy_joules=5000.0)))
    [c] = integ.update(snap(130, dev(power_watts=300.0, energy_joules=8100.0)))
    assert c.energy_joules == 3100
    [d] = integ.update(snap(140, dev(power_watts=300.0, energy_joules=50.0)))
    assert d.energy_joules == 3000
    # a lost device breaks the chain
    integ.update(snap(150, dev(health="lost")))
    assert integ.update(snap(160, dev(power_watts=300.0))) == []


def test_unknown_process_list_gives_unknown_allocation() -> None:
    integ = UsageIntegrator()
    integ.update(snap(0, dev(power_watts=100.0, processes=None)))
    [inc] = integ.update(snap(10, dev(power_watts=100.0, processes=None)))
    assert inc.allocated_seconds is None and inc.observed_seconds == 10
    first, second = inc.split(T0 + 4)
    assert first.allocated_seconds is None and first.energy_joules == pytest.approx(400)
    assert second.observed_seconds == pytest.approx(6)


def test_exporter_omits_allocated_for_unknown_process_lists() -> None:
    from allsmi.exporter.counters import UsageCounters
    counters = UsageCounters(max_gap_seconds=30)
    for t in (0, 10, 20):
        counters.update(snap(t, dev(power_watts=100.0, processes=None),
                             dev(id="GPU-b", power_watts=100.0, processes=PROC)))
    totals = counters.devices()
    assert totals["GPU-a"].allocated_seconds is None
    assert totals["GPU-b"].allocated_seconds == pytest.approx(20)
    assert totals["GPU-a"].observed_seconds == pytest.approx(20)


def test_export_leaves_unknown_allocation_and_its_cost_empty(tmp_path: Path) -> None:
    from allsmi.accounting.formats import to_csv
    from allsmi.accounting.ledger.source import ledger_parts
    from allsmi.accounting.periods import Window
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.accounting.report import build_report
    from allsmi.config import parse_config

    cfg = parse_config('[groups.train]\nprice_per_device_hour = 2.0\ncurrency = "USD"\n'
                       '[groups.open]\nprice_per_kwh = 0.5\ncurrency = "USD"\n')
    rec = LedgerRecorder(tmp_path / "ledger.db", cfg)
    start = 1_790_000_040.0  # a minute boundary
    for i in range(0, 181, 10):
        t = start - T0 + i
        rec.on_snapshot(snap(t, dev(power_watts=100.0, processes=None),
                             dev(id="GPU-b", resource_group="open", power_watts=100.0, processes=PROC)))
    rec.close()
    window = Window(dt.datetime.fromtimestamp(start, dt.timezone.utc),
                    dt.datetime.fromtimestamp(start + 180, dt.timezone.utc))
    parts, _ = ledger_parts(tmp_path / "ledger.db", window)
    rows = {r["resource_group"]: r for r in csv.DictReader(io.StringIO(
        to_csv(build_report(parts, window, ("resource_group",), cfg))))}
    assert rows["train"]["allocated_device_hours"] == ""   # unknown, not 0
    assert rows["train"]["cost"] == ""                     # priced per allocated hour: unknown
    assert float(rows["train"]["observed_device_hours"]) == pytest.approx(180 / 3600)
    assert float(rows["open"]["allocated_device_hours"]) == pytest.approx(180 / 3600)
    assert float(rows["open"]["cost"]) == pytest.approx(100 * 180 / 3.6e6 * 0.5)

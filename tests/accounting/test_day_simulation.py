"""Done-when: a simulated day, accelerated, bills within 1 % of the simulation's own integrals.

The mixed node is sampled every 15 s of a synthetic clock for 24 h and fed to
the recorder; the CSV export's per-group energy and device-hours are compared
with reference integrals computed independently: the lifetime energy counter
difference for NVIDIA and AMD boards, and a 7.5 s trapezoid of the sampled power
(and of utilization and "has a process") for everything else.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path

import pytest

from allsmi.accounting.formats import to_csv
from allsmi.accounting.ledger.source import ledger_parts
from allsmi.accounting.recorder import LedgerRecorder
from allsmi.accounting.report import build_report
from allsmi.backends.simulated import simulated_backends
from allsmi.collection.groups import assign_groups

from .helpers import T0, config, snap, window

FINE = 7.5
STEP = 2  # the recorder sees every second fine sample: 15 s
DAY = 86400
# No checkpoints (the minute in progress written every 5 s, in parts): they store exactly
# what whole intervals do (test_recorder_fastpath.py::test_checkpoints_store_exactly_what_
# whole_intervals_do), and here they were two fifths of the test's CPU.
CONFIG = """
[ledger]
checkpoint_seconds = 0
[node]
resource_group = "research"
[[rules]]
vendor = "nvidia"
resource_group = "training"
[[rules]]
vendor = "amd"
resource_group = "training"
[[rules]]
vendor = "intel"
resource_group = "inference"
[groups.training]
labels = { team = "ml" }
price_per_device_hour = 3.0
price_per_kwh = 0.25
currency = "USD"
"""


@pytest.mark.long(30)
def test_simulated_day_matches_reference_integrals(tmp_path: Path) -> None:
    cfg = config(CONFIG)
    now = [T0]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for b in backends:
        # What a bill reads, as `export --simulate` samples it (the same values, field for
        # field, as a full sample: tests/test_replay_cycle.py): the reference's 11,521 samples
        # of every device were two thirds of this test's CPU. Each cycle's samples are read
        # once (into the reference's numbers and the recorder's sums), as the replay's are.
        b.bill_only = True
        b.reuse_samples = True
        b.open()
    recorder = LedgerRecorder(tmp_path / "ledger.db", cfg)

    ref: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    prev: dict[str, tuple[float | None, float | None, bool]] = {}
    counters_start: dict[str, float] = {}
    counters_end: dict[str, float] = {}
    group_of: dict[str, str] = {}
    # The reference assigns groups itself (by vendor, as the rules say; MIG instances follow
    # their board), so the recorder's path through assign_groups is checked too.
    vendor_group = {"nvidia": "training", "amd": "training", "intel": "inference"}
    steps = int(DAY / FINE)
    for i in range(steps + 1):
        now[0] = T0 + i * FINE
        devices = [d for b in backends for d in b.sample()]
        for dev in devices:
            group = vendor_group.get(dev.vendor, "research")
            group_of[dev.id] = group
            cur = (dev.power_watts, dev.utilization_percent, bool(dev.processes))
            if dev.energy_joules is not None:
                counters_start.setdefault(dev.id, dev.energy_joules)
                counters_end[dev.id] = dev.energy_joules
            p = prev.get(dev.id)
            prev[dev.id] = cur
            if p is None:
                continue
            g = ref[group]
            g["observed"] += FINE
            g["allocated"] += (p[2] + cur[2]) / 2 * FINE
            if p[1] is not None and cur[1] is not None:
                g["busy"] += (p[1] + cur[1]) / 200 * FINE
            if dev.energy_joules is None and p[0] is not None and cur[0] is not None:
                g["energy"] += (p[0] + cur[0]) / 2 * FINE
        if i % STEP == 0:
            recorder.on_snapshot(snap(now[0], *assign_groups(devices, "node1", cfg)))
    recorder.close()
    for dev_id, start in counters_start.items():
        ref[group_of[dev_id]]["energy"] += counters_end[dev_id] - start

    w = window(T0, T0 + DAY)
    parts, _ = ledger_parts(tmp_path / "ledger.db", w)
    text = to_csv(build_report(parts, w, ("resource_group",), cfg))
    rows = {r["resource_group"]: r for r in csv.DictReader(io.StringIO(text))}
    assert set(rows) == {"training", "inference", "research"}
    assert rows["training"]["label_team"] == "ml"
    assert int(rows["training"]["device_count"]) == 8 + 3 + 8  # H100 boards, MIG instances, MI300X
    for group, r in rows.items():
        expect = ref[group]
        print(group, {k: f"{float(r[c]) / (expect[k] / d) - 1:+.4%}" for k, c, d in (
            ("observed", "observed_device_hours", 3600), ("allocated", "allocated_device_hours", 3600),
            ("busy", "used_device_hours", 3600), ("energy", "energy_kwh", 3.6e6))})
        assert float(r["observed_device_hours"]) == pytest.approx(expect["observed"] / 3600, rel=0.01)
        assert float(r["allocated_device_hours"]) == pytest.approx(expect["allocated"] / 3600, rel=0.01)
        assert float(r["used_device_hours"]) == pytest.approx(expect["busy"] / 3600, rel=0.01)
        assert float(r["energy_kwh"]) == pytest.approx(expect["energy"] / 3.6e6, rel=0.01)
        assert float(r["coverage_ratio"]) > 0.999
        assert expect["allocated"] > 0.3 * expect["observed"]  # the day had real work in it
    train = rows["training"]
    assert float(train["cost"]) == pytest.approx(
        float(train["billed_device_hours"]) * 3.0 + float(train["energy_kwh"]) * 0.25, abs=1e-5)
    # The MIG slices are billed at their share of their GPU: less than allocated, never more
    # than the boards' time.
    assert float(train["billed_device_hours"]) < float(train["allocated_device_hours"])
    assert float(train["billed_device_hours"]) <= 16 * 24  # 8 H100 and 8 MI300X boards

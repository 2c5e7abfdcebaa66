"""Accumulated counters: integrals, resets, gaps, unknowns, monotonicity."""

from __future__ import annotations

import pytest

from allsmi.exporter.counters import UsageCounters
from allsmi.exporter.exposition import Exposition
from allsmi.schema import BackendStatus, ProcessSample

from .support import T0, device, snapshot, values

PROC = (ProcessSample(1, "alice", "train", 1),)


def feed(counters: UsageCounters, *snaps) -> None:
    for snap in snaps:
        counters.update(snap)


def test_power_is_integrated_with_the_trapezoid_rule() -> None:
    c = UsageCounters(max_gap_seconds=30)
    feed(c, snapshot([device(power_watts=100.0, utilization_percent=0.0, processes=())]),
         snapshot([device(power_watts=300.0, utilization_percent=100.0, processes=PROC)], T0 + 10),
         snapshot([device(power_watts=300.0, utilization_percent=50.0, processes=PROC)], T0 + 20))
    t = c.devices()["GPU-a"]
    assert t.energy_joules == pytest.approx((100 + 300) / 2 * 10 + 300 * 10)
    assert t.busy_seconds == pytest.approx(0.5 * 10 + 0.75 * 10)
    assert t.allocated_seconds == pytest.approx(5 + 10)
    assert t.observed_seconds == pytest.approx(20)
    assert t.created == T0


def test_hardware_counter_is_preferred_and_resets_never_decrease() -> None:
    c = UsageCounters(max_gap_seconds=30)
    readings = [(0, 1000.0), (10, 4000.0), (20, 7000.0), (30, 500.0), (40, 3500.0)]
    seen = []
    for t, energy in readings:
        c.update(snapshot([device(energy_joules=energy, power_watts=300.0)], T0 + t))
        seen.append(c.devices()["GPU-a"].energy_joules)
    assert seen == sorted(seen), "the counter decreased"
    # deltas 3000, 3000, then a reset (power integral 3000 covers it), then 3000
    assert seen[-1] == pytest.approx(12000.0)


def test_reset_without_power_counts_energy_since_reset() -> None:
    c = UsageCounters(max_gap_seconds=30)
    feed(c, snapshot([device(energy_joules=5000.0, power_watts=None)]),
         snapshot([device(energy_joules=120.0, power_watts=None)], T0 + 10))
    assert c.devices()["GPU-a"].energy_joules == pytest.approx(120.0)


def test_gap_longer_than_limit_is_not_bridged() -> None:
    c = UsageCounters(max_gap_seconds=30)
    feed(c, snapshot([device(power_watts=200.0)]),
         snapshot([device(power_watts=200.0)], T0 + 10),
         snapshot([device(power_watts=200.0)], T0 + 100),  # 90 s gap: not counted
         snapshot([device(power_watts=200.0)], T0 + 105))
    t = c.devices()["GPU-a"]
    assert t.observed_seconds == pytest.approx(15)
    assert t.energy_joules == pytest.approx(200 * 15)


def test_lost_device_breaks_the_chain_and_keeps_its_totals() -> None:
    c = UsageCounters(max_gap_seconds=30)
    lost = device(health="lost", power_watts=None, utilization_percent=None, processes=())
    feed(c, snapshot([device(power_watts=100.0)]), snapshot([device(power_watts=100.0)], T0 + 5),
         snapshot([lost], T0 + 10), snapshot([device(power_watts=100.0)], T0 + 15),
         snapshot([device(power_watts=100.0)], T0 + 20))
    t = c.devices()["GPU-a"]
    assert t.observed_seconds == pytest.approx(10)  # 0..5 and 15..20; 5..15 not bridged
    assert t.energy_joules == pytest.approx(1000)


def test_unknown_quantities_are_none() -> None:
    c = UsageCounters(max_gap_seconds=30)
    bare = device(power_watts=None, energy_joules=None, utilization_percent=None)
    feed(c, snapshot([bare]), snapshot([bare], T0 + 5))
    t = c.devices()["GPU-a"]
    assert t.energy_joules is None and t.busy_seconds is None
    assert t.observed_seconds == pytest.approx(5) and t.allocated_seconds == pytest.approx(5)


def test_first_seen_lost_has_no_counters() -> None:
    c = UsageCounters()
    c.update(snapshot([device(health="lost", power_watts=None)]))
    t = c.devices()["GPU-a"]
    assert (t.energy_joules, t.busy_seconds, t.allocated_seconds, t.observed_seconds) == \
        (None, None, None, None)


def test_device_missing_from_a_few_snapshots_resumes_without_reset() -> None:
    c = UsageCounters(max_gap_seconds=30)
    feed(c, snapshot([device(power_watts=100.0)]), snapshot([device(power_watts=100.0)], T0 + 5))
    before = c.devices()["GPU-a"]
    c.update(snapshot([], T0 + 10))  # its backend failed this cycle
    assert c.devices()["GPU-a"] == before
    feed(c, snapshot([device(power_watts=100.0)], T0 + 15),
         snapshot([device(power_watts=100.0)], T0 + 20))
    after = c.devices()["GPU-a"]
    assert after.created == before.created
    assert after.energy_joules == pytest.approx(before.energy_joules + 500)


def test_long_absent_devices_are_forgotten() -> None:
    c = UsageCounters(max_gap_seconds=30, forget_after_seconds=60)
    feed(c, snapshot([device()]), snapshot([device("GPU-b")], T0 + 61))
    assert set(c.devices()) == {"GPU-b"}


def test_exported_counters_never_decrease_over_a_simulated_hour() -> None:
    exposition = Exposition(max_gap_seconds=30)
    previous: dict[str, float] = {}
    for step in range(120):
        t = T0 + 30 * step
        energy = 10_000.0 + 9_000.0 * step if step < 60 else 50.0 + 9_000.0 * (step - 60)
        dev = device(energy_joules=energy, power_watts=300.0 + step,
                     utilization_percent=float(step % 100), processes=PROC if step % 3 else ())
        exposition.on_snapshot(snapshot([dev], t))
        text = exposition.current.body(openmetrics=False, gzipped=False).decode()
        for name in ("allsmi_device_energy_joules_total", "allsmi_device_busy_seconds_total",
                     "allsmi_device_allocated_seconds_total", "allsmi_device_observed_seconds_total"):
            value = values(text, name)["GPU-a"]
            assert value >= previous.get(name, 0.0), (name, step)
            previous[name] = value
    assert previous["allsmi_device_observed_seconds_total"] == pytest.approx(30 * 119)


def test_backend_errors_count_failed_cycles() -> None:
    c = UsageCounters()
    for status in ("ok", "error", "timeout", "ok", "error"):
        c.update(snapshot([], backends=[BackendStatus("x", status)]))
    assert c.backends()["x"].errors == 3
    assert c.backends_present() == {"x"}


def test_claim_conflicts_count_cycles_once_the_holders_are_known() -> None:
    """``allsmi_device_claim_conflicts_total``: unknown (absent) while no attribution source
    knows a device's holders, 0 once one does, +1 in each cycle its claims conflict; ignored
    job-file shares add up per source (``allsmi_attribution_bad_shares_total``)."""
    from dataclasses import replace

    from allsmi.schema import Workload

    pod, job = Workload("kubernetes", namespace="ml", pod="p"), Workload("hpc-job", job_id="7")
    c = UsageCounters()
    c.update(snapshot([device()]))
    assert c.devices()["GPU-a"].claim_conflicts is None
    assert c.bad_shares() == {}
    c.update(replace(snapshot([device(workloads=())], T0 + 1),
                     attribution_bad_shares=(("hpc-job", "not_a_share", 0),)))
    assert c.devices()["GPU-a"].claim_conflicts == 0.0
    for t in (2, 3):
        c.update(replace(snapshot([device(workloads=(pod, job))], T0 + t),
                         claim_conflicts=frozenset({"GPU-a"}),
                         attribution_bad_shares=(("hpc-job", "not_a_share", 2),
                                                 ("hpc-job", "above_device", 1))))
    c.update(snapshot([device(workloads=(job,))], T0 + 4))
    assert c.devices()["GPU-a"].claim_conflicts == 2.0
    ignored = c.bad_shares()
    assert ignored[("hpc-job", "not_a_share")].errors == 4
    assert ignored[("hpc-job", "not_a_share")].created == T0 + 1
    assert ignored[("hpc-job", "above_device")].errors == 2

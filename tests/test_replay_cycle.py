"""What a simulated bill's replay leaves out of each cycle, counted (not timed), each checked
against what the full work gives: the cyclic garbage collector and the live collector's
history (while a chunk replays), the waiting step's evidence (a ledger books reasons), the
host evidence of computing holders (never read), and the simulated backend's per-cycle
look-ups of what never changes about a unit (a bill-only sample is a full one less the fields
no bill reads)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc

import pytest

import allsmi.backends.simulated as simulated
import allsmi.collection.waiting
from allsmi.attribution import build_attributor
from allsmi.backends.simulated import UNBILLED, simulated_backends
from allsmi.collection.collector import Collector
from allsmi.config import parse_config
from allsmi.collection.registry import declarations

T0 = 1_790_000_000.0
CYCLES = 40


def replaying_collector(kind: type, now: list[float], **options: object) -> Collector:
    """A ``kind`` collector (``Collector`` or the replay's) over the mixed node's simulated
    backends and sources at the time in ``now[0]``, as a replay builds it: inline, one snapshot
    kept, the samples billed only and reused."""
    config = parse_config("")
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for backend in backends:
        backend.bill_only = backend.reuse_samples = True
    return kind(backends, config, clock=lambda: now[0], inline=True, history_size=1,
                attributor=build_attributor(config, simulate=True, declarations=declarations(),
                                            inline=True), **options)


def _window(hours: float):  # type: ignore[no-untyped-def]
    from allsmi.accounting.periods import Window
    start = T0 - T0 % 3600
    return Window(dt.datetime.fromtimestamp(start, dt.timezone.utc),
                  dt.datetime.fromtimestamp(start + hours * 3600, dt.timezone.utc))


def test_a_chunk_replays_without_cyclic_collection_and_keeps_one_snapshot(tmp_path,
                                                                         monkeypatch) -> None:
    """While a chunk replays, the cyclic garbage collector is off (it traversed the intervals
    the chunk keeps, again and again) and the collector keeps the last snapshot only; both
    are as before once the chunk is done."""
    from allsmi.backends.simulated.scenario import load_scenario
    from allsmi.cli.simulate.bill import simulated_ledger
    seen: list[tuple[bool, int]] = []
    collect = Collector.collect_once

    def counting(self):  # type: ignore[no-untyped-def]
        snapshot = collect(self)
        seen.append((gc.isenabled(), len(self.history)))
        return snapshot
    monkeypatch.setattr(Collector, "collect_once", counting)
    assert gc.isenabled()
    simulated_ledger(load_scenario("mixed"), _window(1), parse_config(""), str(tmp_path),
                     workers=1)
    assert len(seen) > 50
    assert not any(enabled for enabled, _ in seen)
    assert {kept for _, kept in seen} == {1}
    assert gc.isenabled()


def _collector(now: list[float], **waiting: object) -> Collector:
    """The replay's collector over the mixed node (bill-only backends), its waiting step's
    attributes set to ``waiting``."""
    config = parse_config("")
    attributor = build_attributor(config, simulate=True, declarations=declarations(), inline=True)
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for backend in backends:
        backend.bill_only = True
    collector = Collector(backends, config, clock=lambda: now[0], attributor=attributor,
                          inline=True)
    for name, value in waiting.items():
        setattr(collector.waiting, name, value)
    return collector


def _reasons(collector: Collector, now: list[float]) -> list[list[object]]:
    """Each cycle's (device, holder, reason, evidence) of every waiting entry."""
    out = []
    try:
        for _ in range(CYCLES):
            snapshot = collector.collect_once()
            out.append([(d.id, w.user, w.pod, w.job_id, w.reason, w.evidence)
                        for d in snapshot.devices for w in d.waiting or ()])
            now[0] += 60.0
    finally:
        collector.close()
    return out


def test_an_unexplained_classification_has_the_same_reasons_and_reuses_its_entries(
        monkeypatch) -> None:
    """Without ``explain`` (a replay), each holder's reason is the explained one and its
    evidence is empty, and a computing holder's entry is made once, not every cycle."""
    made = []
    entry = allsmi.collection.waiting.HolderWaiting
    monkeypatch.setattr(allsmi.collection.waiting, "HolderWaiting",
                        lambda *a, **k: made.append(a) or entry(*a, **k))
    now = [T0]
    explained = _reasons(_collector(now), now)
    made_explained = len(made)
    made.clear()
    now = [T0]
    bare = _reasons(_collector(now, explain=False), now)
    assert [[r[:5] for r in cycle] for cycle in bare] == \
        [[r[:5] for r in cycle] for cycle in explained]
    reasons = {r[4] for cycle in bare for r in cycle}
    assert "computing" in reasons and len(reasons) > 1  # (stalls too)
    assert {r[5] for cycle in bare for r in cycle} == {""}
    held = sum(len(cycle) for cycle in bare)
    distinct = len({r[1:5] for cycle in bare for r in cycle})
    assert len(made) == distinct < held / 4
    assert made_explained > 5 * len(made)  # explained: most computing entries are new


def test_the_simulated_host_evidence_is_made_only_for_holders_not_computing(monkeypatch) -> None:
    """The simulation's host evidence is made for the processes the classification may read
    (devices below the idle threshold, processes at 0 %), not for every holder's; the
    classification is what evidence for all of them gives."""
    calls = []
    made = simulated.process_evidence
    monkeypatch.setattr(simulated, "process_evidence",
                        lambda *a: calls.append(a) or made(*a))
    now = [T0]
    full = _reasons(_collector(now, detail=True), now)  # every holder's process asked
    every = len(calls)
    calls.clear()
    now = [T0]
    asked = _reasons(_collector(now), now)
    assert asked == full
    assert every > CYCLES * 10
    assert 0 < len(calls) < every / 2


@pytest.mark.parametrize("faults", [False, True])
def test_a_bill_only_sample_is_the_full_sample_less_the_unbilled_fields(faults) -> None:
    """The bill-only path of the simulated backend (what never changes about a unit looked up
    once) gives each device exactly the full sample's fields, but for those of ``UNBILLED``
    (left unknown); a lost unit (the faults scenario) too."""
    from allsmi.backends.simulated.scenario import load_scenario
    from allsmi.schema import DeviceSample
    scenario = load_scenario("mixed-faults" if faults else "mixed")
    now = [T0]
    full = simulated_backends(scenario, clock=lambda: now[0])
    billed = simulated_backends(scenario, clock=lambda: now[0])
    for backend in billed:
        backend.bill_only = True
    kept = [f.name for f in dataclasses.fields(DeviceSample) if f.name not in UNBILLED]
    compared = 0
    for backend in (*full, *billed):
        backend.open()
        backend.close()  # (a hanging backend then fails at once instead)
    for _ in range(CYCLES):
        for a, b in zip(full, billed):
            try:
                expected = a.sample()
            except Exception as exc:  # (a fault window: both fail alike)
                with pytest.raises(type(exc)):
                    b.sample()
                continue
            got = b.sample()
            assert [d.id for d in got] == [d.id for d in expected]
            for x, y in zip(got, expected):
                assert [getattr(x, f) for f in kept] == [getattr(y, f) for f in kept]
                assert all(getattr(x, f) in (None, {}) for f in UNBILLED)
                compared += 1
            pids = set(a._evidence) | set(b._evidence)
            assert a.host_evidence(pids) == b.host_evidence(pids)
        now[0] += 60.0
    assert compared > CYCLES * 30
    assert sum(len(b._plans) for b in billed) <= sum(len(b._units) for b in billed)


def test_the_same_attribution_answers_are_merged_once_whatever_their_statuses() -> None:
    """The simulated pods and jobs answer the same (the very same object) for hours, each cycle
    with a new status (its timing): the answers are merged once, and each cycle's attribution
    is what merging afresh gives, with that cycle's statuses."""
    config = parse_config("")
    now = [T0]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for backend in backends:
        backend.open()
    kept = build_attributor(config, simulate=True, declarations=declarations(), inline=True)
    try:
        for _ in range(15):
            devices = [d for b in backends for d in b.sample()]
            got = kept.resolve(devices, now=now[0])
            with build_attributor(config, simulate=True, declarations=declarations(),
                                  inline=True) as fresh:
                expected = fresh.resolve(devices, now=now[0])
            assert got.workloads == expected.workloads and got.workloads
            assert (got.processes, got.unknown, got.conflicts) == \
                (expected.processes, expected.unknown, expected.conflicts)
            assert [(s.name, s.status, s.message) for s in got.statuses] == \
                [(s.name, s.status, s.message) for s in expected.statuses]
            now[0] += 60.0
        assert kept.merges <= 2  # (a new answer at a job block's or a day's start)
    finally:
        kept.close()


def test_a_device_s_claims_are_made_once_a_cycle_for_the_waiting_step_and_the_split(
        tmp_path, monkeypatch) -> None:
    """The waiting step (its holders) and the recorder (its fair-share split) both read the
    claims on a held device whose processes changed: they are made once, not twice."""
    import allsmi.fairshare as fairshare
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.fairshare import claim_units
    asked: list[tuple[int, str, int]] = []  # (cycle, device, claims made before)
    cycle = [0]
    monkeypatch.setattr(fairshare, "claim_units", lambda dev: asked.append(
        (cycle[0], dev.id, fairshare.claims_made)) or claim_units(dev))
    monkeypatch.setattr(allsmi.collection.waiting, "claim_units", fairshare.claim_units)  # (imported by name)
    now = [T0]
    collector = _collector(now)
    recorder = LedgerRecorder(tmp_path / "ledger.db", parse_config(""))
    collector.subscribe(recorder.on_snapshot)
    before = fairshare.claims_made
    try:
        for cycle[0] in range(CYCLES):
            collector.collect_once()
            now[0] += 60.0
    finally:
        collector.close()
        recorder.close()
    assert recorder.last_error is None
    made = fairshare.claims_made - before
    twice = {(c, d) for c, d, _ in asked if sum(1 for a in asked if a[:2] == (c, d)) > 1}
    assert len(twice) > CYCLES * 5  # the waiting step and the split asked for the same claims
    assert CYCLES * 5 < made <= len({(c, d) for c, d, _ in asked})  # made once each time


def test_core_utilization_is_the_formula_with_each_core_count_phased_once() -> None:
    """The cores' utilization written out for speed gives the formula's very floats (busy,
    idle, at the bounds), and each core count's phases are made once, not every cycle."""
    import math
    import random

    from allsmi.backends.simulated.billed import CORE_PHASES, core_utilization

    def formula(mean_util: float, s: float, cores: int) -> tuple[float, ...]:
        return tuple(round(max(0.0, min(100.0, mean_util + (5.0 * math.sin(
            6.283 * s / 41.0 + 6.283 * i / cores) if mean_util else 0.0))), 2)
            for i in range(cores))
    pick = random.Random(36)
    CORE_PHASES.clear()
    for _ in range(20_000):
        mean = pick.choice([0, 0.0, -0.0, 100.0, pick.uniform(0, 4), pick.uniform(96, 100),
                            pick.uniform(0, 100)])
        s, cores = pick.uniform(0, 3e6), pick.choice([1, 3, 8])
        assert repr(core_utilization(mean, s, cores)) == repr(formula(mean, s, cores))
    assert set(CORE_PHASES) == {1, 3, 8}
    made = CORE_PHASES[8]
    core_utilization(50.0, 1.0, 8)
    assert CORE_PHASES[8] is made


def test_the_model_s_integrals_are_their_formulas_with_constants_made_once() -> None:
    """The load cycle's integral and the power wobble's give their formulas' very floats with
    what does not depend on time made once per cycle (not every sample)."""
    import math
    import random

    from allsmi.backends.simulated.model import TAU, LoadCycle, Wobble
    pick = random.Random(36)
    for k in range(50):
        c = LoadCycle.make(f"unit{k}", pick.uniform(0.2, 0.9), (600.0, 7200.0))
        w = Wobble(pick.uniform(1, 20), pick.uniform(300, 600), pick.uniform(0, TAU))
        for _ in range(200):
            x, s = pick.uniform(0, c.active), pick.uniform(0, 4e6)
            assert repr(c._integral_within(x)) == repr(
                c.base * x
                + c.amp1 * c.per1 / TAU * (math.cos(c.ph1) - math.cos(TAU * x / c.per1 + c.ph1))
                + c.amp2 * c.per2 / TAU * (math.cos(c.ph2) - math.cos(TAU * x / c.per2 + c.ph2)))
            assert repr(w.cumulative(s)) == repr(
                w.amp * w.per / TAU * (math.cos(w.ph) - math.cos(TAU * s / w.per + w.ph)))
        made = c.__dict__["_sines"], w.__dict__["_constants"]
        c.cumulative(1.0), w.cumulative(1.0)
        assert (c.__dict__["_sines"], w.__dict__["_constants"]) == made
        assert c.__dict__["_sines"] is made[0] and w.__dict__["_constants"] is made[1]


def test_a_replay_s_reused_samples_are_fresh_copies_cycle_by_cycle(monkeypatch) -> None:
    """With ``reuse_samples`` (a replay), each cycle's devices, as the collector completes them
    (groups, holders, waiting), are field for field those of fresh copies, cycle after cycle,
    while a unit's sample is copied whole only when its template or its changed fields change,
    not every cycle."""
    import allsmi.backends.simulated.billed as billed
    copied = [0]
    derive = billed.derive
    monkeypatch.setattr(billed, "derive", lambda sample, **changes: copied.__setitem__(
        0, copied[0] + 1) or derive(sample, **changes))

    def cycles(reuse: bool) -> tuple[list[list[tuple[object, ...]]], int]:
        now = [T0]
        collector = _collector(now)
        for runner in collector.runners:
            runner.backend.reuse_samples = reuse
        copied[0], out = 0, []
        try:
            for _ in range(CYCLES):
                out.append([_values(dev) for dev in collector.collect_once().devices])
                now[0] += 60.0
        finally:
            collector.close()
        return out, copied[0]
    fresh, copies = cycles(False)
    reused, reuses = cycles(True)
    assert reused == fresh
    devices = len(fresh[0])
    assert devices > 30 and any(dev[_field_index("waiting")] for dev in fresh[-1])
    assert copies >= CYCLES * devices
    assert reuses < CYCLES * devices / 4



def test_a_reused_sample_gets_back_its_template_s_fields_that_the_collector_sets() -> None:
    """What a collector sets on a sample in place (its group, labels, workloads, processes,
    waiting) is not left on it for the next cycle: the reused samples are still those of a
    backend that copies them afresh."""
    from allsmi.backends.simulated.billed import COLLECTOR_SET
    now = [T0]
    reusing = simulated_backends("mixed", clock=lambda: now[0])
    copying = simulated_backends("mixed", clock=lambda: now[0])
    for backend in reusing + copying:
        backend.bill_only = True
        backend.probe()
        backend.open()
    for backend in reusing:
        backend.reuse_samples = True
    set_by_collector = {"resource_group": "elsewhere", "labels": {"team": "x"}, "workloads": (),
                        "processes": (), "waiting": ()}
    assert set(set_by_collector) == set(COLLECTOR_SET)
    for _ in range(4):
        mine = [dev for backend in reusing for dev in backend.sample()]
        theirs = [dev for backend in copying for dev in backend.sample()]
        assert [_values(dev) for dev in mine] == [_values(dev) for dev in theirs]
        for dev in mine:
            for name, value in set_by_collector.items():
                object.__setattr__(dev, name, value)
        now[0] += 60.0


def test_a_reused_sample_s_unreported_fields_are_left_alone_after_it_is_made(
        monkeypatch) -> None:
    """The fields a real backend never reports are None in a reused sample from its making
    on: the functions filling the samples in again each cycle leave them alone (a Gaudi's
    nine), except those the collector sets too; the samples are still those of fresh copies
    (test_a_replay_s_reused_samples_are_fresh_copies_cycle_by_cycle)."""
    import allsmi.backends.simulated.billed as billed
    from allsmi.backends.simulated.billed import COLLECTOR_SET
    filled: set[str] = set()
    filler = billed.filler
    monkeypatch.setattr(billed, "filler", lambda cls, names, restored=(): filled.update(
        names) or filler(cls, names, restored))
    now = [T0]
    (gaudi,) = [b for b in simulated_backends("mixed", clock=lambda: now[0])
                if b.display_name == "gaudi"]
    gaudi.bill_only = gaudi.reuse_samples = True
    gaudi.probe()
    gaudi.open()
    for _ in range(3):
        assert len(gaudi.sample()) == 8
        now[0] += 60.0
    unreported = set(gaudi.impersonated.unreported_fields)
    assert {"power_watts", "memory_used_bytes"} <= filled
    assert len(unreported - set(COLLECTOR_SET)) >= 9
    assert not (unreported - set(COLLECTOR_SET)) & filled


def _values(dev: object) -> tuple[object, ...]:
    return tuple(getattr(dev, f.name) for f in dataclasses.fields(dev))  # type: ignore[arg-type]


def _field_index(name: str) -> int:
    """The position of the sample field ``name`` among its fields."""
    from allsmi.schema import DeviceSample
    return [f.name for f in dataclasses.fields(DeviceSample)].index(name)


def test_a_replay_s_collector_asks_the_backends_directly_after_their_runners_opened_them(
        monkeypatch) -> None:
    """After its first cycle (the runners probe and open the backends), the replay's collector
    asks each simulated backend for its sample itself, not through its runner: the same
    devices, field for field, as the live collector's cycle by cycle; a backend that raises
    sends its cycle through the runners, which report it as before."""
    from allsmi.collection.backendrunner import BackendRunner
    from allsmi.cli.simulate.collect import ReplayCollector
    calls = [0]
    start_call = BackendRunner.start_call
    monkeypatch.setattr(BackendRunner, "start_call", lambda self: calls.__setitem__(
        0, calls[0] + 1) or start_call(self))

    def cycles(kind: type, **options: object) -> tuple[list[list[tuple[object, ...]]], object]:
        now = [T0]
        collector = replaying_collector(kind, now, **options)
        calls[0], out = 0, []
        for _ in range(CYCLES):
            out.append([_values(dev) for dev in collector.collect_once().devices])
            now[0] += 60.0
        return out, collector
    live, collector = cycles(Collector)
    collector.close()  # type: ignore[attr-defined]
    assert calls[0] == CYCLES * 10  # (ten simulated backends, each through its runner)
    replayed, collector = cycles(ReplayCollector)
    assert calls[0] == 10  # the first cycle's
    assert replayed == live
    try:
        backend = collector.runners[0].backend  # type: ignore[attr-defined]
        monkeypatch.setattr(backend, "sample", lambda: 1 / 0)
        statuses, devices, _ = collector.sampled()  # type: ignore[attr-defined]
        assert statuses[0].status == "error" and "ZeroDivisionError" in statuses[0].message
        assert {status.status for status in statuses[1:]} == {"ok"} and devices
    finally:
        collector.close()  # type: ignore[attr-defined]
    _, collector = cycles(ReplayCollector, direct=False)  # (a scenario with faults)
    collector.close()  # type: ignore[attr-defined]
    assert calls[0] == CYCLES * 10


def test_a_job_s_stall_is_drawn_once_for_its_run(monkeypatch) -> None:
    """What a job stalls on is worked out once for the job, not at every sample of it: the
    same answers as working it out each time."""
    from allsmi.backends.simulated import activity
    from allsmi.backends.simulated.model import unit_hash
    drawn: list[tuple[object, ...]] = []
    monkeypatch.setattr(activity, "_hash", lambda *parts: drawn.append(parts) or unit_hash(*parts))
    activity.stall_kind.cache_clear()
    try:
        jobs = range(40)
        kinds = [[activity.stalled("nvidia", "nvidia:3", job, r) for r in range(0, 1800, 60)]
                 for job in jobs]
        assert len(drawn) == len(jobs)
        fresh = [activity.stall_kind.__wrapped__("nvidia", "nvidia:3", job) for job in jobs]
        assert len(drawn) == 2 * len(jobs)
    finally:
        activity.stall_kind.cache_clear()
    assert {kind for kind in fresh} > {None}
    assert kinds == [[kind if kind is not None and activity.in_window(r, activity.STALL_PERIOD,
                                                                      activity.STALL_SECONDS)
                      else None for r in range(0, 1800, 60)] for kind in fresh]

"""What a replayed cycle carries from the cycle before instead of making again, counted (not
timed), each checked against what making it again gives: the devices the replay's collector
completed the cycle before (their group and labels), the sample a unit had before its last
switch between idle and busy, a job's draws and its processes' other parts, and the waiting
step's classification of a device that nobody holds."""

from __future__ import annotations

import dataclasses

import allsmi.cli.simulate.collect as replay
import allsmi.backends.simulated.billed as billed
from allsmi.attribution import build_attributor
from allsmi.backends.simulated import installed_backend, simulated_backends
from allsmi.backends.simulated.activity import device_activity, job_draws, stall_kind
from allsmi.backends.simulated.jobs import JobDraws
from allsmi.backends.simulated.model import unit_hash
from allsmi.backends.simulated.scenario import load_scenario
from allsmi.cli.simulate.collect import ReplayCollector
from allsmi.collection.collector import Collector
from allsmi.config import parse_config
from allsmi.collection.registry import declarations
from allsmi.schema import DeviceSample

T0 = 1_790_000_000.0
CYCLES = 40


def _values(dev: object) -> tuple[object, ...]:
    return tuple(getattr(dev, f.name) for f in dataclasses.fields(dev))  # type: ignore[arg-type]


def _cycles(kind: type, cycles: int = CYCLES) -> tuple[list[list[tuple[object, ...]]], object]:
    """Each cycle's devices (their fields) of a ``kind`` collector over the mixed node's
    bill-only, reused samples, as a replay builds it."""
    now = [T0]
    config = parse_config("")
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for backend in backends:
        backend.bill_only = backend.reuse_samples = True
    collector = kind(backends, config, clock=lambda: now[0], inline=True, history_size=1,
                     attributor=build_attributor(config, simulate=True,
                                                 declarations=declarations(), inline=True))
    out = []
    try:
        for _ in range(cycles):
            out.append([_values(dev) for dev in collector.collect_once().devices])
            now[0] += 60.0
    finally:
        collector.close()
    return out, collector


def test_the_replay_s_collector_completes_only_the_devices_it_cannot_carry(monkeypatch) -> None:
    """The replay's collector leaves a device that its backend handed back as the very object
    of the last cycle as it completed it then (group, labels: the backends leave them,
    ``grouped_in_place``), and gives it its workloads back; the devices are field for field
    the live collector's, cycle by cycle, and only the devices the backends made anew (a
    unit switching between idle and busy) are completed again."""
    completed = [0]
    complete = replay.attributed_device
    monkeypatch.setattr(replay, "attributed_device", lambda *a: completed.__setitem__(
        0, completed[0] + 1) or complete(*a))
    live, _ = _cycles(Collector)
    replayed, collector = _cycles(ReplayCollector)
    assert replayed == live
    assert all(r.backend.grouped_in_place for r in collector.runners)  # type: ignore[attr-defined]
    devices = len(live[0])
    assert any(dev[[f.name for f in dataclasses.fields(DeviceSample)].index("workloads")]
               for dev in live[-1])  # (workloads set again on carried devices)
    assert devices > 30
    assert 2 * devices <= completed[0] < CYCLES * devices / 4


def test_a_sample_grouped_in_place_keeps_its_group_and_gets_the_other_collector_fields_back(
        ) -> None:
    """With ``grouped_in_place``, what a collector set on a reused sample as its group and
    labels is left there (the collector sets them again, or knows they hold what it would
    set); its workloads, processes and waiting reasons are the template's again, and every
    other field is what a backend copying its samples afresh gives."""
    now = [T0]
    grouped = simulated_backends("mixed", clock=lambda: now[0])
    copying = simulated_backends("mixed", clock=lambda: now[0])
    for backend in (*grouped, *copying):
        backend.bill_only = True
        backend.probe()
        backend.open()
    for backend in grouped:
        backend.reuse_samples = backend.grouped_in_place = True
    names = [f.name for f in dataclasses.fields(DeviceSample)]
    others = [i for i, name in enumerate(names) if name not in billed.GROUPING]
    carried = 0
    last: dict[str, DeviceSample] = {}
    for _ in range(6):
        mine = [dev for backend in grouped for dev in backend.sample()]
        theirs = [dev for backend in copying for dev in backend.sample()]
        for dev, copy in zip(mine, theirs):
            assert [_values(dev)[i] for i in others] == [_values(copy)[i] for i in others]
            if last.get(dev.id) is dev:
                assert (dev.resource_group, dev.labels) == ("there", {"team": dev.id})
                carried += 1
            else:
                assert (dev.resource_group, dev.labels) == (None, {})
        for dev in mine:
            for name, value in {"resource_group": "there", "labels": {"team": dev.id},
                                "workloads": (), "processes": (), "waiting": ()}.items():
                object.__setattr__(dev, name, value)
            last[dev.id] = dev
        now[0] += 60.0
    assert carried > 4 * len(last)


def test_a_unit_switching_between_idle_and_busy_fills_its_two_samples_in_again() -> None:
    """A reused unit's sample made from its busy template and the one made from its idle
    sample are both kept: switching from one to the other fills the other in again (what a
    fresh copy gives: tests/test_replay_cycle.py), not a copy made each time."""
    copied = [0]
    derive = billed.derive
    now = [T0]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for backend in backends:
        backend.bill_only = backend.reuse_samples = True
        backend.open()
    switches = 0
    before: dict[str, bool] = {}
    billed.derive = lambda sample, **changes: copied.__setitem__(  # type: ignore[assignment]
        0, copied[0] + 1) or derive(sample, **changes)
    try:
        for _ in range(4 * CYCLES):
            for dev in (d for b in backends for d in b.sample()):
                busy = bool(dev.processes)
                switches += dev.id in before and before[dev.id] != busy
                before[dev.id] = busy
            now[0] += 60.0
    finally:
        billed.derive = derive
    keys = sum(len(b._kept) for b in backends)
    assert switches > keys  # (units went idle and busy again)
    assert copied[0] <= 3 * keys  # (a sample per template, and each idle sample once)


def _unlisting(name: str) -> type | None:
    """The installed backend ``name``, but that its tool lists no processes and reports no
    power (``processes`` and ``power_watts`` unreported)."""
    real = installed_backend(name)
    if real is None:
        return None
    return type(f"Unlisting{real.__name__}", (real,), {
        "unreported_fields": real.unreported_fields | {"processes", "power_watts"}})


def test_a_reused_sample_s_unreported_fields_that_the_collector_sets_stay_unknown() -> None:
    """A field the real backend never reports that the collector sets too (the processes of a
    tool that lists none) is unknown in each reused sample, as in a fresh copy: the sample is
    filled in from its changes with the unreported fields over them."""
    now = [T0]
    reusing = simulated_backends("mixed", clock=lambda: now[0], impersonate=_unlisting)
    copying = simulated_backends("mixed", clock=lambda: now[0], impersonate=_unlisting)
    for backend in (*reusing, *copying):
        backend.bill_only = True
        backend.open()
    for backend in reusing:
        backend.reuse_samples = True
    for _ in range(CYCLES):
        mine = [dev for backend in reusing for dev in backend.sample()]
        theirs = [dev for backend in copying for dev in backend.sample()]
        assert [_values(dev) for dev in mine] == [_values(dev) for dev in theirs]
        assert {dev.processes for dev in mine} == {None}
        assert {dev.power_watts for dev in mine} == {None}
        for dev in mine:  # (what a collector sets in place)
            object.__setattr__(dev, "processes", ())
        now[0] += 60.0
    assert any(entry[4] for backend in reusing for entry in backend._kept.values())


def test_a_job_s_draws_are_its_draws_one_by_one_and_give_the_same_activity() -> None:
    """:func:`job_draws` is each draw asked on its own, and the activity made with a job's
    draws handed in is the activity that asks them itself."""
    compared = 0
    for backend, key, partition in [("nvidia", "nvidia:node:0", False),
                                    ("nvidia", "nvidia:node:1/2", True),
                                    ("amd", "amd:node:3", False), ("gaudi", "gaudi:node:1", False),
                                    ("tpu", "tpu:node:0", False)]:
        for job in range(30):
            draws = job_draws(backend, key, job, partition)
            assert draws == (stall_kind(backend, key, job, partition), unit_hash(key, "wave"),
                             unit_hash(key, job, "eff"), unit_hash(key, job, "link"))
            for r in (0.0, 61.0, 250.0, 599.0):
                for busy, looking, source in [(True, False, None), (True, True, None),
                                              (False, False, None), (True, False, "sm_active")]:
                    args = (backend, key, job, r, 63.5, busy, looking)
                    options = dict(partition=partition, source=source, billed_only=True)
                    assert device_activity(*args, **options, draws=draws) == \
                        device_activity(*args, **options)
                    compared += 1
    assert compared > 2000


def test_a_job_s_moved_processes_are_its_processes_built_afresh() -> None:
    """A job's processes at each sample after its first are its first ones with the memory and
    utilization of the sample: what building them afresh (a memory of no job) gives, for
    jobs sharing their device, running a helper, or alone, with and without per-process
    activity."""
    scenario = load_scenario("mixed")
    kinds = set()
    for activity in (True, False):
        draws = JobDraws()
        for job in range(40):
            drawn = draws.draw(scenario, "nvidia:node:0", job)
            kinds.add((drawn[4] is not None, drawn[5]))
            for used, util in [(2**30, 50.0), (3 * 2**30, 71.25), (2**29, 0.0),
                               (5 * 2**30 + 7, 99.99)]:
                got = draws.processes(scenario, "nvidia:node:0", job, used, util, activity)
                afresh = JobDraws().processes(scenario, "nvidia:node:0", job, used, util,
                                              activity)
                assert [_values(p) for p in got] == [_values(p) for p in afresh]
                assert got[0] is not afresh[0]
    assert kinds == {(True, False), (False, True), (False, False)}


def test_the_waiting_step_classifies_only_the_devices_someone_holds(monkeypatch) -> None:
    """A device that neither a process nor a workload holds has no waiting reasons (``None``,
    what classifying it gives) without being classified; the others are classified as
    before."""
    import allsmi.collection.waiting
    from allsmi.hostactivity.sampler import HostActivity, NodeActivity
    from allsmi.hostactivity.settings import activity_settings
    asked: list[str] = []
    classified = allsmi.collection.waiting.WaitingClassifier._classified
    monkeypatch.setattr(allsmi.collection.waiting.WaitingClassifier, "_classified",
                        lambda self, dev, host: asked.append(dev.id) or classified(self, dev,
                                                                                   host))
    now = [T0]
    config = parse_config("")
    collector = Collector(simulated_backends("mixed", clock=lambda: now[0]), config,
                          clock=lambda: now[0], inline=True,
                          attributor=build_attributor(config, simulate=True,
                                                      declarations=declarations(), inline=True))
    nobody = held = 0
    try:
        for _ in range(CYCLES // 2):
            asked.clear()
            snapshot = collector.collect_once()
            holding = [d.id for d in snapshot.devices if d.processes or d.workloads]
            assert asked == holding
            for dev in snapshot.devices:
                if dev.id not in holding:
                    assert dev.waiting is None
                    assert allsmi.collection.waiting.classify(dev, HostActivity({}, NodeActivity()),
                                                   activity_settings(config)) is None
                    nobody += 1
            held += len(holding)
            now[0] += 60.0
    finally:
        collector.close()
    assert nobody > CYCLES and held > CYCLES

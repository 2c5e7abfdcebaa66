"""What keeps a simulated bill's cycle cheap, counted (not timed): the simulated backend builds
each unit's template once per replay, not once per cycle, and the samples it derives from
them are exactly what building them afresh gives; the collector copies each device once a
cycle, for its group, labels, holders and waiting reasons together, and the simulation's
devices (new each cycle) not at all."""

from __future__ import annotations

import dataclasses

import pytest

import allsmi.collection.collector
import allsmi.collection.groups
import allsmi.schema
import allsmi.collection.waiting
from allsmi.attribution import build_attributor
from allsmi.backends.simulated import simulated_backends
from allsmi.collection.collector import Collector
from allsmi.config import parse_config
from allsmi.collection.registry import declarations
from allsmi.schema import DeviceSample, derive

T0 = 1_790_000_000.0
CYCLES = 30


def _afresh(dev):  # (a DeviceSample or a ProcessSample)
    """``dev`` built again from its fields (every check of ``__post_init__`` run)."""
    return type(dev)(**{f.name: getattr(dev, f.name) for f in dataclasses.fields(dev)})


def test_templates_are_built_once_per_unit_and_samples_equal_fresh_ones() -> None:
    now = [T0]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for backend in backends:
        backend.open()
    units = sum(len(b._units) for b in backends)
    held = 0
    for _ in range(CYCLES):
        for backend in backends:
            for dev in backend.sample():
                assert _afresh(dev) == dev
                for proc in dev.processes or ():  # (a job's processes derived from its first)
                    assert _afresh(proc) == proc
                held += bool(dev.processes)
        now[0] += 60.0
    assert held > CYCLES  # jobs ran: the samples moved
    assert sum(b.templates_built for b in backends) == units  # not units x cycles
    for backend in backends:  # a backend opened again starts afresh
        backend.open()
        backend.sample()
    assert sum(b.templates_built for b in backends) == 2 * units


@pytest.mark.parametrize("fresh", [True, False])
def test_the_collector_copies_a_device_once_a_cycle_and_a_fresh_one_never(monkeypatch,
                                                                          fresh) -> None:
    """A backend's devices are copied once a cycle for what the collector adds (group, labels,
    holders, waiting reasons); the simulation's (``fresh_samples``: new each cycle, kept by
    nobody) are filled in instead, and are what building them with those fields gives."""
    copies: dict[str, int] = {}

    def counting(sample, **changes):
        copies[type(sample).__name__] = copies.get(type(sample).__name__, 0) + 1
        return derive(sample, **changes)
    for module in (allsmi.collection.collector, allsmi.collection.groups, allsmi.collection.waiting):
        monkeypatch.setattr(module, "derive", counting)
    now = [T0]
    config = parse_config("")
    attributor = build_attributor(config, simulate=True, declarations=declarations(), inline=True)
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for backend in backends:
        backend.fresh_samples = fresh
    collector = Collector(backends, config, clock=lambda: now[0], attributor=attributor,
                          inline=True)
    derivers = set(allsmi.schema.samplecopy._DERIVERS)  # what earlier tests in this process wrote out
    try:
        devices, seen = 0, []
        for _ in range(CYCLES):
            snapshot = collector.collect_once()
            devices += len(snapshot.devices)
            seen.extend(snapshot.devices)
            now[0] += 60.0
    finally:
        collector.close()
    assert any(d.waiting for d in snapshot.devices) and all(d.resource_group for d in snapshot.devices)
    assert copies.get("DeviceSample", 0) == (0 if fresh else devices)
    assert len({id(d) for d in seen}) == devices  # every cycle's devices are its own
    for dev in snapshot.devices:
        assert _afresh(dev) == dev
    # each distinct set of changed fields is written out once, not per call
    assert len(set(allsmi.schema.samplecopy._DERIVERS) - derivers) < 32


def test_the_recorder_splits_a_device_again_only_when_its_holders_could_differ(tmp_path,
                                                                              monkeypatch) -> None:
    """The recorder's fair-share split of a held device is made again only when its processes
    (the very objects), workloads or parent changed: a backend that hands the same processes
    back (the simulation's jobs, once their memory ramped up) is not split every cycle."""
    from dataclasses import replace

    import allsmi.accounting.recorder as recorder
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.fairshare import split

    from .accounting.helpers import T0 as START, device, snap
    calls = []
    monkeypatch.setattr(recorder, "split", lambda dev: calls.append(dev.id) or split(dev))
    rec = LedgerRecorder(tmp_path / "ledger.db", parse_config(""))
    try:
        held = device("GPU-a", util=50.0, users=["alice", "bob"], power=300.0)
        for k in range(5):  # the same processes: split once
            rec.on_snapshot(replace(snap(START + 60 * k, held), monotonic=1000.0 + 60 * k))
        assert calls == ["GPU-a"]
        moved = derive(held, processes=tuple(derive(p, utilization_percent=10.0 * (i + 1))
                                              for i, p in enumerate(held.processes)))
        rec.on_snapshot(replace(snap(START + 300, moved), monotonic=1300.0))
        assert calls == ["GPU-a"] * 2  # new processes: split again
        assert rec.last_error is None
    finally:
        rec.close()


def _ledger_rows(path) -> dict[str, list[tuple[object, ...]]]:
    import sqlite3
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(con.execute(f"SELECT * FROM {t}"), key=repr) for t in tables}
    finally:
        con.close()


def test_a_replay_samples_only_what_a_bill_reads_and_books_what_a_full_sample_books(
        tmp_path, monkeypatch) -> None:
    """The replay's backends leave the fields no bill reads (``UNBILLED``: temperature, clocks,
    occupancy, PCIe...) unset and its waiting step explains nothing, and the ledger they make
    is exactly, row for row, the ledger of a replay whose backends sample every field and
    whose holders' reasons come with their evidence."""
    import datetime as dt

    from allsmi.accounting.periods import Window
    from allsmi.backends.simulated import UNBILLED, SimulatedBackend
    from allsmi.backends.simulated.scenario import load_scenario
    from allsmi.cli.simulate.bill import simulated_ledger
    from allsmi.collection.waiting import WaitingClassifier

    start = 1_790_000_000 - 1_790_000_000 % 3600
    window = Window(dt.datetime.fromtimestamp(start, dt.timezone.utc),
                    dt.datetime.fromtimestamp(start + 3 * 3600, dt.timezone.utc))
    config = parse_config("")
    made: list[list[DeviceSample]] = []
    sample = SimulatedBackend.sample
    monkeypatch.setattr(SimulatedBackend, "sample",
                        lambda self: made.append(sample(self)) or made[-1])

    def replay(name: str) -> dict[str, list[tuple[object, ...]]]:
        folder = tmp_path / name
        folder.mkdir()
        return _ledger_rows(simulated_ledger(load_scenario("mixed"), window, config, str(folder),
                                             workers=1))

    billed = replay("bill-only")
    unbilled = [getattr(d, f) for devs in made for d in devs for f in UNBILLED]
    assert not any(v not in (None, {}) for v in unbilled)
    made.clear()
    with monkeypatch.context() as m:  # the same replay, every field sampled and explained
        m.setattr(SimulatedBackend, "bill_only", property(lambda self: False,
                                                          lambda self, value: None))
        m.setattr(WaitingClassifier, "explain", property(lambda self: True,
                                                         lambda self, value: None))
        full = replay("full")
    assert sum(d.temperature_celsius is not None for devs in made for d in devs) > 1000
    assert billed["intervals"] and billed == full


def test_the_recorder_makes_a_devices_waiting_by_holder_again_only_when_it_changed(
        tmp_path, monkeypatch) -> None:
    """Each cycle's classification (``DeviceSample.waiting``, a new tuple of the same entries
    while nothing changed) is made into the recorder's holder -> reason dict only when it
    differs from the last one; the reasons booked are the new ones."""
    from dataclasses import replace

    import allsmi.accounting.recorder as recorder
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.fairshare import waiting_by_holder
    from allsmi.schema import HolderWaiting

    from .accounting.helpers import T0 as START, device, snap
    calls = []
    monkeypatch.setattr(recorder, "waiting_by_holder",
                        lambda dev: calls.append(dev.id) or waiting_by_holder(dev))
    rec = LedgerRecorder(tmp_path / "ledger.db", parse_config(""))
    try:
        held = device("GPU-a", util=0.0, users=["alice"], power=300.0)
        entry = HolderWaiting("input", "input: reading", user="alice")
        for k in range(5):  # equal classifications (new tuples): made once
            rec.on_snapshot(replace(snap(START + 60 * k, derive(held, waiting=(entry,))),
                                    monotonic=1000.0 + 60 * k))
        assert calls == ["GPU-a"]
        other = HolderWaiting("host", "host: busy", user="alice")
        rec.on_snapshot(replace(snap(START + 300, derive(held, waiting=(other,))),
                                monotonic=1300.0))
        assert calls == ["GPU-a"] * 2
        assert list(rec._devices["GPU-a"].waiting.values()) == ["host"]
        assert rec.last_error is None
    finally:
        rec.close()


def test_an_idle_unit_s_activity_is_made_once_not_every_cycle(monkeypatch) -> None:
    """A unit that no process holds has the same activity fields every cycle: they are made
    once per unit, so the activity is computed for the held units' samples only (and once
    for each unit the first time it is idle)."""
    import allsmi.backends.simulated as simulated
    calls = []
    made = simulated.device_activity
    monkeypatch.setattr(simulated, "device_activity",
                        lambda *a, **k: calls.append(a[1]) or made(*a, **k))
    now = [T0]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for backend in backends:
        backend.open()
    held = idle = 0
    for _ in range(CYCLES):
        for backend in backends:
            for dev in backend.sample():
                held += bool(dev.processes)
                idle += not dev.processes
        now[0] += 60.0
    units = sum(len(b._units) + sum(len(u.children) for u in b._units) for b in backends)
    assert idle > CYCLES  # units sat idle
    assert len(calls) <= held + units

"""The dashboard's pure logic: ordering, filtering, totals, history, energy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.state.filtering import Filter, apply_filter
from allsmi.dashboard.state.model import (EnergyMeter, History, device_key, memory_percent, order_devices,
                                          refs_of)
from allsmi.dashboard.state.totals import totals_by
from allsmi.dashboard.views.render import Palette, core_strip, gauge, spark
from allsmi.schema import DeviceSample, Snapshot


def _parents_first(order: list) -> None:
    seen: set[str] = set()
    previous = None
    for ref in order:
        dev = ref.device
        if dev.parent is not None:
            assert dev.parent in seen, f"{dev.id} before its parent"
            assert previous is not None and (previous.device.id == dev.parent
                                             or previous.device.parent == dev.parent)
        seen.add(dev.id)
        previous = ref


@pytest.mark.parametrize("key", ["index", "utilization", "memory", "power", "temperature"])
def test_order_keeps_partitions_under_their_parent(sim_snapshots: list[Snapshot], key: str) -> None:
    refs = refs_of("node-a", sim_snapshots[-1])
    for descending in (True, False):
        order = order_devices(refs, key, descending)
        assert len(order) == len(refs)
        _parents_first(order)


def test_order_by_utilization_puts_unknown_last_both_ways(sim_snapshots: list[Snapshot]) -> None:
    refs = refs_of("node-a", sim_snapshots[-1])
    for descending in (True, False):
        top = [r.device.utilization_percent for r in order_devices(refs, "utilization", descending)
               if r.device.parent is None]
        known = [v for v in top if v is not None]
        assert top[:len(known)] == known, "unknown values must come last"
        assert known == sorted(known, reverse=descending)


def test_order_by_index_is_snapshot_order(sim_snapshots: list[Snapshot]) -> None:
    refs = refs_of("node-a", sim_snapshots[-1])
    assert [r.device.id for r in order_devices(refs, "index")] == [d.id for d in sim_snapshots[-1].devices]
    with pytest.raises(ValueError):
        order_devices(refs, "colour")


def test_filter_by_text_vendor_group_and_partition_context(sim_snapshots: list[Snapshot]) -> None:
    refs = refs_of("node-a", sim_snapshots[-1])
    amd = apply_filter(refs, Filter(vendor="amd"))
    assert amd and {r.device.vendor for r in amd} == {"amd"}
    assert len(apply_filter(refs, Filter(text="MI300X"))) == len(amd)
    # A matching MIG slice brings its parent for context, not its siblings.
    mig = apply_filter(refs, Filter(text="1g.10gb"))
    assert [r.device.name for r in mig] == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"]
    training = apply_filter(refs, Filter(group="training"))
    assert {r.device.vendor for r in training} == {"nvidia"} and len(training) == 11
    assert not apply_filter(refs, Filter(text="no-such-thing"))
    user = next(p.user for d in sim_snapshots[-1].devices for p in d.processes if p.user)
    assert all(any(p.user == user for p in r.device.processes) or
               any(p.user == user for c in refs if c.device.parent == r.device.id for p in c.device.processes)
               for r in apply_filter(refs, Filter(text=user)))


def test_totals_count_boards_once_and_follow_moved_partitions(sim_snapshots: list[Snapshot]) -> None:
    snap = sim_snapshots[-1]
    refs = refs_of("node-a", snap)
    groups = {t.name: t for t in totals_by(refs, lambda r: r.device.resource_group)}
    assert groups["training"].devices == 8 and groups["training"].partitions == 3
    assert groups["inference"].devices == 8 and groups["default"].devices == 22
    assert groups["training"].memory_total_bytes == 8 * 85520809984
    power = sum(d.power_watts for d in snap.devices if d.power_watts is not None)
    assert sum(t.power_watts or 0 for t in groups.values()) == pytest.approx(power)
    # Give one MIG slice to another group: its memory moves there, and it is a partition there,
    # not also a device (the cell read "1+1p": two things where there is one).
    child = next(d for d in snap.devices if d.parent is not None)
    moved = replace(snap, devices=tuple(replace(d, resource_group="slices") if d.id == child.id else d
                                        for d in snap.devices))
    split = {t.name: t for t in totals_by(refs_of("h", moved), lambda r: r.device.resource_group)}
    assert (split["slices"].devices, split["slices"].partitions) == (0, 1)
    assert (split["training"].devices, split["training"].partitions) == (8, 2)
    assert split["slices"].memory_total_bytes == child.memory_total_bytes
    assert split["training"].memory_total_bytes == 8 * 85520809984 - child.memory_total_bytes
    assert split["training"].memory_used_bytes + split["slices"].memory_used_bytes == \
        groups["training"].memory_used_bytes


def test_totals_leave_unknown_unknown() -> None:
    import datetime as dt
    from allsmi.schema import HostSample
    dev = DeviceSample(id="x", vendor="v", kind="gpu", backend="b", health="ok")
    snap = Snapshot(dt.datetime.now(dt.timezone.utc), HostSample("h"), (dev,))
    (total,) = totals_by(refs_of("h", snap), lambda r: "all")
    assert total.utilization_percent is None and total.power_watts is None
    assert total.memory_used_bytes is None and total.devices == 1
    assert memory_percent(dev) is None


def test_history_and_energy_from_the_shared_integrator(sim_snapshots: list[Snapshot]) -> None:
    history, energy = History(points=4), EnergyMeter()
    for snap in sim_snapshots:
        assert history.add("node-a", snap)
        energy.add("node-a", snap)
    assert not history.add("node-a", sim_snapshots[-1]), "the same snapshot is recorded once"
    dev = next(d for d in sim_snapshots[-1].devices if d.vendor == "intel")  # no energy counter
    key = device_key("node-a", dev.id)
    assert len(history.series(key, "utilization")) == 4
    assert history.series(key, "power")[-1] == dev.power_watts
    # Gaudi has no energy counter: five 1 s trapezoids of its power.
    powers = [s.device(dev.id).power_watts for s in sim_snapshots]
    expected = sum((a + b) / 2 for a, b in zip(powers, powers[1:]))
    assert energy.joules(key) == pytest.approx(expected)
    mig = next(d for d in sim_snapshots[-1].devices if d.parent is not None)
    assert energy.joules(device_key("node-a", mig.id)) is None, "partitions carry no board energy"


def test_gauges_sparklines_and_core_strips() -> None:
    pal = Palette()
    assert gauge(50, 10, "x", pal).plain == "█████·····"
    assert gauge(None, 4, "x", pal).plain == "····"
    assert gauge(150, 4, "x", pal).plain == "████"
    assert spark([0, 50, 100, None], 6) == "  ▁▅█ "
    assert core_strip([0, 100, 50, 100], 6, pal).plain == "▁█▅█··"
    assert len(core_strip([10.0] * 64, 8, pal).plain) == 8
    assert pal.load(90) == pal.hot and pal.load(10) == pal.ok and pal.load(None) == pal.dim
    mono = Palette.from_theme(None, no_color=True)
    assert mono.mono and "reverse" in mono.hot


def test_power_is_compared_with_limits_like_with_like() -> None:
    """Five NPUs draw power, two report a limit: the pair is those two's power against their
    limits, and says it covers 2 of 5; the set's whole draw stays in ``power_watts``."""
    import datetime as dt

    from allsmi.dashboard.views.groups import power_totals
    from allsmi.schema import HostSample
    devs = tuple(DeviceSample(id=f"n{i}", vendor="furiosa", kind="npu", backend="b", health="ok",
                              power_watts=100.0 + i, power_limit_watts=300.0 if i < 2 else None)
                 for i in range(5))
    snap = Snapshot(dt.datetime.now(dt.timezone.utc), HostSample("h"), devs)
    (total,) = totals_by(refs_of("h", snap), lambda r: "npu")
    assert total.power_watts == pytest.approx(510.0) and total.power_count == 5
    assert total.power_limited_watts == pytest.approx(201.0) and total.power_limit_watts == 600.0
    assert total.power_limited_count == 2
    assert power_totals(total) == "201/600 W (2 of 5)"
    every = replace(snap, devices=tuple(replace(d, power_limit_watts=300.0) for d in devs))
    (total,) = totals_by(refs_of("h", every), lambda r: "npu")
    assert power_totals(total) == "510/1500 W"
    none = replace(snap, devices=tuple(replace(d, power_limit_watts=None) for d in devs))
    (total,) = totals_by(refs_of("h", none), lambda r: "npu")
    assert power_totals(total) == "510/N/A W"

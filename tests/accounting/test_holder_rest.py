"""The unattributed rest of a device split among its holders (``prometheus.source.split_holders``):
what the holders do not hold, with float residue counted as nothing."""

from __future__ import annotations

import datetime as dt

import pytest

from allsmi.accounting.periods import Window
from allsmi.accounting.prometheus.source import split_holders
from allsmi.accounting.report import Part, build_report
from allsmi.config import Config


def _mig_slice(allocated: float) -> Part:
    """A MIG slice held all window: its idle time is unknown (no per-slice utilization)."""
    return Part(resource_group="training", labels=(), vendor="nvidia", model="1g.10gb",
                host="n1", device="n1/MIG-1", observed_s=30.0, allocated_s=allocated,
                busy_s=None, busy_observed_s=0.0, energy_j=None, idle_s=None)


def _split(part: Part, held_s: dict[str, float]) -> list[Part]:
    fair = {("MIG-1", "n1", "training"): {
        ("ns", pod, "", ""): {"allocated": seconds, "allocation_method": "declared"}
        for pod, seconds in held_s.items()}}
    return split_holders([part], {}, {}, fair)


def test_a_device_held_all_along_leaves_nothing_to_the_rest() -> None:
    # the window's increase and the holders' hourly sums differ in the last bits
    parts = _split(_mig_slice(30.000000000000004), {"a": 10.0, "b": 20.0})
    rest = [p for p in parts if p.pod is None]
    assert len(rest) == 1 and rest[0].allocated_s == 0.0
    # Nothing is allocated to the slice's rest, so its unknown idle time does not make the
    # group's unattributed row unknown: that row keeps the idle time of a whole GPU beside it.
    gpu = Part(resource_group="training", labels=(), vendor="nvidia", model="H100", host="n1",
               device="n1/GPU-2", observed_s=30.0, allocated_s=30.0, busy_s=3.0,
               busy_observed_s=30.0, energy_j=None, idle_s=12.0)
    start = dt.datetime(2026, 11, 26, 18, 0, tzinfo=dt.timezone.utc)
    window = Window(start, start + dt.timedelta(seconds=30))
    report = build_report([_mig_slice(30.000000000000004), gpu], window,
                          ("resource_group", "namespace", "pod"), Config(),
                          holder_parts=[*parts, gpu])
    unattributed = [r for r in report.rows if r.pod is None]
    assert len(unattributed) == 1
    assert unattributed[0].idle_allocated_device_hours == pytest.approx(12.0 / 3600)


def test_a_real_remainder_stays() -> None:
    parts = _split(_mig_slice(30.0), {"a": 10.0, "b": 19.5})
    rest = [p for p in parts if p.pod is None][0]
    assert rest.allocated_s == 0.5

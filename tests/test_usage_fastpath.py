"""The integrator's inlined hot path gives bit-identical increments to the plain formulas.

:class:`allsmi.usage.UsageIntegrator` is written out inline for speed (the exporter and the
ledger run it per device per cycle). The reference here is the straightforward definition
(held(), a trapezoid helper, a fresh previous-sample object per cycle, a set of the devices
seen); both are fed the same snapshots of the simulated ``mixed`` node, perturbed with
everything the fast path has special cases for: lost and vanished devices, repeated ids,
counter resets, gaps longer than the bridged one, clocks that stand still or run backwards,
unknown values, workloads without processes.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Iterable, Iterator

from allsmi.backends.simulated import simulated_backends
from allsmi.schema import DeviceSample, Workload
from allsmi.usage import Increment, UsageIntegrator, held

VALID = ("ok", "degraded")


class _Prev:
    def __init__(self, time: float, steady: float | None, dev: DeviceSample, threshold: float):
        allocated = held(dev)
        util = dev.utilization_percent
        self.time, self.steady, self.utilization = time, steady, util
        self.power, self.energy = dev.power_watts, dev.energy_joules
        self.allocated = None if allocated is None else float(allocated)
        if allocated is None:
            self.idle = None
        elif not allocated:
            self.idle = 0.0
        else:
            level = util if util is not None else dev.compute_active_percent
            self.idle = None if level is None else float(level < threshold)
        act = dev.compute_active_percent
        # held x activity: unknown where either is (0 while not held, on a device that reports
        # activity at all)
        self.active = None if allocated is None or act is None else allocated * act / 100.0


def _trapezoid(a: float | None, b: float | None, dt: float) -> float | None:
    return None if a is None or b is None else (a + b) / 2.0 * dt


class ReferenceIntegrator:
    """The integrator as first written: the definition the fast path must match."""

    def __init__(self, max_gap_seconds: float, threshold: float) -> None:
        self.max_gap_seconds, self.threshold = max_gap_seconds, threshold
        self.last: dict[str, _Prev] = {}

    def feed(self, devices: Iterable[DeviceSample], when: float,
             steady: float | None) -> Iterator[Increment]:
        seen: set[str] = set()
        for dev in devices:
            seen.add(dev.id)
            if dev.health not in VALID:
                self.last.pop(dev.id, None)
                continue
            now = _Prev(when, steady, dev, self.threshold)
            prev = self.last.get(dev.id)
            self.last[dev.id] = now
            if prev is None:
                continue
            if now.steady is not None and prev.steady is not None:
                dt = now.steady - prev.steady
            else:
                dt = now.time - prev.time
            if dt <= 0 or dt > self.max_gap_seconds:
                continue
            busy = _trapezoid(prev.utilization, now.utilization, dt)
            integrated = _trapezoid(prev.power, now.power, dt)
            if prev.energy is not None and now.energy is not None:
                delta = now.energy - prev.energy
                energy = delta if delta >= 0 else (integrated if integrated is not None
                                                   else now.energy)
            else:
                energy = integrated
            yield Increment(dev.id, now.time - dt, now.time, dt,
                            _trapezoid(prev.allocated, now.allocated, dt),
                            None if busy is None else busy / 100.0, energy,
                            _trapezoid(prev.idle, now.idle, dt),
                            _trapezoid(prev.active, now.active, dt))
        for gone in set(self.last) - seen:
            del self.last[gone]


def perturbed_cycles(cycles: int, seed: int) -> Iterator[tuple[list[DeviceSample], float, float | None]]:
    """The mixed node's devices per cycle with random trouble; (devices, wall, steady)."""
    rng = random.Random(seed)
    now = [1_790_000_000.0]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for b in backends:
        b.open()
    steady = 1000.0
    for _ in range(cycles):
        step = rng.choice((1.0, 1.0, 1.0, 0.37, 2.5, 0.0, 45.0))  # 0: a repeated sample
        now[0] += step
        steady += step
        wall = now[0] + (rng.choice((0.0, -30.0, 7.0)) if rng.random() < 0.05 else 0.0)
        devices = [d for b in backends for d in b.sample()]
        out: list[DeviceSample] = []
        for dev in devices:
            roll = rng.random()
            if roll < 0.02:
                continue  # vanished this cycle
            if roll < 0.04:
                dev = dataclasses.replace(dev, health=rng.choice(("lost", "error", "degraded")))
            elif roll < 0.06:
                dev = dataclasses.replace(dev, energy_joules=rng.choice((None, 1.0, 0.0)))
            elif roll < 0.08:
                dev = dataclasses.replace(dev, utilization_percent=None, power_watts=None)
            elif roll < 0.10:
                dev = dataclasses.replace(dev, processes=rng.choice((None, ())),
                                          workloads=rng.choice((None, (),
                                                                (Workload("simulated", pod="p", namespace="n"),))))
            elif roll < 0.11:
                dev = dataclasses.replace(dev, utilization_percent=rng.choice((0.0, 4.99, 5.0, 100.0)))
            out.append(dev)
            if rng.random() < 0.01:
                out.append(dataclasses.replace(dev, health=rng.choice(("ok", "lost"))))  # repeated id
        yield out, wall, (None if rng.random() < 0.03 else steady)


def same(a: Increment, b: Increment) -> bool:
    return all(x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x)
                          and math.isnan(y)) for x, y in zip(a, b)) and type(a) is type(b)


def test_fast_path_matches_the_plain_formulas_bit_for_bit() -> None:
    for seed, gap, threshold in ((1, 30.0, 5.0), (2, 3.0, 0.0), (3, 60.0, 100.0)):
        fast, ref = UsageIntegrator(gap, threshold), ReferenceIntegrator(gap, threshold)
        count = 0
        for devices, wall, steady in perturbed_cycles(1500, seed):
            got = list(fast.feed(devices, wall, steady))
            want = list(ref.feed(devices, wall, steady))
            assert len(got) == len(want)
            assert all(same(g, w) for g, w in zip(got, want)), (got, want)
            assert set(fast._last) == set(ref.last)  # the same devices carried to the next cycle
            count += len(got)
        assert count > 10_000  # the comparison really ran over many increments


def test_vanished_devices_are_forgotten_even_with_repeated_ids() -> None:
    dev = DeviceSample(id="a", vendor="nvidia", kind="gpu", backend="nvidia", name="H100",
                       health="ok", power_watts=100.0)
    other = dataclasses.replace(dev, id="b")
    integ = UsageIntegrator()
    list(integ.feed([dev, other], 0.0, 0.0))
    # "b" vanished; "a" appears twice, the second time lost: "b" must still be dropped, so that
    # its return 5 s later starts afresh instead of bridging the time it was away
    list(integ.feed([dev, dataclasses.replace(dev, id="c"), dataclasses.replace(dev, health="lost")],
                    1.0, 1.0))
    assert set(integ._last) == {"c"}
    assert list(integ.feed([other], 5.0, 5.0)) == []


def test_increment_split_keeps_its_type_and_the_proportions() -> None:
    inc = Increment("a", 0.0, 10.0, 10.0, 10.0, 5.0, 100.0, None)
    head, tail = inc.split(4.0)
    assert isinstance(head, Increment) and head.device_id == "a"
    assert (head.start, head.end, head.observed_seconds, head.energy_joules) == (0.0, 4.0, 4.0, 40.0)
    assert tail.idle_allocated_seconds is None and tail.allocated_seconds == 6.0

"""The simulation's model: every value a pure function of (scenario, seed, device, time).

Two processes simulating the same scenario at the same instant compute the
same numbers, so one process can check what another accounted. Each "load
unit" (a device, or a MIG instance) runs jobs on a fixed cycle: a job is
active for ``duty_cycle`` of each ``period`` and idle otherwise. During a job
the utilization moves smoothly (two sines around a per-device base); power is
linear in utilization, so the lifetime energy counter has a closed form (the
exact integral of the reported power) and needs no stored state.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from typing import Callable

TAU = 2.0 * math.pi


def unit_hash(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def unit_hasher(*parts: object) -> Callable[[str], float]:
    """``lambda tag: unit_hash(*parts, tag)``, the same numbers with the text of ``parts``
    hashed once (a copy of the hash state per tag: a job's draws hash its unit and number
    seven to ten times, a month's bill a hundred thousand jobs)."""
    prefix = hashlib.blake2b(("|".join(map(str, parts)) + "|").encode(), digest_size=8)

    def draw(tag: str) -> float:
        state = prefix.copy()
        state.update(tag.encode())
        return int.from_bytes(state.digest(), "big") / 2.0**64
    return draw


@dataclass(frozen=True)
class LoadCycle:
    """The job cycle of one load unit, with its closed-form integral."""

    period: float
    active: float
    offset: float
    base: float
    amp1: float
    per1: float
    ph1: float
    amp2: float
    per2: float
    ph2: float

    @classmethod
    def make(cls, key: str, duty: float, period_range: tuple[float, float]) -> "LoadCycle":
        lo, hi = period_range
        period = lo + (hi - lo) * unit_hash(key, "period")
        return cls(period=period, active=duty * period, offset=period * unit_hash(key, "offset"),
                   base=50.0 + 32.0 * unit_hash(key, "base"),
                   amp1=8.0, per1=60.0 + 120.0 * unit_hash(key, "p1"), ph1=TAU * unit_hash(key, "f1"),
                   amp2=4.0, per2=11.0 + 20.0 * unit_hash(key, "p2"), ph2=TAU * unit_hash(key, "f2"))

    def position(self, s: float) -> tuple[int, float]:
        """(job number, seconds into the cycle) at ``s`` seconds after the epoch."""
        u = s + self.offset
        n = math.floor(u / self.period)
        return n, u - n * self.period

    def utilization(self, r: float) -> float:
        """Percent at ``r`` seconds into the cycle (0 while idle)."""
        if r >= self.active:
            return 0.0
        return (self.base + self.amp1 * math.sin(TAU * r / self.per1 + self.ph1)
                + self.amp2 * math.sin(TAU * r / self.per2 + self.ph2))

    def _integral_within(self, x: float) -> float:
        """∫ utilization dr over [0, x] for x within one active stretch: ``base * x + amp1 *
        per1 / TAU * (cos(ph1) - cos(TAU * x / per1 + ph1))`` and the same of the second sine,
        with what does not depend on ``x`` made once (:attr:`_sines`: the same floats)."""
        k1, c1, k2, c2 = self._sines
        return (self.base * x
                + k1 * (c1 - math.cos(TAU * x / self.per1 + self.ph1))
                + k2 * (c2 - math.cos(TAU * x / self.per2 + self.ph2)))

    @functools.cached_property
    def _sines(self) -> tuple[float, float, float, float]:
        """(amp1 * per1 / TAU, cos(ph1), amp2 * per2 / TAU, cos(ph2)): the constants of
        :meth:`_integral_within`, asked every sample of a replay."""
        return (self.amp1 * self.per1 / TAU, math.cos(self.ph1),
                self.amp2 * self.per2 / TAU, math.cos(self.ph2))

    @functools.cached_property
    def _per_job(self) -> float:
        """∫ utilization over one whole job (a constant of the cycle, asked every sample)."""
        return self._integral_within(self.active)

    @functools.cached_property
    def _before_epoch(self) -> float:
        """:meth:`_from_cycle_origin` of the epoch itself (a constant of the cycle)."""
        return self._from_cycle_origin(self.offset)

    def _from_cycle_origin(self, u: float) -> float:
        n = math.floor(u / self.period)
        r = u - n * self.period
        return n * self._per_job + self._integral_within(min(r, self.active))

    def cumulative(self, s: float) -> float:
        """∫ utilization over [0, s] seconds after the epoch (percent-seconds)."""
        return self._from_cycle_origin(s + self.offset) - self._before_epoch


@dataclass(frozen=True)
class Wobble:
    """A small sine on top of idle power, with its integral."""

    amp: float
    per: float
    ph: float

    def value(self, s: float) -> float:
        return self.amp * math.sin(TAU * s / self.per + self.ph)

    def cumulative(self, s: float) -> float:
        """``amp * per / TAU * (cos(ph) - cos(TAU * s / per + ph))``, what does not depend on
        ``s`` made once (:attr:`_constants`: the same floats)."""
        k, c = self._constants
        return k * (c - math.cos(TAU * s / self.per + self.ph))

    @functools.cached_property
    def _constants(self) -> tuple[float, float]:
        """(amp * per / TAU, cos(ph)) of :meth:`cumulative`, asked every sample of a replay."""
        return self.amp * self.per / TAU, math.cos(self.ph)


def in_window(s: float, every: float | None, duration: float | None, offset: float = 0.0) -> bool:
    """Whether a periodic fault window covers ``s`` (always, when ``every`` is unset)."""
    if every is None:
        return True
    return (s - offset) % every < (duration if duration is not None else every)

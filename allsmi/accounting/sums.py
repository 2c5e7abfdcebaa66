"""Sums of usage parts into billing rows: the hours and kWh a row prices, and what its cost
was spent on.

:class:`Sums` adds up the :class:`~allsmi.accounting.report.Part` records of one row;
:func:`quantities` turns sums into the hours and kWh the group's prices price, and
:func:`money` prices them. A row's cost is linear in its parts, so the rows of any grouping add
up to the rows of a coarser one.

What a cost was spent on (each waiting reason, compute activity) is a ratio of seconds, which
does not add up when taken of sums: a group's cost x its input seconds / its allocated seconds
is not the sum of its holders' figures (their cost per allocated hour differs: energy follows
use, ``bill_by = "used"`` prices busy time). So it is taken of the finest parts the source gives
(each device's share per holder, and what no holder was given), then summed (:class:`Spent`):
every part's priced hours and kWh x the reason's share of the part's allocated time, or x its
efficiency (:func:`efficiency`). Whatever the grouping, each row is the sum of the same parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from allsmi.fairshare import merge_methods
from allsmi.schema import WAITING_REASONS

if TYPE_CHECKING:
    from allsmi.accounting.report import Part

#: Allocated seconds whose activity may be unknown before a row's efficiency is (rounding of
#: milliseconds and of float sums, relative and absolute).
ACTIVITY_ROUNDING = (1e-9, 1e-3)


def efficiency(active: float | None, active_allocated: float | None,
               allocated: float | None) -> float | None:
    """``active / allocated`` (at most 1): known where the activity of all of the allocated
    time is (``active_allocated`` covers ``allocated``); ``None`` where some of it is unknown
    (never counted as inactive), or nothing was allocated."""
    if active is None or not allocated:
        return None
    rel, absolute = ACTIVITY_ROUNDING
    if (active_allocated or 0.0) < allocated * (1.0 - rel) - absolute:
        return None
    return min(1.0, active / allocated)


@dataclass
class Sums:
    """The sums of the parts of one row (seconds and joules)."""

    devices: set[str] = field(default_factory=set)
    observed: float = 0.0
    allocated: float | None = None
    busy: float | None = None
    busy_observed: float = 0.0
    energy: float | None = None
    mem_sum: float | None = None
    mem_samples: int = 0
    mem_peak: float | None = None
    billed: float | None = None
    idle: float | None = None
    idle_billed: float | None = None
    idle_energy: float | None = None
    idle_devices: set[str] = field(default_factory=set)
    used_billed: float | None = None
    allocation_method: str | None = None
    usage_method: str | None = None
    attributed: float | None = 0.0
    """Sum of the parts' attributed seconds; ``None`` once one is unknown."""
    idle_lost: bool = False
    """Some part's idle time is unknown: so is the row's (never the known parts alone)."""
    active: float | None = None
    active_allocated: float | None = None
    activity_method: str | None = None
    waits: list[float] | None = None

    def add(self, p: "Part") -> None:
        if p.active_s is not None:
            self.active = (self.active or 0.0) + p.active_s
            self.active_allocated = (self.active_allocated or 0.0) + (p.active_allocated_s or 0.0)
            self.activity_method = merge_methods((self.activity_method, p.activity_method))
        if p.waiting_s is not None:
            if self.waits is None:
                self.waits = [0.0] * len(WAITING_REASONS)
            for i, seconds in enumerate(p.waiting_s):
                self.waits[i] += seconds
        self._add_usage(p)

    def _add_usage(self, p: "Part") -> None:
        self.devices.add(p.device)
        self.allocation_method = merge_methods((self.allocation_method, p.allocation_method))
        self.usage_method = merge_methods((self.usage_method, p.usage_method))
        if self.attributed is not None:
            self.attributed = None if p.attributed_s is None else self.attributed + p.attributed_s
        if p.idle_s is None and p.observed_s > 0 and p.allocated_s != 0:
            self.idle_lost = True
            self.idle = self.idle_billed = self.idle_energy = None
        if p.idle_s:  # (known to have sat idle, whether or not the row's idle time is known)
            self.idle_devices.add(p.device)
        if self.idle_lost:
            pass
        elif p.idle_s is not None:
            self.idle = (self.idle or 0.0) + p.idle_s
            idle_billed = p.idle_billed_s if p.idle_billed_s is not None else p.idle_s
            self.idle_billed = (self.idle_billed or 0.0) + idle_billed
        if p.idle_energy_j is not None and not self.idle_lost:
            self.idle_energy = (self.idle_energy or 0.0) + p.idle_energy_j
        self.observed += p.observed_s
        if p.allocated_s is not None:
            self.allocated = (self.allocated or 0.0) + p.allocated_s
            billed = p.billed_s if p.billed_s is not None else p.allocated_s
            self.billed = (self.billed or 0.0) + billed
        if p.busy_s is not None:
            self.busy = (self.busy or 0.0) + p.busy_s
            self.busy_observed += p.busy_observed_s
            used_billed = p.used_billed_s if p.used_billed_s is not None else p.busy_s
            self.used_billed = (self.used_billed or 0.0) + used_billed
        if p.energy_j is not None:
            self.energy = (self.energy or 0.0) + p.energy_j
        if p.mem_sum is not None:
            self.mem_sum = (self.mem_sum or 0.0) + p.mem_sum
            self.mem_samples += p.mem_samples
        if p.mem_peak is not None:
            self.mem_peak = p.mem_peak if self.mem_peak is None else max(self.mem_peak, p.mem_peak)


def sort_key(key: tuple[object, ...]) -> tuple[object, ...]:
    """``key`` in an order of rows (unknown, ``None``, first)."""
    return tuple("" if v is None else v for v in key)


def _ordered(parts: Iterable["Part"], key_of: Callable[["Part"], tuple[Any, ...]]) -> list["Part"]:
    """``parts`` sorted, so that float sums, and so the output bytes, do not depend on the
    source's order."""
    return sorted(parts, key=lambda p: (sort_key(key_of(p)), p.device,
                                        sort_key((p.user, p.namespace, p.pod, p.job))))


def accumulate(parts: Iterable["Part"], key_of: Callable[["Part"], tuple[Any, ...]]
               ) -> dict[tuple[Any, ...], Sums]:
    """The parts summed per ``key_of(part)``."""
    sums: dict[tuple[Any, ...], Sums] = {}
    for part in _ordered(parts, key_of):
        key = key_of(part)
        acc = sums.get(key)
        if acc is None:
            acc = sums[key] = Sums()
        acc.add(part)
    return sums


@dataclass(frozen=True)
class Quantities:
    """A row's hours and kWh, as its group bills them."""

    allocated_h: float | None
    billed_h: float | None
    idle_h: float | None
    idle_billed_h: float | None
    kwh: float | None
    idle_kwh: float | None
    used_h: float | None
    used_billed_h: float | None
    priced_h: float | None
    """What ``price_per_device_hour`` prices: the billed hours, or with ``bill_by = "used"`` the
    used ones at the billing shares."""


def quantities(acc: Sums, grp: Any) -> Quantities:
    """``acc``'s hours and kWh in the group ``grp`` (its ``partition_billing`` and ``bill_by``).

    Unknown allocation (no backend listed processes) stays unknown, and so does what depends
    on it: never a made-up 0."""
    whole = grp.partition_billing == "whole"
    hours = lambda v: None if v is None else v / 3600.0  # noqa: E731
    allocated_h = hours(acc.allocated)
    billed_h = allocated_h if whole or acc.billed is None else acc.billed / 3600.0
    # Idle time is a part of the known allocated time: none known, none idle known.
    idle_h = None if allocated_h is None else hours(acc.idle)
    idle_billed_h = idle_h if whole or acc.idle_billed is None else acc.idle_billed / 3600.0
    if idle_h is not None and allocated_h is not None:  # rounding of shares: never above
        idle_h = min(idle_h, allocated_h)
        if idle_billed_h is not None and billed_h is not None:
            idle_billed_h = min(idle_billed_h, billed_h)
    used_h = hours(acc.busy)
    used_billed_h = used_h if whole or acc.used_billed is None else acc.used_billed / 3600.0
    return Quantities(
        allocated_h=allocated_h, billed_h=billed_h, idle_h=idle_h, idle_billed_h=idle_billed_h,
        kwh=None if acc.energy is None else acc.energy / 3.6e6,
        idle_kwh=None if acc.idle_energy is None else acc.idle_energy / 3.6e6,
        used_h=used_h, used_billed_h=used_billed_h,
        priced_h=used_billed_h if grp.bill_by == "used" else billed_h)


def money(grp: Any, hours: float | None, kwh: float | None) -> float | None:
    """hours x price_per_device_hour + kwh x price_per_kwh; ``None`` with neither price set, or
    when the priced hours are unknown, or the energy where it is all that is priced (never a
    made-up 0). Energy unknown beside an hourly price charges nothing for energy, as a group's
    devices without energy add nothing to its energy: rows add up to their group's."""
    per_hour, per_kwh = grp.price_per_device_hour, grp.price_per_kwh
    if per_hour is None and (per_kwh is None or kwh is None) \
            or per_hour is not None and hours is None:
        return None
    cost = 0.0
    if per_hour is not None and hours is not None:
        cost += hours * per_hour
    if per_kwh is not None and kwh is not None:
        cost += kwh * per_kwh
    return cost


class Spent:
    """What one row's priced hours and kWh were spent on, summed over its finest parts: per
    waiting reason, and on compute activity (see the module docstring)."""

    __slots__ = ("reason_hours", "reason_kwh", "active_hours", "active_kwh", "active_unknown")

    def __init__(self) -> None:
        self.reason_hours = [0.0] * len(WAITING_REASONS)
        self.reason_kwh = [0.0] * len(WAITING_REASONS)
        self.active_hours = 0.0
        self.active_kwh = 0.0
        self.active_unknown = False
        """Some part with something priced had allocated time of unknown activity."""

    def add(self, part: "Part", q: Quantities) -> None:
        """Add one part, whose hours and kWh are ``q``."""
        hours, kwh = q.priced_h or 0.0, q.kwh or 0.0
        allocated = part.allocated_s
        if part.waiting_s is not None and allocated:
            for i, seconds in enumerate(part.waiting_s):
                share = min(1.0, seconds / allocated)
                self.reason_hours[i] += hours * share
                self.reason_kwh[i] += kwh * share
        # Time nobody held bought no activity (its energy, if priced, is all lost).
        share = 0.0 if allocated == 0 else efficiency(part.active_s, part.active_allocated_s,
                                                       allocated)
        if share is None:
            self.active_unknown = self.active_unknown or bool(hours or kwh)
        else:
            self.active_hours += hours * share
            self.active_kwh += kwh * share


def spent(parts: Iterable["Part"], key_of: Callable[["Part"], tuple[Any, ...]],
          group_of: Callable[[str], Any]) -> dict[tuple[Any, ...], Spent]:
    """Per ``key_of(part)``, what its parts' priced hours and kWh were spent on, each part
    priced by its group (``group_of(resource_group)``)."""
    out: dict[tuple[Any, ...], Spent] = {}
    for part in _ordered(parts, key_of):
        one = Sums()
        one.add(part)
        key = key_of(part)
        into = out.get(key)
        if into is None:
            into = out[key] = Spent()
        into.add(part, quantities(one, group_of(part.resource_group)))
    return out

"""Per-holder counters: each holder's part of a device's allocated time, used time and energy.

Fed the same increments as the device counters (:mod:`allsmi.exporter.counters`), each split
among the device's holders as the ledger splits it (:func:`allsmi.fairshare.split`): allocated
time by declared share, busy time by measured activity, energy of idle time like allocated time
and the rest like busy time. A series is one holder on one device split by one method
(``method`` label), so the holders' series of a device add up to the device's counters
(``sum without (namespace, pod, job_id, user, method)``), less what no holder was given.

Cardinality stays bounded: only holders seen recently have series; a holder that has left
(or a device that is gone) is dropped :data:`HOLDER_FORGET_AFTER_SECONDS` after it was last
seen, and a holder that comes back starts again from 0 with a new ``_created``. And however
fast holders come and go (a scheduler starting jobs by the thousand), at most ``max_series``
holder series exist (``[serve] max_holder_series``, default :data:`DEFAULT_MAX_HOLDER_SERIES`):
a holder arriving beyond it is counted in its device's *overflow holder* (``namespace``,
``pod`` and ``job_id`` all :data:`OVERFLOW`; one per device and method), and the allocated time
so credited is added up in :attr:`HolderCounters.overflow_seconds` (published as
``allsmi_holder_overflow_seconds_total``). The device's total stays whole; only who held that
part is not told. The ``user``
label is empty unless the exporter runs with ``--processes`` (then holders that differ only by
user share one series).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from allsmi.fairshare import NOBODY, Holder, Split, split, waiting_by_holder
from allsmi.schema import WAITING_REASONS, DeviceSample
from allsmi.usage import Increment

#: How long the series of a holder no longer on the device are kept (seconds).
HOLDER_FORGET_AFTER_SECONDS = 300.0

#: Holder series kept at most (device x holder x method; each is three counters): a busy node,
#: e.g. 8 GPUs as 56 MIG slices with several pods or jobs each, and a job an hour on every one
#: of them over the forget period, stays well inside it.
DEFAULT_MAX_HOLDER_SERIES = 1000

#: The namespace, pod and job_id of a device's overflow holder (no Kubernetes name or job id
#: starts with an underscore).
OVERFLOW = "_overflow"

#: Label values of one series: uuid, resource_group, namespace, pod, job_id, user, method.
HolderKey = tuple[str, str, str, str, str, str, str]


@dataclass(frozen=True)
class HolderValues:
    """Accumulated counters of one holder series; ``None`` where nothing was counted."""

    created: float
    allocated_seconds: float | None
    used_seconds: float | None
    energy_joules: float | None
    active_seconds: float | None = None
    waiting_seconds: tuple[float, ...] | None = None
    """Allocated seconds per waiting reason (WAITING_REASONS order); ``None``: never classified."""


_REASON_INDEX = {reason: i for i, reason in enumerate(WAITING_REASONS)}


@dataclass
class _Total:
    created: float
    last_seen: float
    allocated_seconds: float | None = None
    used_seconds: float | None = None
    energy_joules: float | None = None
    active_seconds: float | None = None
    waiting_seconds: list[float] | None = None


class HolderCounters:
    """Per-holder totals since the exporter started (see the module docstring)."""

    def __init__(self, users: bool = False,
                 forget_after_seconds: float = HOLDER_FORGET_AFTER_SECONDS,
                 max_series: int = DEFAULT_MAX_HOLDER_SERIES) -> None:
        self.users = users
        self.forget_after_seconds = forget_after_seconds
        self.max_series = max_series
        self.overflow_seconds = 0.0
        """Allocated device time credited to overflow holders since start-up."""
        self._totals: dict[HolderKey, _Total] = {}
        self._named = 0  # series of named holders (the overflow ones are not counted)
        #: Per device: its holders in the last cycle it was valid and held, its group, and
        #: that cycle. An increment goes to the holders at its end, else at its start (as in
        #: the ledger: allsmi.accounting.recorder).
        self._held: dict[str, tuple[Split, str, int]] = {}
        #: Per device: each holder's waiting reason in that cycle (None: not classified).
        self._waiting: dict[str, dict[Holder, str] | None] = {}
        self._now = 0.0
        self._cycle = 0

    def observe(self, devices: tuple[DeviceSample, ...], now: float) -> None:
        """Note who holds each device in this snapshot (before its increments are added)."""
        self._now = now
        self._cycle += 1
        for dev in devices:
            if dev.health in ("ok", "degraded") and (dev.processes or dev.workloads):
                self._held[dev.id] = (split(dev), dev.resource_group or "", self._cycle)
                self._waiting[dev.id] = waiting_by_holder(dev)

    def _series(self, dev_id: str, group: str, holder: Holder, method: str) -> tuple[_Total, bool]:
        """The series of ``holder`` (created if there is room), and whether it is the
        device's overflow holder instead."""
        user = (holder.user or "") if self.users else ""
        key = (dev_id, group, holder.namespace or "", holder.pod or "", holder.job or "", user,
               method)
        total = self._totals.get(key)
        overflow = False
        if total is None:
            if self._named >= self.max_series:
                key, overflow = (dev_id, group, OVERFLOW, OVERFLOW, OVERFLOW, "", method), True
                total = self._totals.get(key)
            else:
                self._named += 1
            if total is None:
                total = self._totals[key] = _Total(self._now, self._now)
        total.last_seen = self._now
        return total, overflow

    def add(self, inc: Increment) -> None:
        """Split one device increment among the device's holders."""
        sp, group, cycle = self._held.get(inc.device_id, (NOBODY, "", 0))
        if cycle < self._cycle - 1 or not sp.allocated and not sp.used:
            return
        _, _, _, observed, allocated, busy, energy, idle, active = inc
        idle_part = min(1.0, idle / observed) if idle is not None and energy is not None \
            and observed > 0 else None
        waiting = self._waiting.get(inc.device_id)
        for holder, weight in sp.allocated:
            total, overflow = self._series(inc.device_id, group, holder, sp.allocation_method)
            if allocated is not None and allocated >= 0:
                total.allocated_seconds = (total.allocated_seconds or 0.0) + allocated * weight
                if overflow:
                    self.overflow_seconds += allocated * weight
                if waiting is not None:
                    if total.waiting_seconds is None:
                        total.waiting_seconds = [0.0] * len(WAITING_REASONS)
                    reason = _REASON_INDEX.get(waiting.get(holder, "unknown"), -1)
                    total.waiting_seconds[reason] += allocated * weight
            if active is not None and active >= 0:  # its allocated time x the device's activity
                total.active_seconds = (total.active_seconds or 0.0) + active * weight
            if idle_part is not None and energy >= 0:  # type: ignore[operator]
                total.energy_joules = (total.energy_joules or 0.0) + \
                    energy * idle_part * weight  # type: ignore[operator]
        busy_part = 1.0 - (idle_part or 0.0)
        for holder, weight in sp.used:
            total, _ = self._series(inc.device_id, group, holder, sp.usage_method)
            if busy is not None and busy >= 0:
                total.used_seconds = (total.used_seconds or 0.0) + busy * weight
            if energy is not None and energy >= 0:
                total.energy_joules = (total.energy_joules or 0.0) + energy * busy_part * weight

    def forget(self, now: float) -> None:
        """Drop the series of holders not seen for :attr:`forget_after_seconds`."""
        gone = [k for k, t in self._totals.items() if now - t.last_seen > self.forget_after_seconds]
        for key in gone:
            del self._totals[key]
            if key[2:5] != (OVERFLOW, OVERFLOW, OVERFLOW):
                self._named -= 1
        if gone:  # a dict never shrinks its table by itself: after a churn, give the memory back
            self._totals = dict(self._totals)
        for dev_id in [d for d, (_, _, cycle) in self._held.items() if cycle < self._cycle - 1]:
            del self._held[dev_id]
            self._waiting.pop(dev_id, None)

    def values(self) -> Mapping[HolderKey, HolderValues]:
        """Immutable totals of every series still kept."""
        return {key: HolderValues(t.created, t.allocated_seconds, t.used_seconds, t.energy_joules,
                                  t.active_seconds, None if t.waiting_seconds is None
                                  else tuple(t.waiting_seconds))
                for key, t in sorted(self._totals.items())}

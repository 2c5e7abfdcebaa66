"""The recorder's accumulating intervals: one device's increments over one ledger interval,
and each holder's share of them (floats until written, then milliseconds and millijoules).

Each increment is split twice among the holders (:mod:`allsmi.fairshare`): its allocated and
idle time, and the energy of its idle part, by the allocated weights; its busy time and the
energy of the rest by the used weights. Each row also keeps the method of each split
(``mixed`` when the interval saw more than one). Active time (allocated time weighted by compute
activity) follows the allocated weights, as allocated time does: each holder's part is its
allocated time of the increment x the device's activity over it, so that a holder's efficiency
(active / allocated) is the device's over the time it held it, never above 1; the time per
waiting reason follows the allocated weights too, each holder's part booked under its own
reason (``DeviceSample.waiting``).

This is the ledger's hot path (every device, every cycle), so the classes use slots and the
device's own sums are added inline; the recorder's results are checked against a plain
re-computation in tests/accounting/test_recorder_fastpath.py.
"""

from __future__ import annotations

from allsmi.accounting.ledger.store import Dim, Holder, IntervalRecord, Share
from typing import Mapping

from allsmi.accounting.ledger.schema import DEVICE_SUMS, HOLDER_SUMS, WAIT_COLUMNS
from allsmi.fairshare import MIXED, NOBODY, Split
from allsmi.schema import WAITING_REASONS
from allsmi.usage import Increment

#: Index of each waiting reason in an accumulator's ``waits`` list (and in WAIT_COLUMNS).
_REASON_INDEX = {reason: i for i, reason in enumerate(WAITING_REASONS)}
_UNKNOWN = _REASON_INDEX["unknown"]


def _method(mine: str | None, method: str) -> str:
    """The method of a row so far, with one more increment split by ``method``."""
    return method if mine is None or mine == method else MIXED


class _Acc:
    """Sums of one device's (or one holder's) increments over an interval."""

    __slots__ = ("observed", "allocated", "busy", "energy", "billed", "idle", "idle_billed",
                 "idle_energy", "used_billed", "allocation_method", "usage_method", "idle_lost",
                 "active", "active_allocated", "activity_method", "waits")

    def __init__(self) -> None:
        self.observed = 0.0
        self.allocated: float | None = None
        self.busy: float | None = None
        self.energy: float | None = None
        self.billed: float | None = None
        """Allocated seconds x the billing share (:func:`allsmi.usage.billing_shares`)."""
        self.idle: float | None = None
        self.idle_billed: float | None = None
        self.idle_energy: float | None = None
        """The increments' energy in proportion to their idle-allocated time."""
        self.used_billed: float | None = None
        """Busy seconds x the billing share (what ``bill_by = "used"`` prices)."""
        self.allocation_method: str | None = None
        self.usage_method: str | None = None
        self.idle_lost = False
        """Whether some held time had an unknown idleness (a device that reports no
        utilization): the idle sums are then unknown, never the known part alone."""
        self.active: float | None = None
        """Allocated seconds weighted by compute activity."""
        self.active_allocated: float | None = None
        """Allocated seconds whose activity was known (``active``'s denominator)."""
        self.activity_method: str | None = None
        self.waits: list[float] | None = None
        """Allocated seconds per waiting reason (WAITING_REASONS order); ``None``: none known."""

    def add_active(self, active: float, allocated: float | None, weight: float,
                   method: str | None) -> None:
        """Add ``weight`` of an increment's active time (and of the allocated time it covers)."""
        self.active = (self.active or 0.0) + active * weight
        self.active_allocated = (self.active_allocated or 0.0) + (allocated or 0.0) * weight
        if method is not None:
            self.activity_method = _method(self.activity_method, method)

    def add_wait(self, reason: int, seconds: float) -> None:
        """Book ``seconds`` of allocated time under the waiting reason at index ``reason``."""
        waits = self.waits
        if waits is None:
            waits = self.waits = [0.0] * len(WAITING_REASONS)
        waits[reason] += seconds

    def add_allocated(self, observed: float, allocated: float | None, energy: float | None,
                      idle: float | None, idle_part: float | None, weight: float,
                      share: float) -> None:
        """Add ``weight`` of an increment's allocated side: observed, allocated and idle time
        and the energy of idle time (``idle_part`` of its energy, ``None``: none)."""
        self.observed += observed * weight
        if allocated is not None:
            held = allocated * weight
            self.allocated = (self.allocated or 0.0) + held
            self.billed = (self.billed or 0.0) + held * share
        if idle is not None:
            idled = idle * weight
            self.idle = (self.idle or 0.0) + idled
            self.idle_billed = (self.idle_billed or 0.0) + idled * share
            if idle_part is not None:
                joules = energy * weight * idle_part  # type: ignore[operator]
                self.idle_energy = (self.idle_energy or 0.0) + joules
                self.energy = (self.energy or 0.0) + joules
        elif allocated and weight:  # held, but whether idle is unknown: not a known 0
            self.idle_lost = True

    def add_used(self, busy: float | None, energy: float | None, busy_part: float,
                 weight: float, share: float) -> None:
        """Add ``weight`` of an increment's used side: busy time and the energy of busy time
        (``busy_part`` of its energy)."""
        if busy is not None:
            used = busy * weight
            self.busy = (self.busy or 0.0) + used
            self.used_billed = (self.used_billed or 0.0) + used * share
        if energy is not None:
            self.energy = (self.energy or 0.0) + energy * weight * busy_part

    def idle_values(self, ms, mj) -> tuple[int | None, int | None, int | None]:  # type: ignore[no-untyped-def]
        """(idle_ms, idle_billed_ms, idle_energy_mj) as stored: all unknown once any held time's
        idleness was; otherwise the known sums, 0 where no held time was seen (time not held,
        or held by holders unknown, is idle for none of its known-allocated time)."""
        if self.idle_lost:
            return None, None, None
        return ms(self.idle or 0.0), ms(self.idle_billed or 0.0), mj(self.idle_energy)


def _since(now: object, before: object | None,
           columns: tuple[tuple[str, str], ...]) -> dict[str, int | str | None]:
    """Each of ``columns`` of ``now`` less what ``before`` had (a MAX is the new maximum, a
    split method the row's method so far, which the upsert merges; an unknown stays unknown,
    so an idle time that became unknown makes the row's unknown)."""
    out: dict[str, int | str | None] = {}
    for name, agg in columns:
        value = getattr(now, name)
        prev = None if before is None else getattr(before, name)
        out[name] = value if value is None or prev is None or agg in ("MAX", "METHOD") \
            else value - prev
    return out


class Bucket(_Acc):
    """One device's accumulating interval."""

    __slots__ = ("start", "dim", "first", "last", "busy_observed", "mem_sum", "mem_samples",
                 "mem_peak", "holders", "_taken", "attributed", "closing")

    def __init__(self, start: int, dim: Dim, when: float) -> None:
        super().__init__()
        self.start = start
        self.dim = dim
        self.first = when
        self.last = when
        self.busy_observed = 0.0
        self.attributed = 0.0
        """Observed seconds whose holders were known (allocated time known)."""
        self.mem_sum: int | None = None
        self.mem_samples = 0
        self.mem_peak: int | None = None
        self.holders: dict[Holder, _Acc] = {}
        #: The whole record as of the last :meth:`take` (what the ledger already has of it).
        self._taken: IntervalRecord | None = None
        #: Whether the device's sample at :attr:`first` closed an increment (time observed up
        #: to it, booked in the interval before): set by the recorder.
        self.closing = False

    def take(self, interval_seconds: int) -> IntervalRecord | None:
        """What the ledger does not have yet: the whole bucket the first time, then what was
        added since the previous take (``None`` when nothing was), spanning from the previous
        take's end. The sums of the parts are exactly the whole's, milliseconds included, so an
        open interval written every few seconds (a checkpoint) ends up as if written once."""
        whole = self.record(interval_seconds)
        if self.closing and self._taken is None and whole.last_ms == whole.first_ms \
                and not whole.observed_ms and not whole.energy_mj:
            # Its one sample, on the interval's start, only closed the time before (a device
            # that stopped there): it spent no time in this interval, and a row of 0 hours
            # would count it in a window from here, its coverage 0.
            return None
        before, self._taken = self._taken, whole
        if before is None:  # (even an empty one: a device seen, if only lost, is counted)
            return whole
        if whole.observed_ms == before.observed_ms and whole.mem_samples == before.mem_samples \
                and whole.last_ms == before.last_ms:
            return None
        holders = {}
        for holder, share in whole.holders.items():
            old = before.holders.get(holder)
            if old != share:
                holders[holder] = Share(**_since(share, old, HOLDER_SUMS))
        return IntervalRecord(start=whole.start, dim=whole.dim, first_ms=before.last_ms,
                              last_ms=whole.last_ms, holders=holders,
                              **_since(whole, before, DEVICE_SUMS))

    def put(self, inc: Increment, holders: Split = NOBODY, share: float = 1.0,
            waiting: Mapping[object, str] | None = None, activity_method: str | None = None) -> None:
        """Add one increment; its holders' parts by ``holders`` (:func:`allsmi.fairshare.split`),
        each holder's allocated part booked under its reason in ``waiting`` (holder -> reason;
        a holder missing from it: ``unknown``; ``None``: not classified, nothing booked)."""
        _, begin, end, observed, allocated, busy, energy, idle, active = inc
        if end > self.last:
            self.last = end
        if begin < self.first:
            # The span starts where its earliest time does (an increment from the previous
            # interval's last sample starts at the boundary, before the first sample here), so
            # that the ledger's "only after what it holds" test sees all of it: after a restart
            # into a checkpointed minute, that time is refused rather than counted twice.
            self.first = max(float(self.start), begin)
        # The device's own sums, written out (weight 1).
        self.observed += observed
        if allocated is not None:
            self.allocated = (self.allocated or 0.0) + allocated
            self.billed = (self.billed or 0.0) + allocated * share
            self.attributed += observed
        if busy is not None:
            self.busy = (self.busy or 0.0) + busy
            self.used_billed = (self.used_billed or 0.0) + busy * share
            self.busy_observed += observed
        if energy is not None:
            self.energy = (self.energy or 0.0) + energy
        idle_part = None
        if idle is not None:
            self.idle = (self.idle or 0.0) + idle
            self.idle_billed = (self.idle_billed or 0.0) + idle * share
            if energy is not None and observed > 0:
                idle_part = min(1.0, idle / observed)
                self.idle_energy = (self.idle_energy or 0.0) + energy * idle_part
        elif allocated:  # held, but whether idle is unknown: not a known 0 (_Acc.add_allocated)
            self.idle_lost = True
        if active is not None:  # (add_active with weight 1, written out)
            self.active = (self.active or 0.0) + active * 1.0
            self.active_allocated = (self.active_allocated or 0.0) + (allocated or 0.0) * 1.0
            if allocated and activity_method is not None:
                mine = self.activity_method
                self.activity_method = activity_method if mine is None or mine == activity_method \
                    else MIXED
        alloc_weights, alloc_method, used_weights, usage_method = holders
        if not alloc_weights and not used_weights:
            return
        accs = self.holders
        if len(alloc_weights) == 1 and len(used_weights) == 1 \
                and alloc_weights[0][0] == used_weights[0][0]:
            # One holder (the common case): one lookup for everything, the additions of
            # add_allocated, add_used and add_active written out for speed (the recorder of a
            # replayed half day: 1.19 s of CPU instead of 1.25), each the same arithmetic in
            # the same order (tests/accounting/test_recorder_fastpath.py).
            (holder, weight), (_, used_weight) = alloc_weights[0], used_weights[0]
            acc = accs.get(holder)
            if acc is None:
                acc = accs[holder] = _Acc()
            # (add_wait and _method written out too: a replayed month puts 1.1 million)
            if waiting is not None and allocated:
                reason = _REASON_INDEX.get(waiting.get(holder, "unknown"), _UNKNOWN)
                seconds = allocated * weight
                waits = self.waits
                if waits is None:
                    waits = self.waits = [0.0] * len(WAITING_REASONS)
                waits[reason] += seconds
                waits = acc.waits
                if waits is None:
                    waits = acc.waits = [0.0] * len(WAITING_REASONS)
                waits[reason] += seconds
            for sums in (self, acc):  # (the device's and the holder's split methods)
                mine = sums.allocation_method
                if mine != alloc_method:
                    sums.allocation_method = alloc_method if mine is None else MIXED
                mine = sums.usage_method
                if mine != usage_method:
                    sums.usage_method = usage_method if mine is None else MIXED
            busy_part = 1.0 - (idle_part or 0.0)
            acc.observed += observed * weight
            if allocated is not None:
                held = allocated * weight
                acc.allocated = (acc.allocated or 0.0) + held
                acc.billed = (acc.billed or 0.0) + held * share
            if idle is not None:
                idled = idle * weight
                acc.idle = (acc.idle or 0.0) + idled
                acc.idle_billed = (acc.idle_billed or 0.0) + idled * share
                if idle_part is not None:
                    joules = energy * weight * idle_part  # type: ignore[operator]
                    acc.idle_energy = (acc.idle_energy or 0.0) + joules
                    acc.energy = (acc.energy or 0.0) + joules
            elif allocated and weight:
                acc.idle_lost = True
            if busy is not None:
                used = busy * used_weight
                acc.busy = (acc.busy or 0.0) + used
                acc.used_billed = (acc.used_billed or 0.0) + used * share
            if energy is not None:
                acc.energy = (acc.energy or 0.0) + energy * used_weight * busy_part
            if active is not None:
                acc.active = (acc.active or 0.0) + active * weight
                acc.active_allocated = (acc.active_allocated or 0.0) + (allocated or 0.0) * weight
                mine = acc.activity_method
                if activity_method is not None and mine != activity_method:
                    acc.activity_method = activity_method if mine is None else MIXED
            return
        if waiting is not None and allocated:
            index = _REASON_INDEX
            for holder, weight in alloc_weights:
                reason = index.get(waiting.get(holder, "unknown"), _UNKNOWN)
                seconds = allocated * weight
                self.add_wait(reason, seconds)
                acc = self.holders.get(holder)
                if acc is None:
                    acc = self.holders[holder] = _Acc()
                acc.add_wait(reason, seconds)
        self.allocation_method = _method(self.allocation_method, alloc_method)
        self.usage_method = _method(self.usage_method, usage_method)
        busy_part = 1.0 - (idle_part or 0.0)
        for holder, weight in alloc_weights:
            acc = accs.get(holder)
            if acc is None:
                acc = accs[holder] = _Acc()
            acc.add_allocated(observed, allocated, energy, idle, idle_part, weight, share)
            if active is not None:
                acc.add_active(active, allocated, weight, activity_method)
            acc.allocation_method = _method(acc.allocation_method, alloc_method)
        # Energy of idle time follows the allocated split; the rest follows use.
        for holder, weight in used_weights:
            acc = accs.get(holder)
            if acc is None:
                acc = accs[holder] = _Acc()
            acc.add_used(busy, energy, busy_part, weight, share)
            acc.usage_method = _method(acc.usage_method, usage_method)

    def record(self, interval_seconds: int) -> IntervalRecord:
        # Durations come from the monotonic clock and placement from the wall clock, which
        # drift apart by microseconds: never book more than the interval's length.
        # Energy is not a duration and is never capped (joules to millijoules).
        cap = interval_seconds * 1000
        # (round() of a float is an int already: a replayed month rounds 5 million values)
        ms = lambda v: min(cap, round(v * 1000.0))  # noqa: E731
        opt = lambda v: None if v is None else min(cap, round(v * 1000.0))  # noqa: E731
        mj = lambda v: None if v is None else round(v * 1000.0)  # noqa: E731
        # Each holder's share made positionally, its idle columns written out (the same values
        # as idle_values gives: a replayed month makes 200,000 shares and 122,000 records,
        # whose calls and keyword dictionaries were 4 % of its replay).
        holders = {}
        for h, a in self.holders.items():
            if a.idle_lost:
                idle: tuple[int | None, ...] = (None, None, None)
            else:
                energy = a.idle_energy
                idle = (min(cap, round((a.idle or 0.0) * 1000.0)),
                        min(cap, round((a.idle_billed or 0.0) * 1000.0)),
                        None if energy is None else round(energy * 1000.0))
            holders[h] = Share(ms(a.observed), opt(a.allocated), opt(a.busy), mj(a.energy),
                               opt(a.billed), *idle, opt(a.used_billed), a.allocation_method,
                               a.usage_method, *_activity_row(a, cap))
        # (positionally, in IntervalRecord's order: tests/accounting/test_recorder_fastpath.py)
        return IntervalRecord(
            self.start, self.dim, max(0, ms(self.first - self.start)),
            max(0, ms(self.last - self.start)), ms(self.observed), opt(self.allocated),
            opt(self.busy), ms(self.busy_observed), mj(self.energy), self.mem_sum,
            self.mem_samples, self.mem_peak, holders, opt(self.billed),
            *self.idle_values(ms, mj), opt(self.used_billed), self.allocation_method,
            self.usage_method, ms(self.attributed), *_activity_row(self, cap))


#: The waiting columns of an accumulator that booked no waiting time, as a row.
_NO_WAIT_ROW = (None,) * len(WAIT_COLUMNS)


def _activity_row(acc: _Acc, cap: int) -> tuple[int | str | None, ...]:
    """``acc``'s activity columns as stored (ledger.schema.ACTIVITY_COLUMNS, the last fields of
    :class:`Share` and of :class:`IntervalRecord`, in their order), durations in ms capped at
    ``cap``: written out, each wait converted in one comprehension, not a call each."""
    active, allocated, waits = acc.active, acc.active_allocated, acc.waits
    return (None if active is None else min(cap, round(active * 1000.0)),
            None if allocated is None else min(cap, round(allocated * 1000.0)),
            acc.activity_method,
            *(_NO_WAIT_ROW if waits is None else [min(cap, round(w * 1000.0)) for w in waits]))

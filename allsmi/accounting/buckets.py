"""The recorder's accumulating intervals: one device's increments over one ledger interval,
and each holder's share of them (floats until written, then milliseconds and millijoules).

Each increment is split twice among the holders (:mod:`allsmi.fairshare`): its allocated and
idle time, and the energy of its idle part, by the allocated weights; its busy time and the
energy of the rest by the used weights. Each row also keeps the method of each split
(``mixed`` when the interval saw more than one).

This is the ledger's hot path (every device, every cycle), so the classes use slots and the
device's own sums are added inline; the recorder's results are checked against a plain
re-computation in tests/accounting/test_recorder_fastpath.py.
"""

from __future__ import annotations

from allsmi.accounting.ledger import Dim, Holder, IntervalRecord, Share
from allsmi.fairshare import MIXED, NOBODY, Split
from allsmi.usage import Increment


def _method(mine: str | None, method: str) -> str:
    """The method of a row so far, with one more increment split by ``method``."""
    return method if mine is None or mine == method else MIXED


class _Acc:
    """Sums of one device's (or one holder's) increments over an interval."""

    __slots__ = ("observed", "allocated", "busy", "energy", "billed", "idle", "idle_billed",
                 "idle_energy", "used_billed", "allocation_method", "usage_method")

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


class Bucket(_Acc):
    """One device's accumulating interval."""

    __slots__ = ("start", "dim", "first", "last", "busy_observed", "mem_sum", "mem_samples",
                 "mem_peak", "holders")

    def __init__(self, start: int, dim: Dim, when: float) -> None:
        super().__init__()
        self.start = start
        self.dim = dim
        self.first = when
        self.last = when
        self.busy_observed = 0.0
        self.mem_sum: int | None = None
        self.mem_samples = 0
        self.mem_peak: int | None = None
        self.holders: dict[Holder, _Acc] = {}

    def put(self, inc: Increment, holders: Split = NOBODY, share: float = 1.0) -> None:
        """Add one increment; its holders' parts by ``holders`` (:func:`allsmi.fairshare.split`)."""
        _, _, end, observed, allocated, busy, energy, idle = inc
        if end > self.last:
            self.last = end
        # The device's own sums, written out (weight 1).
        self.observed += observed
        if allocated is not None:
            self.allocated = (self.allocated or 0.0) + allocated
            self.billed = (self.billed or 0.0) + allocated * share
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
        alloc_weights, alloc_method, used_weights, usage_method = holders
        if not alloc_weights and not used_weights:
            return
        self.allocation_method = _method(self.allocation_method, alloc_method)
        self.usage_method = _method(self.usage_method, usage_method)
        accs = self.holders
        busy_part = 1.0 - (idle_part or 0.0)
        if len(alloc_weights) == 1 and len(used_weights) == 1 \
                and alloc_weights[0][0] == used_weights[0][0]:
            # One holder (the common case): one lookup for both halves.
            (holder, weight), (_, used_weight) = alloc_weights[0], used_weights[0]
            acc = accs.get(holder)
            if acc is None:
                acc = accs[holder] = _Acc()
            acc.add_allocated(observed, allocated, energy, idle, idle_part, weight, share)
            acc.add_used(busy, energy, busy_part, used_weight, share)
            acc.allocation_method = _method(acc.allocation_method, alloc_method)
            acc.usage_method = _method(acc.usage_method, usage_method)
            return
        for holder, weight in alloc_weights:
            acc = accs.get(holder)
            if acc is None:
                acc = accs[holder] = _Acc()
            acc.add_allocated(observed, allocated, energy, idle, idle_part, weight, share)
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
        ms = lambda v: min(cap, int(round(v * 1000.0)))  # noqa: E731
        opt = lambda v: None if v is None else ms(v)  # noqa: E731
        mj = lambda v: None if v is None else int(round(v * 1000.0))  # noqa: E731
        return IntervalRecord(
            start=self.start, dim=self.dim,
            first_ms=max(0, ms(self.first - self.start)), last_ms=max(0, ms(self.last - self.start)),
            observed_ms=ms(self.observed), allocated_ms=opt(self.allocated), busy_ms=opt(self.busy),
            busy_observed_ms=ms(self.busy_observed), energy_mj=mj(self.energy),
            mem_sum=self.mem_sum, mem_samples=self.mem_samples, mem_peak=self.mem_peak,
            billed_ms=opt(self.billed), idle_ms=opt(self.idle), idle_billed_ms=opt(self.idle_billed),
            idle_energy_mj=mj(self.idle_energy), used_billed_ms=opt(self.used_billed),
            allocation_method=self.allocation_method, usage_method=self.usage_method,
            holders={h: Share(ms(a.observed), opt(a.allocated), opt(a.busy), mj(a.energy),
                              opt(a.billed), opt(a.idle), opt(a.idle_billed), mj(a.idle_energy),
                              opt(a.used_billed), a.allocation_method, a.usage_method)
                     for h, a in self.holders.items()})

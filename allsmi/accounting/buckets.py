"""The recorder's accumulating intervals: one device's increments over one ledger interval,
and each holder's share of them (floats until written, then milliseconds and millijoules).

This is the ledger's hot path (every device, every cycle), so the classes use slots, the
device's own sums are added inline, and the holders' accumulators are found once per holder
set rather than looked up per increment. The arithmetic is operation for operation that of
:meth:`_Acc.add` with the device's own weight (1, which is exact); the recorder's results are
checked against a plain re-computation in tests/accounting/test_recorder_fastpath.py.
"""

from __future__ import annotations

from allsmi.accounting.ledger import Dim, Holder, IntervalRecord, Share
from allsmi.accounting.ledgerschema import DEVICE_SUMS, HOLDER_SUMS
from allsmi.usage import Increment, Weights


class _Acc:
    """Sums of one device's (or one holder's) increments over an interval."""

    __slots__ = ("observed", "allocated", "busy", "energy", "billed", "idle", "idle_billed",
                 "idle_energy", "idle_lost")

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
        self.idle_lost = False
        """Whether some held time had an unknown idleness (a device that reports no
        utilization): the idle sums are then unknown, never the known part alone."""

    def add(self, observed: float, allocated: float | None, busy: float | None,
            energy: float | None, idle: float | None, idle_part: float | None,
            weight: float, share: float) -> None:
        """Add ``weight`` of an increment; ``idle_part`` is min(1, idle / observed) when the
        increment has energy, an idle time and a duration (else ``None``)."""
        self.observed += observed * weight
        if allocated is not None:
            held = allocated * weight
            self.allocated = (self.allocated or 0.0) + held
            self.billed = (self.billed or 0.0) + held * share
        if busy is not None:
            self.busy = (self.busy or 0.0) + busy * weight
        if energy is not None:
            self.energy = (self.energy or 0.0) + energy * weight
        if idle is not None:
            idled = idle * weight
            self.idle = (self.idle or 0.0) + idled
            self.idle_billed = (self.idle_billed or 0.0) + idled * share
            if idle_part is not None:
                self.idle_energy = (self.idle_energy or 0.0) + energy * weight * idle_part  # type: ignore[operator]
        elif allocated:  # held, but whether idle is unknown: not a known 0
            self.idle_lost = True

    def idle_values(self, ms, mj) -> tuple[int | None, int | None, int | None]:  # type: ignore[no-untyped-def]
        """(idle_ms, idle_billed_ms, idle_energy_mj) as stored: all unknown once any held time's
        idleness was; otherwise the known sums, 0 where no held time was seen (time not held,
        or held by holders unknown, is idle for none of its known-allocated time)."""
        if self.idle_lost:
            return None, None, None
        return ms(self.idle or 0.0), ms(self.idle_billed or 0.0), mj(self.idle_energy)


def _since(now: object, before: object | None,
           columns: tuple[tuple[str, str], ...]) -> dict[str, int | None]:
    """Each of ``columns`` of ``now`` less what ``before`` had (a MAX is the new maximum; an
    unknown stays unknown, so an idle time that became unknown makes the row's unknown)."""
    out: dict[str, int | None] = {}
    for name, agg in columns:
        value = getattr(now, name)
        prev = None if before is None else getattr(before, name)
        out[name] = value if value is None or prev is None or agg == "MAX" else value - prev
    return out


class Bucket(_Acc):
    """One device's accumulating interval."""

    __slots__ = ("start", "dim", "first", "last", "busy_observed", "mem_sum", "mem_samples",
                 "mem_peak", "holders", "_weights", "_accs", "_taken", "attributed")

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
        #: The holder set of the previous increment and its accumulators, in its order: while
        #: the holders do not change (the same cached tuple), no lookup per increment.
        self._weights: Weights = ()
        self._accs: list[_Acc] = []
        #: The whole record as of the last :meth:`take` (what the ledger already has of it).
        self._taken: IntervalRecord | None = None

    def take(self, interval_seconds: int) -> IntervalRecord | None:
        """What the ledger does not have yet: the whole bucket the first time, then what was
        added since the previous take (``None`` when nothing was), spanning from the previous
        take's end. The sums of the parts are exactly the whole's, milliseconds included, so an
        open interval written every few seconds (a checkpoint) ends up as if written once."""
        whole = self.record(interval_seconds)
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

    def put(self, inc: Increment, holders: Weights, share: float = 1.0) -> None:
        _, _, end, observed, allocated, busy, energy, idle = inc
        if end > self.last:
            self.last = end
        # _Acc.add with weight 1 (x * 1.0 is x exactly), written out.
        self.observed += observed
        if allocated is not None:
            self.allocated = (self.allocated or 0.0) + allocated
            self.billed = (self.billed or 0.0) + allocated * share
            self.attributed += observed
        if busy is not None:
            self.busy = (self.busy or 0.0) + busy
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
        elif allocated:  # held, but whether idle is unknown: not a known 0 (_Acc.add)
            self.idle_lost = True
        if not holders:
            return
        if holders is not self._weights:
            accs = []
            for holder, _ in holders:
                acc = self.holders.get(holder)
                if acc is None:
                    acc = self.holders[holder] = _Acc()
                accs.append(acc)
            self._weights, self._accs = holders, accs
        for (_, weight), acc in zip(holders, self._accs):
            acc.add(observed, allocated, busy, energy, idle, idle_part, weight, share)

    def record(self, interval_seconds: int) -> IntervalRecord:
        # Durations come from the monotonic clock and placement from the wall clock, which
        # drift apart by microseconds: never book more than the interval's length.
        # Energy is not a duration and is never capped (joules to millijoules).
        cap = interval_seconds * 1000
        ms = lambda v: min(cap, int(round(v * 1000.0)))  # noqa: E731
        opt = lambda v: None if v is None else ms(v)  # noqa: E731
        mj = lambda v: None if v is None else int(round(v * 1000.0))  # noqa: E731
        idle_ms, idle_billed_ms, idle_energy_mj = self.idle_values(ms, mj)
        return IntervalRecord(
            start=self.start, dim=self.dim,
            first_ms=max(0, ms(self.first - self.start)), last_ms=max(0, ms(self.last - self.start)),
            observed_ms=ms(self.observed), allocated_ms=opt(self.allocated), busy_ms=opt(self.busy),
            busy_observed_ms=ms(self.busy_observed), energy_mj=mj(self.energy),
            mem_sum=self.mem_sum, mem_samples=self.mem_samples, mem_peak=self.mem_peak,
            billed_ms=opt(self.billed), idle_ms=idle_ms, idle_billed_ms=idle_billed_ms,
            idle_energy_mj=idle_energy_mj, attributed_ms=ms(self.attributed),
            holders={h: Share(ms(a.observed), opt(a.allocated), opt(a.busy), mj(a.energy),
                              opt(a.billed), *a.idle_values(ms, mj))
                     for h, a in self.holders.items()})

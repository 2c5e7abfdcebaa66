"""The recorder's caches and inlined sums change no result.

The recorder caches per device what does not change between cycles (its Dim, its holder
weights while the holders are the same, the billing shares while the partition layout is the
same, its bucket) and adds the device's own sums inline (allsmi/accounting/buckets.py). Here
the records it writes are compared, field for field, with a plain re-computation written the
way the recorder first was: holder_weights, billing_shares and own_memory every cycle, a
weighted add per device and per holder. The input is the simulated ``mixed`` node (MIG
partitions, processes, workloads) over an hour and a half of irregular sampling, with holders
coming and going, partitions re-declaring their share, labels changing, devices lost, vanished
and repeated, and samples without a monotonic time.
"""

from __future__ import annotations

import sqlite3

import dataclasses
import datetime as dt
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from allsmi.accounting.ledger.store import Dim, Holder, IntervalRecord, Share, labels_json
from allsmi.accounting.recorder import LedgerRecorder
from allsmi.accounting.shares import billing_shares, own_memory
from allsmi.backends.simulated import simulated_backends
from allsmi.config import parse_config
from allsmi.schema import (WAITING_REASONS, HolderWaiting, HostSample, ProcessSample, Snapshot,
                           Workload)
from allsmi.fairshare import NOBODY, Split, split
from allsmi.usage import Increment, UsageIntegrator, bridged_gap_seconds, split_board_energy

from .helpers import T0

VALID = ("ok", "degraded")
CONFIG = "[accounting]\nidle_threshold_percent = 20\n"


def plus(total: float | None, value: float | None) -> float | None:
    return total if value is None else (total or 0.0) + value


def method(mine: str | None, new: str) -> str:
    return new if mine in (None, new) else "mixed"


@dataclass
class Acc:
    observed: float = 0.0
    allocated: float | None = None
    busy: float | None = None
    energy: float | None = None
    billed: float | None = None
    idle: float | None = None
    idle_billed: float | None = None
    idle_energy: float | None = None
    used_billed: float | None = None
    allocation_method: str | None = None
    usage_method: str | None = None
    #: held time whose idleness is unknown: the idle sums are unknown
    unknown_idle: bool = False
    active: float | None = None
    active_allocated: float | None = None
    activity_method: str | None = None
    waits: dict[str, float] | None = None

    def add_activity(self, inc: Increment, alloc: float, source: str | None,
                     whole: bool = False) -> None:
        """Active time by the allocated weight (a holder's allocated time x the device's
        activity); the device's method only while it is held."""
        if inc.active_seconds is None:
            return
        self.active = plus(self.active, inc.active_seconds * alloc)
        self.active_allocated = plus(self.active_allocated, (inc.allocated_seconds or 0.0) * alloc)
        if source is not None and (not whole or inc.allocated_seconds):
            self.activity_method = method(self.activity_method, source)

    def wait(self, reason: str, seconds: float) -> None:
        self.waits = self.waits or {r: 0.0 for r in WAITING_REASONS}
        self.waits[reason if reason in WAITING_REASONS else "unknown"] += seconds

    def activity_ms(self, ms) -> dict:  # type: ignore[no-untyped-def, type-arg]
        out = {"active_ms": None if self.active is None else ms(self.active),
               "active_allocated_ms": None if self.active_allocated is None
               else ms(self.active_allocated),
               "activity_method": self.activity_method}
        for reason in WAITING_REASONS:
            out[f"wait_{reason}_ms"] = None if self.waits is None else ms(self.waits[reason])
        return out

    def add(self, inc: Increment, alloc: float, used: float, share: float,
            whole: bool = False) -> None:
        """``alloc`` of the allocated side, ``used`` of the used side of ``inc``."""
        self.observed += inc.observed_seconds * alloc
        if inc.allocated_seconds is not None:
            self.allocated = plus(self.allocated, inc.allocated_seconds * alloc)
            self.billed = plus(self.billed, inc.allocated_seconds * alloc * share)
        if inc.busy_seconds is not None:
            self.busy = plus(self.busy, inc.busy_seconds * used)
            self.used_billed = plus(self.used_billed, inc.busy_seconds * used * share)
        idle, energy = inc.idle_allocated_seconds, inc.energy_joules
        idle_part = None
        if idle is not None:
            self.idle = plus(self.idle, idle * alloc)
            self.idle_billed = plus(self.idle_billed, idle * alloc * share)
            if energy is not None and inc.observed_seconds > 0:
                idle_part = min(1.0, idle / inc.observed_seconds)
                self.idle_energy = plus(self.idle_energy, energy * alloc * idle_part)
                if not whole:
                    self.energy = plus(self.energy, energy * alloc * idle_part)
        elif inc.allocated_seconds is not None and inc.allocated_seconds > 0 and alloc > 0:
            self.unknown_idle = True
        if whole:  # the device's own energy, added once
            self.energy = plus(self.energy, energy)
        elif energy is not None:  # idle energy by the allocated weight, the rest by the used one
            self.energy = plus(self.energy, energy * used * (1.0 - (idle_part or 0.0)))

    def idle_ms(self, ms, mj) -> tuple:  # type: ignore[no-untyped-def, type-arg]
        if self.unknown_idle:
            return (None, None, None)
        return (ms(self.idle or 0.0), ms(self.idle_billed or 0.0), mj(self.idle_energy))


@dataclass
class PlainBucket(Acc):
    start: int = 0
    dim: Dim | None = None
    first: float = 0.0
    last: float = 0.0
    busy_observed: float = 0.0
    attributed: float = 0.0
    mem_sum: int | None = None
    mem_samples: int = 0
    mem_peak: int | None = None
    holders: dict[Holder, Acc] = field(default_factory=dict)

    def put(self, inc: Increment, holders: Split, share: float,
            waiting: dict[Holder, str] | None, source: str | None) -> None:
        self.last = max(self.last, inc.end)
        self.first = min(self.first, max(float(self.start), inc.start))
        self.add(inc, 1.0, 1.0, share, whole=True)
        self.add_activity(inc, 1.0, source, whole=True)
        if inc.busy_seconds is not None:
            self.busy_observed += inc.observed_seconds
        if inc.allocated_seconds is not None:
            self.attributed += inc.observed_seconds
        alloc, used = dict(holders.allocated), dict(holders.used)
        if alloc or used:
            self.allocation_method = method(self.allocation_method, holders.allocation_method)
            self.usage_method = method(self.usage_method, holders.usage_method)
        for holder in sorted(set(alloc) | set(used), key=lambda h: tuple(v or "" for v in h)):
            acc = self.holders.setdefault(holder, Acc())
            acc.add(inc, alloc.get(holder, 0.0), used.get(holder, 0.0), share)
            if holder in alloc:
                acc.add_activity(inc, alloc[holder], source)
            if waiting is not None and inc.allocated_seconds and holder in alloc:
                reason = waiting.get(holder, "unknown")
                acc.wait(reason, inc.allocated_seconds * alloc[holder])
                self.wait(reason, inc.allocated_seconds * alloc[holder])
            if holder in alloc:
                acc.allocation_method = method(acc.allocation_method, holders.allocation_method)
            if holder in used:
                acc.usage_method = method(acc.usage_method, holders.usage_method)

    def record(self, interval: int) -> IntervalRecord:
        cap = interval * 1000
        ms = lambda v: min(cap, int(round(v * 1000.0)))  # noqa: E731
        opt = lambda v: None if v is None else ms(v)  # noqa: E731
        mj = lambda v: None if v is None else int(round(v * 1000.0))  # noqa: E731
        assert self.dim is not None
        return IntervalRecord(
            start=self.start, dim=self.dim, first_ms=max(0, ms(self.first - self.start)),
            last_ms=max(0, ms(self.last - self.start)), observed_ms=ms(self.observed),
            allocated_ms=opt(self.allocated), busy_ms=opt(self.busy),
            busy_observed_ms=ms(self.busy_observed), energy_mj=mj(self.energy),
            mem_sum=self.mem_sum, mem_samples=self.mem_samples, mem_peak=self.mem_peak,
            billed_ms=opt(self.billed), idle_ms=self.idle_ms(ms, mj)[0],
            idle_billed_ms=self.idle_ms(ms, mj)[1], idle_energy_mj=self.idle_ms(ms, mj)[2],
            used_billed_ms=opt(self.used_billed),
            allocation_method=self.allocation_method, usage_method=self.usage_method,
            attributed_ms=ms(self.attributed), **self.activity_ms(ms),
            holders={h: Share(ms(a.observed), opt(a.allocated), opt(a.busy), mj(a.energy),
                              opt(a.billed), *a.idle_ms(ms, mj), opt(a.used_billed),
                              a.allocation_method, a.usage_method, **a.activity_ms(ms))
                     for h, a in self.holders.items()})


def plain_records(snapshots: list[Snapshot], interval: int, gap: float,
                  threshold: float) -> list[IntervalRecord]:
    """Every interval, recomputed without caches (snapshots whose wall clock never steps back)."""
    integrator = UsageIntegrator(gap, threshold)
    buckets: dict[tuple[str, int], PlainBucket] = {}
    dims: dict[str, Dim] = {}
    previous: dict[str, Split] = {}
    previous_waiting: dict[str, dict[Holder, str] | None] = {}
    sources: dict[str, str | None] = {}
    closing: set[tuple[str, int]] = set()  # (device, interval) whose first sample ended time
    for snapshot in snapshots:
        now = snapshot.unix_time
        current = int(now // interval * interval)
        shares = billing_shares(snapshot.devices) if any(d.parent for d in snapshot.devices) else {}
        memory = own_memory(snapshot.devices)
        holders: dict[str, Split] = {}
        waitings: dict[str, dict[Holder, str] | None] = {}
        seen = {}
        for dev in snapshot.devices:
            dim = Dim(dev.id, snapshot.host.hostname, dev.vendor, dev.name or "", dev.parent or "",
                      dev.resource_group or "", labels_json(dev.labels))
            dims[dev.id] = dim
            seen[dev.id] = dev
            bucket = buckets.get((dev.id, current))
            if bucket is None:
                bucket = buckets[(dev.id, current)] = PlainBucket(start=current, dim=dim,
                                                                  first=now, last=now)
            bucket.last = max(bucket.last, now)
            if dev.health in VALID:
                if dev.processes or dev.workloads:
                    holders[dev.id] = split(dev)
                    waitings[dev.id] = None if dev.waiting is None else {
                        Holder(w.user, w.namespace, w.pod, w.job_id): w.reason
                        for w in dev.waiting}
                sources[dev.id] = dev.compute_active_source
                mem = memory.get(dev.id, dev.memory_used_bytes)
                if mem is not None:
                    bucket.mem_sum = (bucket.mem_sum or 0) + mem
                    bucket.mem_samples += 1
                    bucket.mem_peak = mem if bucket.mem_peak is None else max(bucket.mem_peak, mem)
        # a partitioned board's energy split among its partitions (allsmi.usage)
        for inc in split_board_energy(integrator.update(snapshot), snapshot.devices, shares):
            owners = holders.get(inc.device_id, previous.get(inc.device_id, NOBODY))
            waiting = waitings.get(inc.device_id) if inc.device_id in holders else \
                previous_waiting.get(inc.device_id) if inc.device_id in previous else None
            share = shares.get(inc.device_id, 1.0)
            closing.add((inc.device_id, current))
            part: Increment | None = inc
            while part is not None:
                start = int(part.start // interval * interval)
                if part.end > start + interval:
                    head, part = part.split(start + interval)
                else:
                    head, part = part, None
                bucket = buckets.get((inc.device_id, start))
                if bucket is None:
                    bucket = buckets[(inc.device_id, start)] = PlainBucket(
                        start=start, dim=dims[inc.device_id], first=head.start, last=head.start)
                bucket.put(head, owners, share, waiting, sources.get(inc.device_id))
        previous, previous_waiting = holders, waitings
    # an interval whose one sample, on its start, only ended the time before holds nothing
    records = {key: b.record(interval) for key, b in buckets.items()}
    return [r for key, r in records.items() if not (
        key in closing and r.first_ms == r.last_ms and not r.observed_ms and not r.energy_mj)]


def irregular_snapshots(cycles: int, seed: int) -> Iterator[Snapshot]:
    rng = random.Random(seed)
    act = random.Random(seed + 1)  # its own stream: the rest of the trouble stays as it was
    now = [T0 + 7.3]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for b in backends:
        b.open()
    users = ("ann", "bob", None)
    for _ in range(cycles):
        now[0] += rng.choice((1.0, 1.0, 0.7, 2.5, 13.0, 61.0, 0.0))
        out = []
        for dev in (d for b in backends for d in b.sample()):
            roll = rng.random()
            if roll < 0.01:
                continue
            if roll < 0.03:
                dev = dataclasses.replace(dev, health="lost")
            elif roll < 0.08:
                dev = dataclasses.replace(dev, processes=tuple(
                    ProcessSample(pid=10 + i, user=rng.choice(users), job_id=rng.choice(("7", None)),
                                  utilization_percent=rng.choice((None, 0.0, 30.0, 75.0)),
                                  memory_bytes=rng.choice((None, 2**30)))
                    for i in range(rng.randrange(3))))
            elif roll < 0.10:
                dev = dataclasses.replace(dev, processes=None, workloads=(
                    Workload("simulated", namespace="ns", pod=rng.choice(("a", "b")),
                             share=rng.choice((None, 0.25, 0.5))),))
            elif roll < 0.11:
                dev = dataclasses.replace(dev, labels={**dev.labels, "phase": rng.choice("xy")})
            elif roll < 0.12 and dev.parent:
                dev = dataclasses.replace(dev, partition_share=rng.choice((None, 0.25, 0.5)))
            if act.random() < 0.5:  # activity and what its holders waited on, or not known
                dev = dataclasses.replace(
                    dev, compute_active_percent=act.choice((None, 0.0, 20.0, 95.0)),
                    compute_active_source=act.choice(("sm_active", "gfx_busy")),
                    waiting=act.choice((None, (), tuple(
                        HolderWaiting(act.choice(WAITING_REASONS), "", user=act.choice(users),
                                      job_id=act.choice(("7", None)))
                        for _ in range(act.randrange(3))))))
            out.append(dev)
            if rng.random() < 0.003:
                out.append(dataclasses.replace(dev, processes=()))  # the same id twice
        yield Snapshot(timestamp=dt.datetime.fromtimestamp(now[0], dt.timezone.utc),
                       host=HostSample("node1"), devices=tuple(out),
                       monotonic=None if rng.random() < 0.05 else now[0] - T0)


@pytest.mark.long(11)
def test_recorder_writes_what_the_plain_computation_gives(tmp_path: Path) -> None:
    snapshots = list(irregular_snapshots(1200, seed=5))
    # Whole intervals only (no checkpoints of the minute in progress), to compare record for
    # record; test_checkpoints_store_exactly_what_whole_intervals_do covers the checkpoints.
    cfg = parse_config(CONFIG + "[ledger]\ncheckpoint_seconds = 0\n")
    recorder = LedgerRecorder(tmp_path / "ledger.db", cfg)
    written: list[IntervalRecord] = []
    real_write = recorder.ledger.write

    def spy(records: list[IntervalRecord], *args: object, **kwargs: object) -> int:
        written.extend(records)
        return real_write(records, *args, **kwargs)

    recorder.ledger.write = spy  # type: ignore[method-assign]
    for s in snapshots:
        recorder.on_snapshot(s)
    recorder.close()
    assert recorder.write_errors == 0 and recorder.last_error is None
    gap = bridged_gap_seconds(cfg.interval_seconds)
    want = plain_records(snapshots, recorder.interval, gap, 20.0)
    key = lambda r: (r.start, r.dim.device_id)  # noqa: E731
    got = sorted(written, key=key)
    want.sort(key=key)
    assert [key(r) for r in got] == [key(r) for r in want]
    for g, w in zip(got, want):
        assert g == w, (g, w)
    assert sum(len(r.holders) for r in got) > 1000  # the holders' shares were compared too
    assert any(r.billed_ms != r.allocated_ms for r in got)  # and partition billing


def test_checkpoints_store_exactly_what_whole_intervals_do(tmp_path: Path) -> None:
    """Issue 19 item 10: the minute in progress written every 5 s in parts (deltas) adds up,
    to the millisecond and the millijoule, to the same rows as whole intervals written once."""
    snapshots = list(irregular_snapshots(700, seed=7))
    tables = {}
    for every in (0, 5):
        db = tmp_path / f"ledger-{every}.db"
        recorder = LedgerRecorder(db, parse_config(CONFIG + f"[ledger]\ncheckpoint_seconds = {every}\n"))
        for s in snapshots:
            recorder.on_snapshot(s)
        recorder.close()
        assert recorder.write_errors == 0 and recorder.refused_intervals == 0
        conn = sqlite3.connect(db)
        tables[every] = {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3").fetchall()
            for table in ("intervals", "quarters")}
        for table in ("holder_intervals", "holder_quarters"):  # (hids: in order of appearance)
            tables[every][table] = sorted(
                (r[:2] + r[3:] for r in conn.execute(
                    f"SELECT t.*, h.user, h.namespace, h.pod, h.job FROM {table} t "
                    "JOIN holders h ON h.hid = t.hid")), key=repr)
        conn.close()
    assert len(tables[0]["intervals"]) > 1000
    for table, want in tables[0].items():
        got = tables[5][table]
        if table == "intervals":  # (first_ms: a part's span starts where the previous ended)
            got = [r[:3] + r[4:] for r in got]
            want = [r[:3] + r[4:] for r in want]
        assert got == want, table


def test_a_record_and_its_shares_are_made_in_their_fields_order() -> None:
    """Bucket.record builds its record and shares positionally: their fields are in the order
    it writes them (the activity columns last), and each field has the value the plain
    computation gives, even where neighbours are equal elsewhere (every figure its own)."""
    from dataclasses import fields

    from allsmi.accounting.buckets import Bucket
    from allsmi.accounting.ledger.schema import ACTIVITY_COLUMNS, Dim
    assert [f.name for f in fields(Share)] == [
        "observed_ms", "allocated_ms", "busy_ms", "energy_mj", "billed_ms", "idle_ms",
        "idle_billed_ms", "idle_energy_mj", "used_billed_ms", "allocation_method",
        "usage_method", *ACTIVITY_COLUMNS]
    assert [f.name for f in fields(IntervalRecord)] == [
        "start", "dim", "first_ms", "last_ms", "observed_ms", "allocated_ms", "busy_ms",
        "busy_observed_ms", "energy_mj", "mem_sum", "mem_samples", "mem_peak", "holders",
        "billed_ms", "idle_ms", "idle_billed_ms", "idle_energy_mj", "used_billed_ms",
        "allocation_method", "usage_method", "attributed_ms", *ACTIVITY_COLUMNS]
    bucket = Bucket(900, Dim("GPU-a", "h", "nvidia", "H100", "", "g", "{}"), 900.5)
    bucket.last, bucket.mem_sum, bucket.mem_samples, bucket.mem_peak = 960.25, 7, 2, 5
    values = iter(range(1, 100))
    # (a holder's sums: any accumulator; a bucket is one)
    for acc in (bucket, bucket.holders.setdefault(Holder("ann"), Bucket(0, bucket.dim, 0.0))):
        for name in ("observed", "allocated", "busy", "energy", "billed", "idle", "idle_billed",
                     "idle_energy", "used_billed", "active", "active_allocated"):
            setattr(acc, name, next(values) / 1000.0)
        acc.allocation_method, acc.usage_method, acc.activity_method = "a", "u", "m"
        acc.waits = [next(values) / 1000.0 for _ in range(6)]
    bucket.busy_observed, bucket.attributed = next(values) / 1000.0, next(values) / 1000.0
    record = bucket.record(60)
    share = record.holders[Holder("ann")]
    got = [getattr(record, f.name) for f in fields(IntervalRecord) if f.name not in (
        "start", "dim", "holders", "first_ms", "last_ms", "mem_sum", "mem_samples", "mem_peak")]
    assert len(set(got)) == len(got)  # (every figure its own: a swap would show)
    assert (record.first_ms, record.last_ms, record.mem_sum, record.mem_peak) == (500, 60000, 7, 5)
    assert record.observed_ms == 1 and record.wait_unknown_ms == 17 and record.attributed_ms == 36
    assert record.active_ms == 10 and record.activity_method == "m"
    assert [getattr(share, f.name) for f in fields(Share)] == [
        18, 19, 20, 21, 22, 23, 24, 25, 26, "a", "u", 27, 28, "m", 29, 30, 31, 32, 33, 34]


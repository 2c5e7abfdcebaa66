"""Turning the collector's snapshots into ledger intervals.

The recorder feeds every snapshot to the shared :class:`UsageIntegrator`,
splits each increment at interval boundaries (:meth:`Increment.split`) and
adds it to the bucket of its device and interval. A bucket is written once
the snapshot time passes its end (no later increment can touch it: the next
increment of every device starts at this snapshot). All buckets completed by
one snapshot go to the ledger in one transaction, so a crash loses at most
the interval in progress; :meth:`LedgerRecorder.close` writes the partial
interval too, and a restart within the same interval continues it.

Attribution to holders (users, pods, jobs): each increment is split among the holders of
the device at the end of the increment (at its start, if it ended with none), twice (see
:mod:`allsmi.fairshare`): allocated time by declared share, busy time and energy by measured
activity. Shares of holders that are nobody in particular (no user, pod or job
known) and of time with no holder are not attributed: an export grouped by user, namespace,
pod or job shows them on a row with those keys empty, so the holder rows always add up to the
device totals.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Iterable

from allsmi.accounting.buckets import Bucket
from allsmi.accounting.ledger.store import Dim, IntervalRecord, Ledger, labels_json
from allsmi.accounting.placement import Placement
from allsmi.accounting.recorderhold import ClockHold
from allsmi.accounting.recorderwrite import RecorderWrites
from allsmi.accounting.settings import LedgerSettings, ledger_settings
from allsmi.accounting.shares import billing_shares, own_memory, partition_layout
from allsmi.config import Config
from allsmi.fairshare import NOBODY, Holder, Split, split, waiting_by_holder
from allsmi.schema import DeviceSample, Snapshot
from allsmi.usage import (Increment, UsageIntegrator, bridged_gap_seconds, idle_threshold_percent,
                          split_board_energy)

if TYPE_CHECKING:
    from typing import Callable

log = logging.getLogger(__name__)

_VALID = ("ok", "degraded")
#: Completed intervals kept in memory while the ledger cannot be written (a full disk, a
#: locked or read-only database), retried on every later write: 100,000 device-intervals is
#: a day of one-minute intervals for about 70 devices (some 30 MB). Beyond it the oldest are
#: dropped, counted in ``dropped_intervals`` and logged.
MAX_UNWRITTEN = 100_000
#: How long :meth:`LedgerRecorder.close` keeps retrying intervals the ledger could not take
#: (each attempt waits SQLite's 2 s for a lock), a pause between attempts: well within the
#: 30 s systemd and Kubernetes give a stopping process.
CLOSE_RETRY_SECONDS = 10.0
CLOSE_RETRY_PAUSE_SECONDS = 0.5

_UNSET = object()


class _Device:
    """What the recorder keeps of one device between cycles (facts that rarely change)."""

    __slots__ = ("facts", "labels", "dim", "held", "held_cycle", "bucket", "seen", "waiting",
                 "activity_method", "held_of", "waiting_of")

    def __init__(self, facts: tuple[object, ...], labels: dict[str, str], dim: Dim) -> None:
        self.facts = facts
        self.labels = labels
        self.dim = dim
        #: The holders (split(dev)) in the last cycle the device was valid and held, and that cycle.
        self.held: Split = NOBODY
        self.held_cycle = -2
        #: What ``held`` was split from: the device's (processes, workloads, parent), the
        #: processes as the object they were (a backend that keeps a job's processes from one
        #: sample to the next hands the same tuple back; split is a function of these alone).
        self.held_of: tuple[object, ...] | None = None
        #: Each holder's waiting reason in that cycle (None: not classified), and what the
        #: device's activity figure measured.
        self.waiting: dict[Holder, str] | None = None
        #: The ``DeviceSample.waiting`` that ``waiting`` was made from (equal classifications,
        #: cycle after cycle, are made into the same dict once).
        self.waiting_of: object = _UNSET
        self.activity_method: str | None = None
        self.bucket: Bucket | None = None
        self.seen = 0


class LedgerRecorder(RecorderWrites):
    """Records snapshots into the ledger at ``path``; subscribe :meth:`on_snapshot` to a collector.

    ``config`` supplies the ``[ledger]`` settings (interval, retention, max
    gap); ``path`` always wins over ``ledger.path``. Raises
    :class:`~allsmi.accounting.ledger.store.LedgerError` when the file cannot be
    opened or another process records into it, and
    :class:`~allsmi.config.ConfigError` for a bad ``[ledger]`` table.
    """

    def __init__(self, path: str | os.PathLike[str], config: Config, *,
                 settings: LedgerSettings | None = None, max_gap_seconds: float | None = None) -> None:
        self.settings = settings or ledger_settings(config, path_flag=path)
        self.interval = self.settings.interval_seconds
        self.ledger = self._open(path)
        # The gap bridged comes from the sampling interval (allsmi.usage.bridged_gap_seconds),
        # computed by the command that knows it; the same as the exporter's counters.
        gap = max_gap_seconds if max_gap_seconds is not None else bridged_gap_seconds(
            config.interval_seconds, self.settings.max_gap_seconds)
        self.integrator = UsageIntegrator(gap, idle_threshold_percent(config))
        #: Buckets of the interval in progress, by device; and of earlier intervals, by
        #: (device, start), until the snapshot time passes their end.
        self._current: dict[str, Bucket] = {}
        self._current_start: int | None = None
        self._older: dict[tuple[str, int], Bucket] = {}
        #: Per device: its Dim, cached holder weights, current bucket (see _Device).
        self._devices: dict[str, _Device] = {}
        self._cycle = 0
        #: billing_shares of the last partition layout seen (partition_layout), and that layout.
        self._layout: tuple[tuple[object, ...], ...] = ()
        self._shares: dict[str, float] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._init_writes()
        self._placement = Placement(self.interval)
        #: Placement time of the last checkpoint (see _checkpoint).
        self._checkpointed = float("-inf")
        #: The first snapshots, held while the wall clock may be far ahead (recorderhold).
        newest = getattr(self.ledger, "newest_time", None)  # (none: a replay's own store)
        newest = newest() if newest is not None else None
        modified = getattr(self.ledger, "last_modified", None)
        self.hold = ClockHold(max((t for t in (newest, modified) if t is not None), default=None),
                              self.interval, newest)
        #: The latest snapshot's monotonic time.
        self._steady: float | None = None

    def _open(self, path: str | os.PathLike[str]) -> Ledger:
        """The ledger the intervals are written to (a subclass that stores them elsewhere, the
        simulated bill's replay, opens none)."""
        return Ledger(path, interval_seconds=self.interval)

    def _trusted(self, now: float) -> float:
        """The time completed quarters are rolled up and old rows pruned by: the placement's
        trusted wall time, never past the clock hold's limit."""
        trusted = self._placement.trusted if self._placement.trusted is not None else now
        cap = self.hold.trusted_cap(self._steady)
        return trusted if cap is None else min(trusted, cap)

    def _open_since(self) -> int | None:
        """The start of the oldest interval whose parts may still be written (open buckets and
        unwritten records)."""
        starts = [start for _, start in self._older] + [r.start for r in self._unwritten]
        if self._current_start is not None:
            starts.append(self._current_start)
        return min(starts) if starts else None

    def _device(self, dev: DeviceSample, host: str, facts: tuple[object, ...]) -> _Device:
        """A new record of ``dev``, or one whose facts or labels changed: its Dim (labels as
        JSON) is built only then, not every cycle."""
        dim = Dim(dev.id, host, dev.vendor, dev.name or "", dev.parent or "",
                  dev.resource_group or "", labels_json(dev.labels))
        state = _Device(facts, dict(dev.labels), dim)
        old = self._devices.get(dev.id)
        if old is not None:  # who held it is not a fact of the Dim: keep it
            state.held, state.held_cycle = old.held, old.held_cycle
            state.waiting, state.activity_method = old.waiting, old.activity_method
            state.waiting_of = old.waiting_of
        self._devices[dev.id] = state
        return state

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Account one snapshot; write the intervals it completes. Never raises."""
        with self._lock:
            if self._closed:
                return
            try:
                self._admit(self.hold.admit, snapshot)
            except Exception as exc:  # a bug here must not stop the collector or the exporter
                self.last_error = str(exc)
                self.write_errors += 1
                log.exception("ledger: recording failed")

    def _admit(self, admit: "Callable[..., list[Snapshot]]", *args: Snapshot) -> None:
        """Record what the clock hold lets through (``admit``: its :meth:`ClockHold.admit` or
        :meth:`ClockHold.close`); its reason is ``last_error`` while it holds snapshots."""
        before = self.hold.reason
        admitted = admit(*args)
        if self.hold.reason is not None:
            self.last_error = self.hold.reason
        elif before is not None and self.last_error == before:
            self.last_error = None
        for snapshot in admitted:
            self._steady = snapshot.monotonic
            self._account(snapshot)

    def _older_bucket(self, device_id: str, dim: Dim, start: int, when: float) -> Bucket:
        bucket = self._older.get((device_id, start))
        if bucket is None:
            bucket = self._older[(device_id, start)] = Bucket(start, dim, when)
        return bucket

    def _place(self, snapshot: Snapshot) -> float:
        """Where ``snapshot`` goes on the ledger's time line (see :class:`Placement`)."""
        return self._placement.place(snapshot.unix_time, snapshot.monotonic)

    def _account(self, snapshot: Snapshot) -> None:
        now = self._place(snapshot)
        iv = self.interval
        current = int(now // iv * iv)
        if self._current_start is not None and current < self._current_start:
            # The clock stepped back: write what is held now; the ledger keeps only time that
            # starts after what it already has for an interval, so nothing is counted twice.
            self._flush_all()
        if current != self._current_start:
            # A new interval: every open bucket becomes an older one, complete once
            # the increments that straddle the boundary have been split into it.
            for dev_id, bucket in self._current.items():
                self._older[(dev_id, bucket.start)] = bucket
            self._current = {}
            self._current_start = current
        host = snapshot.host.hostname
        devices = snapshot.devices
        cur = self._current
        states = self._devices
        self._cycle = cycle = self._cycle + 1
        layout = partition_layout(devices)
        if layout:
            if layout != self._layout:
                self._layout, self._shares = layout, billing_shares(devices)
            shares = self._shares
            memory = own_memory(devices)
        else:
            shares = memory = {}
        for dev in devices:
            dev_id = dev.id
            facts = (host, dev.vendor, dev.name, dev.parent, dev.resource_group)
            state = states.get(dev_id)
            if state is None or state.facts != facts or state.labels != dev.labels:
                state = self._device(dev, host, facts)
            state.seen = cycle
            bucket = cur.get(dev_id)
            if bucket is None:
                bucket = cur[dev_id] = Bucket(current, state.dim, now)
            elif now > bucket.last:
                bucket.last = now
            state.bucket = bucket
            if dev.health in _VALID:
                if dev.processes or dev.workloads:
                    # Per cycle: the used split follows the processes' activity of this cycle
                    # (split again unless its processes are the very ones of the last split).
                    of = state.held_of
                    if of is None or of[0] is not dev.processes or of[1] != dev.workloads \
                            or of[2] != dev.parent:
                        state.held = split(dev)
                        state.held_of = (dev.processes, dev.workloads, dev.parent)
                    state.held_cycle = cycle
                    if dev.waiting != state.waiting_of:  # (the same entries: the same dict)
                        state.waiting = waiting_by_holder(dev)
                        state.waiting_of = dev.waiting
                state.activity_method = dev.compute_active_source
                mem = memory.get(dev_id, dev.memory_used_bytes) if memory else dev.memory_used_bytes
                if mem is not None:
                    bucket.mem_sum = (bucket.mem_sum or 0) + mem
                    bucket.mem_samples += 1
                    if bucket.mem_peak is None or mem > bucket.mem_peak:
                        bucket.mem_peak = mem
        held_since = cycle - 1
        incs: Iterable[Increment] = self.integrator.feed(devices, now, snapshot.monotonic,
                                                         snapshot.holders_unknown)
        if layout:  # a board's energy goes to its partitions' holders by their shares
            incs = split_board_energy(list(incs), devices, shares)
        for inc in incs:
            dev_id = inc[0]
            state = states[dev_id]
            # Held now (even by holders nobody knows): those; else the previous sample's.
            owners = state.held if state.held_cycle >= held_since else NOBODY
            waiting = state.waiting if owners is not NOBODY else None
            share = shares.get(dev_id, 1.0) if shares else 1.0
            state.bucket.closing = True  # type: ignore[union-attr]  # (its sample now ends one)
            if inc.start >= current:
                state.bucket.put(inc, owners, share, waiting,  # type: ignore[union-attr]
                                 state.activity_method)
                continue
            part: Increment | None = inc
            while part is not None:  # it straddles interval boundaries: split it there
                start = int(part.start // iv * iv)
                if part.end > start + iv:
                    head, part = part.split(start + iv)
                else:
                    head, part = part, None
                target = state.bucket if start == current else \
                    self._older_bucket(dev_id, state.dim, start, head.start)
                target.put(head, owners, share, waiting,  # type: ignore[union-attr]
                           state.activity_method)
        if len(states) > 2 * len(devices) + 64:  # devices gone for good (MIG reconfiguration)
            for gone in [key for key, state in states.items() if state.seen != cycle]:
                del states[gone]
        if self._older:
            done = sorted(((k[1], k[0]) for k, b in self._older.items() if b.start + iv <= now))
            self._write([self._older.pop((dev_id, start)) for start, dev_id in done],
                        self._trusted(now))
        self._checkpoint(now)

    def _checkpoint(self, now: float) -> None:
        """Every ``checkpoint_seconds``, write what the interval in progress holds so far, so
        that a crash (SIGKILL, OOM, power cut) loses seconds, not the minute. Not while
        earlier intervals wait to be written: they are retried first, a few seconds after a
        failure (:data:`~allsmi.accounting.recorderwrite.RETRY_SECONDS`), and checkpoints
        resume once they are written."""
        if self._unwritten and now >= self._retry_at:
            self._write_records([], self._trusted(now))
        every = self.settings.checkpoint_seconds
        if not every or not self._current or self._unwritten:
            return
        since = now - self._checkpointed
        if 0 <= since < every:
            return
        self._checkpointed = now
        self._write(sorted(self._current.values(), key=lambda b: b.dim.device_id),
                    self._trusted(now))

    def _keep(self, failed: list[IntervalRecord]) -> None:
        """Hold ``failed`` as the unwritten intervals, at most :data:`MAX_UNWRITTEN` (the oldest
        dropped whole, with every part of them)."""
        excess = len(failed) - MAX_UNWRITTEN
        if excess > 0:
            keys = sorted({(r.start, r.dim.device_id) for r in failed})
            excess = len(keys) - MAX_UNWRITTEN
            if excess > 0:
                gone = set(keys[:excess])
                failed = [r for r in failed if (r.start, r.dim.device_id) not in gone]
        self._unwritten = failed
        if excess > 0:
            self.dropped_intervals += excess
            log.error("ledger: %d interval(s) dropped: more than %d waited to be written",
                      excess, MAX_UNWRITTEN)

    def _flush_all(self) -> None:
        held = list(self._older.values()) + list(self._current.values())
        self._older, self._current, self._current_start = {}, {}, None
        if held or self._unwritten:
            last = self._trusted(max(
                [b.last for b in held] + [r.start + r.last_ms / 1000.0 for r in self._unwritten]))
            self._write(sorted(held, key=lambda b: (b.start, b.dim.device_id)), last)

    def close(self) -> None:
        """Write the interval in progress (a restart continues it) and close the ledger."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._admit(self.hold.close)  # snapshots still held: recorded as they are
                self._flush_all()
                # A lock held a few seconds more (a backup, the sqlite3 shell), a disk freed:
                # retried for a while before what is held is given up with the process (not
                # a record the ledger refused: it would be refused again).
                deadline = time.monotonic() + CLOSE_RETRY_SECONDS
                while self._unwritten and self.retry_may_pass and time.monotonic() < deadline:
                    time.sleep(CLOSE_RETRY_PAUSE_SECONDS)
                    self._write_records([], self._trusted(max(
                        r.start + r.last_ms / 1000.0 for r in self._unwritten)))
            except Exception as exc:
                self.last_error = str(exc)
                log.exception("ledger: writing the last interval failed")
            finally:
                if self._unwritten:
                    log.error("ledger: %d interval(s) could not be written before closing: %s",
                              len(self._unwritten), self.last_error)
                self.ledger.close()

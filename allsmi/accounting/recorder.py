"""Turning the collector's snapshots into ledger intervals.

The recorder feeds every snapshot to the shared :class:`UsageIntegrator`,
splits each increment at interval boundaries (:meth:`Increment.split`) and
adds it to the bucket of its device and interval. A bucket is written once
the snapshot time passes its end (no later increment can touch it: the next
increment of every device starts at this snapshot). All buckets completed by
one snapshot go to the ledger in one transaction, so a crash loses at most
the interval in progress; :meth:`LedgerRecorder.close` writes the partial
interval too, and a restart within the same interval continues it.

Attribution to users: the allocated, busy, energy and observed shares of an
increment are split equally among the processes on the device at the end of
the increment (at its start, if it ended with none). A user with two of three
processes gets two thirds. Shares of processes whose user is unknown, and of
intervals with no process, are not attributed to anyone: an export grouped by
user shows them on a row with an empty user, so the user rows always add up to
the device totals.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

from allsmi.accounting.ledger import Dim, IntervalRecord, Ledger, UserShare, labels_json
from allsmi.accounting.settings import LedgerSettings, ledger_settings
from allsmi.config import Config
from allsmi.schema import DeviceSample, Snapshot
from allsmi.usage import Increment, UsageIntegrator

log = logging.getLogger(__name__)

_VALID = ("ok", "degraded")


@dataclass
class _UserAcc:
    observed: float = 0.0
    allocated: float = 0.0
    busy: float | None = None
    energy: float | None = None


@dataclass
class _Bucket:
    """One device's accumulating interval (floats until written)."""

    start: int
    dim: Dim
    first: float
    last: float
    observed: float = 0.0
    allocated: float = 0.0
    busy: float | None = None
    busy_observed: float = 0.0
    energy: float | None = None
    mem_sum: int | None = None
    mem_samples: int = 0
    mem_peak: int | None = None
    users: dict[str, _UserAcc] = field(default_factory=dict)

    def touch(self, when: float) -> None:
        self.first = min(self.first, when)
        self.last = max(self.last, when)

    def add(self, inc: Increment, users: tuple[str | None, ...]) -> None:
        self.touch(inc.start)
        self.touch(inc.end)
        self.observed += inc.observed_seconds
        self.allocated += inc.allocated_seconds
        if inc.busy_seconds is not None:
            self.busy = (self.busy or 0.0) + inc.busy_seconds
            self.busy_observed += inc.observed_seconds
        if inc.energy_joules is not None:
            self.energy = (self.energy or 0.0) + inc.energy_joules
        if not users:
            return
        share = 1.0 / len(users)
        for user in users:
            if user is None:
                continue  # unknown owner: left unattributed
            acc = self.users.setdefault(user, _UserAcc())
            acc.observed += inc.observed_seconds * share
            acc.allocated += inc.allocated_seconds * share
            if inc.busy_seconds is not None:
                acc.busy = (acc.busy or 0.0) + inc.busy_seconds * share
            if inc.energy_joules is not None:
                acc.energy = (acc.energy or 0.0) + inc.energy_joules * share

    def record(self) -> IntervalRecord:
        ms = lambda v: int(round(v * 1000.0))  # noqa: E731
        opt = lambda v: None if v is None else ms(v)  # noqa: E731
        return IntervalRecord(
            start=self.start, dim=self.dim,
            first_ms=max(0, ms(self.first - self.start)), last_ms=max(0, ms(self.last - self.start)),
            observed_ms=ms(self.observed), allocated_ms=ms(self.allocated), busy_ms=opt(self.busy),
            busy_observed_ms=ms(self.busy_observed), energy_mj=opt(self.energy),
            mem_sum=self.mem_sum, mem_samples=self.mem_samples, mem_peak=self.mem_peak,
            users={u: UserShare(ms(a.observed), ms(a.allocated), opt(a.busy), opt(a.energy))
                   for u, a in self.users.items()})


def _users(dev: DeviceSample) -> tuple[str | None, ...]:
    return tuple(p.user for p in dev.processes)


class LedgerRecorder:
    """Records snapshots into the ledger at ``path``; subscribe :meth:`on_snapshot` to a collector.

    ``config`` supplies the ``[ledger]`` settings (interval, retention, max
    gap); ``path`` always wins over ``ledger.path``. Raises
    :class:`~allsmi.accounting.ledger.LedgerError` when the file cannot be
    opened or another process records into it, and
    :class:`~allsmi.config.ConfigError` for a bad ``[ledger]`` table.
    """

    def __init__(self, path: str | os.PathLike[str], config: Config, *,
                 settings: LedgerSettings | None = None) -> None:
        self.settings = settings or ledger_settings(config, path_flag=path)
        self.interval = self.settings.interval_seconds
        self.ledger = Ledger(path, interval_seconds=self.interval)
        self.integrator = UsageIntegrator(self.settings.max_gap_seconds)
        self._buckets: dict[tuple[str, int], _Bucket] = {}
        self._users: dict[str, tuple[str | None, ...]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.intervals_written = 0
        self.last_error: str | None = None

    def _bucket(self, dev: DeviceSample, dim: Dim, start: int, when: float) -> _Bucket:
        key = (dev.id, start)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(start, dim, when, when)
        return bucket

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Account one snapshot; write the intervals it completes. Never raises."""
        with self._lock:
            if self._closed:
                return
            try:
                self._account(snapshot)
            except Exception as exc:  # a full disk must not stop the collector or the exporter
                self.last_error = str(exc)
                log.exception("ledger: recording failed")

    def _account(self, snapshot: Snapshot) -> None:
        now = snapshot.unix_time
        iv = self.interval
        host = snapshot.host.hostname
        dims: dict[str, tuple[DeviceSample, Dim]] = {}
        for dev in snapshot.devices:
            dim = Dim(dev.id, host, dev.vendor, dev.name or "", dev.parent or "",
                      dev.resource_group or "", labels_json(dev.labels))
            dims[dev.id] = (dev, dim)
            bucket = self._bucket(dev, dim, int(now // iv * iv), now)
            bucket.touch(now)
            if dev.health in _VALID and dev.memory_used_bytes is not None:
                mem = int(dev.memory_used_bytes)
                bucket.mem_sum = (bucket.mem_sum or 0) + mem
                bucket.mem_samples += 1
                bucket.mem_peak = mem if bucket.mem_peak is None else max(bucket.mem_peak, mem)
        for inc in self.integrator.update(snapshot):
            dev, dim = dims[inc.device_id]
            users = _users(dev) or self._users.get(dev.id, ())
            part: Increment | None = inc
            while part is not None:
                start = int(part.start // iv * iv)
                if part.end > start + iv:
                    head, rest = part.split(start + iv)
                else:
                    head, rest = part, None
                self._bucket(dev, dim, start, head.start).add(head, users)
                part = rest
        self._users = {d.id: _users(d) for d in snapshot.devices if d.health in _VALID}
        done = [k for k, b in self._buckets.items() if b.start + iv <= now]
        if done:
            self._write([self._buckets.pop(k) for k in sorted(done, key=lambda k: (k[1], k[0]))], now)

    def _write(self, buckets: list[_Bucket], now: float) -> None:
        s = self.settings
        self.intervals_written += self.ledger.write(
            [b.record() for b in buckets], now, s.retention_days, s.rollup_retention_days)
        self.last_error = None

    def close(self) -> None:
        """Write the interval in progress (a restart continues it) and close the ledger."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._buckets:
                    last = max(b.last for b in self._buckets.values())
                    buckets = sorted(self._buckets.values(), key=lambda b: (b.start, b.dim.device_id))
                    self._buckets.clear()
                    self._write(buckets, last)
            except Exception as exc:
                self.last_error = str(exc)
                log.exception("ledger: writing the last interval failed")
            finally:
                self.ledger.close()

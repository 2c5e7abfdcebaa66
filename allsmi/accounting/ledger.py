"""The ledger: an embedded SQLite database of per-device usage per interval.

Layout (all quantities are integers, so sums are exact and exports are
byte-identical whatever order SQLite adds rows in):

``intervals``
    One row per (interval start, device): observed/allocated/busy seconds in
    milliseconds, energy in millijoules, memory samples in bytes, and the
    ``dim`` (host, vendor, model, resource group, group labels) in force
    then. The primary key ``(start, dev)`` is the "never twice" guarantee.
``user_intervals``
    The same interval's allocated/busy/energy/observed shares per user.
``billed_ms`` (every usage table)
    Allocated time weighted by the device's share of its physical device (1 for a
    whole device; a MIG instance's slice fraction; the parent of partitions the part no
    partition holds), so that a partitioned device is billed at most once per hour. ``NULL``
    where allocated time is unknown.
``quarters`` / ``user_quarters`` and ``days`` / ``user_days``
    Roll-ups per quarter hour and per UTC day, per ``dim`` (and user), so a
    month of a thousand devices exports in seconds. Quarter hours because
    every UTC offset in use is a multiple of 15 minutes: the day and month
    boundaries of any ``--tz`` fall on a quarter-hour boundary.
``pending``
    Roll-up units (tier, start) that received data since they were last
    rolled up; reads take the next finer level for them, so a late roll-up
    never loses data.
``users``
    User names, stored once; the user tables refer to them by number.

Each completed interval of every device is written in one transaction with
an upsert that only adds time that starts after what the row already holds,
so a restart inside an interval continues it, and nothing is counted twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from allsmi.accounting.settings import ROLLUP_SECONDS

SCHEMA_VERSION = 2
#: Ledgers of version 1 (no ``billed_ms``) are upgraded in place when opened for writing, and
#: read as if every device were whole (billed = allocated) when opened read-only.
OLD_SCHEMA_VERSIONS = (1,)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS devices (dev INTEGER PRIMARY KEY, device_id TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS dims (
    dim INTEGER PRIMARY KEY, dev INTEGER NOT NULL, host TEXT NOT NULL, vendor TEXT NOT NULL,
    model TEXT NOT NULL, parent TEXT NOT NULL, resource_group TEXT NOT NULL, labels TEXT NOT NULL,
    UNIQUE (dev, host, vendor, model, parent, resource_group, labels));
CREATE TABLE IF NOT EXISTS intervals (
    start INTEGER NOT NULL, dev INTEGER NOT NULL, dim INTEGER NOT NULL,
    first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER,
    busy_ms INTEGER, busy_observed_ms INTEGER NOT NULL, energy_mj INTEGER,
    mem_sum INTEGER, mem_samples INTEGER NOT NULL, mem_peak INTEGER, billed_ms INTEGER,
    PRIMARY KEY (start, dev)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS users (uid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS user_intervals (
    start INTEGER NOT NULL, dev INTEGER NOT NULL, uid INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER, busy_ms INTEGER,
    energy_mj INTEGER, billed_ms INTEGER, PRIMARY KEY (start, dev, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS quarters (
    start INTEGER NOT NULL, dim INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER,
    busy_ms INTEGER, busy_observed_ms INTEGER NOT NULL, energy_mj INTEGER,
    mem_sum INTEGER, mem_samples INTEGER NOT NULL, mem_peak INTEGER, billed_ms INTEGER,
    PRIMARY KEY (start, dim)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS user_quarters (
    start INTEGER NOT NULL, dim INTEGER NOT NULL, uid INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER, busy_ms INTEGER,
    energy_mj INTEGER, billed_ms INTEGER, PRIMARY KEY (start, dim, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS days (
    start INTEGER NOT NULL, dim INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER,
    busy_ms INTEGER, busy_observed_ms INTEGER NOT NULL, energy_mj INTEGER,
    mem_sum INTEGER, mem_samples INTEGER NOT NULL, mem_peak INTEGER, billed_ms INTEGER,
    PRIMARY KEY (start, dim)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS user_days (
    start INTEGER NOT NULL, dim INTEGER NOT NULL, uid INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER, busy_ms INTEGER,
    energy_mj INTEGER, billed_ms INTEGER, PRIMARY KEY (start, dim, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    tier INTEGER NOT NULL, start INTEGER NOT NULL, PRIMARY KEY (tier, start)) WITHOUT ROWID;
"""

_UPSERT_INTERVAL = """
INSERT INTO intervals (start, dev, dim, first_ms, last_ms, observed_ms, allocated_ms, busy_ms,
                       busy_observed_ms, energy_mj, mem_sum, mem_samples, mem_peak, billed_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (start, dev) DO UPDATE SET
    last_ms = excluded.last_ms,
    observed_ms = observed_ms + excluded.observed_ms,
    allocated_ms = CASE WHEN allocated_ms IS NULL AND excluded.allocated_ms IS NULL THEN NULL
                        ELSE coalesce(allocated_ms, 0) + coalesce(excluded.allocated_ms, 0) END,
    busy_ms = CASE WHEN busy_ms IS NULL AND excluded.busy_ms IS NULL THEN NULL
                   ELSE coalesce(busy_ms, 0) + coalesce(excluded.busy_ms, 0) END,
    busy_observed_ms = busy_observed_ms + excluded.busy_observed_ms,
    energy_mj = CASE WHEN energy_mj IS NULL AND excluded.energy_mj IS NULL THEN NULL
                     ELSE coalesce(energy_mj, 0) + coalesce(excluded.energy_mj, 0) END,
    mem_sum = CASE WHEN mem_sum IS NULL AND excluded.mem_sum IS NULL THEN NULL
                   ELSE coalesce(mem_sum, 0) + coalesce(excluded.mem_sum, 0) END,
    mem_samples = mem_samples + excluded.mem_samples,
    mem_peak = max(coalesce(mem_peak, excluded.mem_peak), coalesce(excluded.mem_peak, mem_peak)),
    billed_ms = CASE WHEN billed_ms IS NULL AND excluded.billed_ms IS NULL THEN NULL
                     ELSE coalesce(billed_ms, 0) + coalesce(excluded.billed_ms, 0) END
WHERE excluded.first_ms > intervals.last_ms
"""

_UPSERT_USER = """
INSERT INTO user_intervals (start, dev, uid, observed_ms, allocated_ms, busy_ms, energy_mj,
                            billed_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (start, dev, uid) DO UPDATE SET
    observed_ms = observed_ms + excluded.observed_ms,
    allocated_ms = CASE WHEN allocated_ms IS NULL AND excluded.allocated_ms IS NULL THEN NULL
                        ELSE coalesce(allocated_ms, 0) + coalesce(excluded.allocated_ms, 0) END,
    busy_ms = CASE WHEN busy_ms IS NULL AND excluded.busy_ms IS NULL THEN NULL
                   ELSE coalesce(busy_ms, 0) + coalesce(excluded.busy_ms, 0) END,
    energy_mj = CASE WHEN energy_mj IS NULL AND excluded.energy_mj IS NULL THEN NULL
                     ELSE coalesce(energy_mj, 0) + coalesce(excluded.energy_mj, 0) END,
    billed_ms = CASE WHEN billed_ms IS NULL AND excluded.billed_ms IS NULL THEN NULL
                     ELSE coalesce(billed_ms, 0) + coalesce(excluded.billed_ms, 0) END
"""

_SUMS = ("SUM(observed_ms), SUM(allocated_ms), SUM(busy_ms), SUM(busy_observed_ms), "
         "SUM(energy_mj), SUM(mem_sum), SUM(mem_samples), MAX(mem_peak), SUM(billed_ms)")
_USER_SUMS = "SUM(observed_ms), SUM(allocated_ms), SUM(busy_ms), SUM(energy_mj), SUM(billed_ms)"
_USAGE_TABLES = ("intervals", "user_intervals", "quarters", "user_quarters", "days", "user_days")
#: Roll-up tiers, coarsest first: (seconds, table). Each is rolled up from the next finer one.
TIERS: tuple[tuple[int, str], ...] = ((86400, "days"), (ROLLUP_SECONDS, "quarters"))
_RAW = "intervals"


class LedgerError(OSError):
    """The ledger cannot be opened or used; the message says why and where."""

    whole_database = True
    """Whether the failure concerns the whole database (locked, full, read-only, I/O error)
    rather than the records written."""


@dataclass(frozen=True)
class Dim:
    """What a device was, and where it belonged, during an interval."""

    device_id: str
    host: str
    vendor: str
    model: str
    parent: str
    resource_group: str
    labels: str
    """The group labels as canonical JSON (sorted keys)."""

    def label_map(self) -> dict[str, str]:
        """The group labels as a dict."""
        return dict(json.loads(self.labels)) if self.labels else {}


def labels_json(labels: Mapping[str, str]) -> str:
    """Canonical JSON for a label set (the form stored and compared)."""
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


@dataclass
class UserShare:
    """One user's share of an interval (integers: ms and mJ)."""

    observed_ms: int
    allocated_ms: int | None
    busy_ms: int | None
    energy_mj: int | None
    billed_ms: int | None = None


@dataclass
class IntervalRecord:
    """One completed (or, at shutdown, partial) interval of one device, ready to store."""

    start: int
    dim: Dim
    first_ms: int
    last_ms: int
    observed_ms: int
    allocated_ms: int | None
    busy_ms: int | None
    busy_observed_ms: int
    energy_mj: int | None
    mem_sum: int | None
    mem_samples: int
    mem_peak: int | None
    users: dict[str, UserShare] = field(default_factory=dict)
    billed_ms: int | None = None
    """Allocated time x the device's billing share (see the module docstring)."""


@dataclass
class Totals:
    """Sums over some intervals of one ``dim`` (and user): ms, mJ and bytes."""

    observed_ms: int = 0
    allocated_ms: int | None = None
    busy_ms: int | None = None
    busy_observed_ms: int = 0
    energy_mj: int | None = None
    mem_sum: int | None = None
    mem_samples: int = 0
    mem_peak: int | None = None
    billed_ms: int | None = None

    def add(self, row: tuple) -> None:  # type: ignore[type-arg]
        """Add one SQL result row in ``_SUMS`` order (or ``_USER_SUMS``)."""
        self.observed_ms += row[0] or 0
        if row[1] is not None:  # NULL: no backend could list processes (unknown, not 0)
            self.allocated_ms = (self.allocated_ms or 0) + row[1]
        if row[2] is not None:
            self.busy_ms = (self.busy_ms or 0) + row[2]
        if row[-1] is not None:
            self.billed_ms = (self.billed_ms or 0) + row[-1]
        if len(row) == 5:  # user rows: observed, allocated, busy, energy, billed
            if row[3] is not None:
                self.energy_mj = (self.energy_mj or 0) + row[3]
            return
        self.busy_observed_ms += row[3] or 0
        if row[4] is not None:
            self.energy_mj = (self.energy_mj or 0) + row[4]
        if row[5] is not None:
            self.mem_sum = (self.mem_sum or 0) + row[5]
        self.mem_samples += row[6] or 0
        if row[7] is not None:
            self.mem_peak = row[7] if self.mem_peak is None else max(self.mem_peak, row[7])


def _create_private(path: Path) -> bool:
    """Create ``path`` empty with mode 0600 unless it exists; True when created."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


class Ledger:
    """A ledger file, opened for writing (one writer, enforced by a lock) or read-only."""

    def __init__(self, path: str | os.PathLike[str], *, interval_seconds: int | None = None,
                 readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._dev_ids: dict[str, int] = {}
        self._dim_ids: dict[Dim, int] = {}
        self._uids: dict[str, int] = {}
        self._sums, self._user_sums = _SUMS, _USER_SUMS  # (a version-1 file read-only: see below)
        if readonly:
            if not self.path.is_file():
                raise LedgerError(f"no ledger at {self.path}")
            uri = self.path.resolve().as_uri() + "?mode=ro"
            try:
                self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
                self.interval_seconds = self._read_meta(interval_seconds)
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None
            return
        try:
            _create_private(self.path)
            self._take_lock()
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed interval survives power loss too; one commit a minute is cheap.
            self._db.execute("PRAGMA synchronous=FULL")
            # Another writer (the sqlite3 shell, a backup tool) holding the database: wait at
            # most 2 s, then keep the intervals in memory and retry at the next interval
            # rather than stall the collector that calls us.
            self._db.execute("PRAGMA busy_timeout=2000")
            self._db.executescript(_SCHEMA)
            self.interval_seconds = self._init_meta(interval_seconds or 60)
        except sqlite3.Error as exc:
            self._release_lock()
            raise LedgerError(f"cannot open the ledger {self.path}: {exc}") from None
        except OSError as exc:
            self._release_lock()
            raise LedgerError(f"cannot open the ledger {self.path}: {exc.strerror or exc}") from None

    # -- opening -------------------------------------------------------------
    def _take_lock(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LedgerError(f"the ledger {self.path} is already being recorded by another "
                              "process (allsmi record or allsmi serve --ledger)") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _init_meta(self, interval_seconds: int) -> int:
        rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if not rows:
            with self._transaction():
                self._db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                     [("schema_version", str(SCHEMA_VERSION)),
                                      ("interval_seconds", str(interval_seconds))])
            return interval_seconds
        return self._check_meta(rows, interval_seconds)

    def _read_meta(self, interval_seconds: int | None) -> int:
        rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if not rows:
            raise LedgerError(f"{self.path} is not an allsmi ledger (no meta table entries)")
        return self._check_meta(rows, interval_seconds)

    def _check_meta(self, rows: Mapping[str, str], interval_seconds: int | None) -> int:
        version = int(rows.get("schema_version", "0"))
        if version in OLD_SCHEMA_VERSIONS:
            if self.readonly:  # no billed_ms yet: every device was billed whole
                self._sums = _SUMS.replace("SUM(billed_ms)", "SUM(allocated_ms)")
                self._user_sums = _USER_SUMS.replace("SUM(billed_ms)", "SUM(allocated_ms)")
            else:
                self._upgrade()
            version = SCHEMA_VERSION
        if version != SCHEMA_VERSION:
            raise LedgerError(f"{self.path}: ledger schema version {rows.get('schema_version')} is "
                              f"not supported (this allsmi writes version {SCHEMA_VERSION})")
        stored = int(rows["interval_seconds"])
        if interval_seconds is not None and not self.readonly and stored != interval_seconds:
            raise LedgerError(f"{self.path} records {stored}-second intervals but the "
                              f"configuration asks for {interval_seconds} (ledger.interval_seconds); "
                              "use a new ledger file to change it")
        return stored

    def _upgrade(self) -> None:
        """Version 1 to 2: add ``billed_ms``; what was recorded then was billed whole."""
        with self._transaction():
            for table in _USAGE_TABLES:
                columns = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
                if "billed_ms" not in columns:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN billed_ms INTEGER")
                    self._db.execute(f"UPDATE {table} SET billed_ms = allocated_ms")
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                             (str(SCHEMA_VERSION),))

    @contextlib.contextmanager
    def _transaction(self, forget_ids: bool = False) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")  # a failed COMMIT (disk full) is rolled back too
        except BaseException:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            if forget_ids:
                # Ids cached during the transaction may name rows rolled back with it; the
                # records are retried later and must find (or recreate) the real ones.
                self._dev_ids.clear()
                self._dim_ids.clear()
                self._uids.clear()
            raise

    def close(self) -> None:
        """Close the database (checkpointing the WAL) and release the writer lock."""
        with self._lock:
            try:
                self._db.close()
            finally:
                self._release_lock()

    # -- writing -------------------------------------------------------------
    def _dev(self, device_id: str) -> int:
        dev = self._dev_ids.get(device_id)
        if dev is None:
            self._db.execute("INSERT OR IGNORE INTO devices (device_id) VALUES (?)", (device_id,))
            dev = self._db.execute("SELECT dev FROM devices WHERE device_id = ?",
                                   (device_id,)).fetchone()[0]
            self._dev_ids[device_id] = dev
        return dev

    def _dim(self, dim: Dim) -> int:
        dim_id = self._dim_ids.get(dim)
        if dim_id is None:
            values = (self._dev(dim.device_id), dim.host, dim.vendor, dim.model, dim.parent,
                      dim.resource_group, dim.labels)
            self._db.execute("INSERT OR IGNORE INTO dims (dev, host, vendor, model, parent, "
                             "resource_group, labels) VALUES (?, ?, ?, ?, ?, ?, ?)", values)
            dim_id = self._db.execute(
                "SELECT dim FROM dims WHERE dev = ? AND host = ? AND vendor = ? AND model = ? "
                "AND parent = ? AND resource_group = ? AND labels = ?", values).fetchone()[0]
            self._dim_ids[dim] = dim_id
        return dim_id

    def _uid(self, name: str) -> int:
        uid = self._uids.get(name)
        if uid is None:
            self._db.execute("INSERT OR IGNORE INTO users (name) VALUES (?)", (name,))
            uid = self._db.execute("SELECT uid FROM users WHERE name = ?", (name,)).fetchone()[0]
            self._uids[name] = uid
        return uid

    def write(self, records: Iterable[IntervalRecord], now: float,
              retention_days: float | None = None, rollup_retention_days: float | None = None) -> int:
        """Store intervals in one transaction; roll up complete quarters; prune old rows.

        ``now`` is the time of the snapshot that completed them: quarters
        ending at or before it are rolled up. Returns how many intervals were
        stored (an interval overlapping what is already stored is skipped).
        """
        stored = 0
        with self._lock:
            try:
                with self._transaction(forget_ids=True):
                    units: set[tuple[int, int]] = set()
                    for rec in records:
                        dev = self._dev(rec.dim.device_id)
                        cur = self._db.execute(_UPSERT_INTERVAL, (
                            rec.start, dev, self._dim(rec.dim), rec.first_ms, rec.last_ms,
                            rec.observed_ms, rec.allocated_ms, rec.busy_ms, rec.busy_observed_ms,
                            rec.energy_mj, rec.mem_sum, rec.mem_samples, rec.mem_peak,
                            rec.billed_ms))
                        if cur.rowcount != 1:
                            continue  # overlaps time already stored: never count it twice
                        stored += 1
                        units.update((size, rec.start - rec.start % size) for size, _ in TIERS)
                        self._db.executemany(_UPSERT_USER, [
                            (rec.start, dev, self._uid(user), s.observed_ms, s.allocated_ms,
                             s.busy_ms, s.energy_mj, s.billed_ms)
                            for user, s in sorted(rec.users.items())])
                    self._db.executemany("INSERT OR IGNORE INTO pending (tier, start) VALUES (?, ?)",
                                         sorted(units))
                    self._roll_up(now)
                    self._prune(now, retention_days, rollup_retention_days)
            except sqlite3.Error as exc:
                error = LedgerError(f"cannot write the ledger {self.path}: {exc}")
                # Locked, full, read-only, I/O error: no record can be written now. Anything
                # else may be one record's fault, and the others must still be written.
                error.whole_database = isinstance(exc, sqlite3.OperationalError)
                raise error from None
        return stored

    def _roll_up(self, now: float) -> None:
        # Finest first: a day is rolled up from quarters rolled up in the same transaction.
        for (size, table), source in zip(reversed(TIERS), (_RAW,) + tuple(
                t for _, t in reversed(TIERS))):
            due = [u for (u,) in self._db.execute(
                "SELECT start FROM pending WHERE tier = ? AND start + ? <= ? ORDER BY start",
                (size, size, now))]
            for unit in due:
                self._roll_unit(size, table, source, unit)

    def _roll_unit(self, size: int, table: str, source: str, unit: int) -> None:
        end = unit + size
        self._db.execute(f"DELETE FROM {table} WHERE start = ?", (unit,))
        self._db.execute(f"DELETE FROM user_{table} WHERE start = ?", (unit,))
        self._db.execute(f"INSERT INTO {table} SELECT ?, dim, {_SUMS} FROM {source} "
                         "WHERE start >= ? AND start < ? GROUP BY dim", (unit, unit, end))
        if source == _RAW:
            self._db.execute(
                f"INSERT INTO user_{table} SELECT ?, i.dim, u.uid, {_USER_SUMS.replace('SUM(', 'SUM(u.')} "
                "FROM user_intervals u JOIN intervals i ON i.start = u.start AND i.dev = u.dev "
                "WHERE u.start >= ? AND u.start < ? GROUP BY i.dim, u.uid", (unit, unit, end))
        else:
            self._db.execute(
                f"INSERT INTO user_{table} SELECT ?, dim, uid, {_USER_SUMS} FROM user_{source} "
                "WHERE start >= ? AND start < ? GROUP BY dim, uid", (unit, unit, end))
        self._db.execute("DELETE FROM pending WHERE tier = ? AND start = ?", (size, unit))

    def _prune(self, now: float, retention_days: float | None,
               rollup_retention_days: float | None) -> None:
        def cutoff(days: float, rolled_into: int | None) -> int:
            limit = int(now - days * 86400)
            if rolled_into is None:
                return limit
            # Never delete what a unit that is not rolled up yet still needs.
            oldest = self._db.execute("SELECT MIN(start) FROM pending WHERE tier = ?",
                                      (rolled_into,)).fetchone()[0]
            return limit if oldest is None else min(limit, oldest)

        if retention_days is not None:
            raw = cutoff(retention_days, TIERS[-1][0])
            self._db.execute("DELETE FROM intervals WHERE start < ?", (raw,))
            self._db.execute("DELETE FROM user_intervals WHERE start < ?", (raw,))
        if rollup_retention_days is not None:
            # Quarter hours only: the daily roll-ups are small and kept for good.
            limit = cutoff(rollup_retention_days, TIERS[0][0])
            self._db.execute("DELETE FROM quarters WHERE start < ?", (limit,))
            self._db.execute("DELETE FROM user_quarters WHERE start < ?", (limit,))

    # -- reading -------------------------------------------------------------
    def _plan(self, start: int, end: int, level: int = 0) -> list[tuple[str, int, int, int | None]]:
        """Which table serves which part of ``[start, end)``: (table, lo, hi, tier to exclude)."""
        if start >= end:
            return []
        if level >= len(TIERS):
            return [(_RAW, start, end, None)]
        size, table = TIERS[level]
        lo = -(-start // size) * size
        hi = end // size * size
        if lo >= hi:
            return self._plan(start, end, level + 1)
        out = self._plan(start, lo, level + 1)
        out.append((table, lo, hi, size))
        for (unit,) in self._db.execute(
                "SELECT start FROM pending WHERE tier = ? AND start >= ? AND start < ? "
                "ORDER BY start", (size, lo, hi)).fetchall():
            out += self._plan(unit, unit + size, level + 1)  # not rolled up yet: finer data
        out += self._plan(hi, end, level + 1)
        return out

    @staticmethod
    def _where(lo: int, hi: int, tier: int | None) -> tuple[str, tuple[int, ...]]:
        if tier is None:
            return "start >= ? AND start < ?", (lo, hi)
        return ("start >= ? AND start < ? AND start NOT IN "
                "(SELECT start FROM pending WHERE tier = ?)", (lo, hi, tier))

    def dims(self) -> dict[int, Dim]:
        """Every ``dim`` ever recorded, by id."""
        rows = self._db.execute(
            "SELECT d.dim, v.device_id, d.host, d.vendor, d.model, d.parent, d.resource_group, "
            "d.labels FROM dims d JOIN devices v ON v.dev = d.dev").fetchall()
        return {r[0]: Dim(*r[1:]) for r in rows}

    def totals(self, start: int, end: int) -> dict[int, Totals]:
        """Sums per ``dim`` over the intervals starting in ``[start, end)`` (unix seconds)."""
        with self._lock:
            try:
                out: dict[int, Totals] = {}
                for table, lo, hi, tier in self._plan(start, end):
                    where, args = self._where(lo, hi, tier)
                    for row in self._db.execute(
                            f"SELECT dim, {self._sums} FROM {table} WHERE {where} GROUP BY dim",
                            args):
                        out.setdefault(row[0], Totals()).add(row[1:])
                return out
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None

    def user_totals(self, start: int, end: int) -> dict[tuple[int, str], Totals]:
        """Sums per (``dim``, user) over the intervals starting in ``[start, end)``."""
        with self._lock:
            try:
                names = dict(self._db.execute("SELECT uid, name FROM users").fetchall())
                out: dict[tuple[int, str], Totals] = {}
                for table, lo, hi, tier in self._plan(start, end):
                    if table == _RAW:
                        sql = (f"SELECT i.dim, u.uid, {self._user_sums.replace('SUM(', 'SUM(u.')} "
                               "FROM user_intervals u JOIN intervals i "
                               "ON i.start = u.start AND i.dev = u.dev "
                               "WHERE u.start >= ? AND u.start < ? GROUP BY i.dim, u.uid")
                        args: tuple[int, ...] = (lo, hi)
                    else:
                        where, args = self._where(lo, hi, tier)
                        sql = (f"SELECT dim, uid, {self._user_sums} FROM user_{table} WHERE {where} "
                               "GROUP BY dim, uid")
                    for row in self._db.execute(sql, args):
                        out.setdefault((row[0], names[row[1]]), Totals()).add(row[2:])
                return out
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` answer (``"ok"`` when sound)."""
        with self._lock:
            return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

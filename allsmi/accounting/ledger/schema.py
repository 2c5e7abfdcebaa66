"""The ledger's tables, their records and their upgrades from older versions.

Layout (all quantities are integers, so sums are exact and exports are
byte-identical whatever order SQLite adds rows in):

``intervals``
    One row per (interval start, device): observed/allocated/busy seconds in
    milliseconds, energy in millijoules, memory samples in bytes, and the
    ``dim`` (host, vendor, model, resource group, group labels) in force
    then. The primary key ``(start, dev)`` is the "never twice" guarantee.
``billed_ms`` (every usage table)
    Allocated time weighted by the device's share of its physical device (1 for a
    whole device; a MIG instance's slice fraction; the parent of partitions the part no
    partition holds), so that a partitioned device is billed at most once per hour. ``NULL``
    where allocated time is unknown.
``idle_ms``, ``idle_billed_ms``, ``idle_energy_mj`` (every usage table)
    Allocated time while utilization stayed below ``[accounting] idle_threshold_percent``,
    the same weighted like ``billed_ms``, and the energy used during it (each increment's
    energy in proportion to its idle-allocated time). ``NULL`` where unknown (intervals
    recorded before version 3 included).
``used_billed_ms`` (every usage table)
    Busy time weighted like ``billed_ms`` (what a group with ``bill_by = "used"`` prices).
``allocation_method``, ``usage_method`` (every usage table, text)
    How the row's allocated time and its busy time and energy were split among the device's
    holders (:mod:`allsmi.fairshare`: ``exclusive``, ``partition``, ``declared``, ``equal``;
    ``activity``, ``memory``, ``equal``), ``mixed`` when the row's time saw more than one,
    ``NULL`` when nobody held the device (and for rows recorded before version 4).
``attributed_ms`` (per-device usage tables)
    Observed time during which who held the device was known (an attribution source that
    failed or hung leaves holders unknown, and allocated time with them). ``NULL`` for what was
    recorded before version 5.
``active_ms``, ``active_allocated_ms``, ``activity_method`` (every usage table)
    Allocated time weighted by compute activity (``compute_active_percent``; holders' parts by
    the allocated split, each holder's allocated time x the device's activity), the allocated
    time whose activity was known (``efficiency_ratio`` is known where that is all of it), and
    what the activity measured (``compute_active_source``:
    ``sm_active``, ``gfx_busy``... ``mixed`` when more than one). ``NULL`` before version 6.
``wait_<reason>_ms`` (every usage table; reasons of :data:`allsmi.schema.WAITING_REASONS`)
    Allocated time during which the holder was ``computing`` or waiting on ``input``, the
    ``host``, ``communication``, ``nothing`` or ``unknown`` (the collector's classification,
    ``DeviceSample.waiting``), split among holders like allocated time. ``NULL`` where nothing
    was classified (and before version 6).
``holders`` / ``holder_intervals``
    Who held the device: one holder per (user, namespace, pod, job id), ``''`` where
    unknown, and each holder's share of an interval (see :mod:`allsmi.accounting.recorder`
    for how an interval is split among holders).
``quarters`` / ``holder_quarters`` and ``days`` / ``holder_days``
    Roll-ups per quarter hour and per UTC day, per ``dim`` (and holder), so a
    month of a thousand devices exports in seconds. Quarter hours because
    every UTC offset in use is a multiple of 15 minutes: the day and month
    boundaries of any ``--tz`` fall on a quarter-hour boundary.
``pending``
    Roll-up units (tier, start) that received data since they were last
    rolled up; reads take the next finer level for them, so a late roll-up
    never loses data.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Mapping

from allsmi.fairshare import MIXED
from allsmi.schema import WAITING_REASONS
from allsmi.usage import Holder as Holder  # who held a device (shared with the dashboard)

SCHEMA_VERSION = 6
#: Older ledgers are upgraded in place when opened for writing, and read through temporary
#: views when opened read-only: version 1 (no ``billed_ms``: every device billed whole),
#: version 2 (per-user shares only, no idle time: idle unknown), version 3 (holders split
#: equally, no split methods and no ``used_billed_ms``: unknown), version 4 (no
#: ``attributed_ms``: whether holders were known is unknown), version 5 (no activity and no
#: waiting reasons: unknown).
OLD_SCHEMA_VERSIONS = (1, 2, 3, 4, 5)

#: Per waiting reason (:data:`allsmi.schema.WAITING_REASONS`), its column of allocated time.
WAIT_COLUMNS: tuple[str, ...] = tuple(f"wait_{reason}_ms" for reason in WAITING_REASONS)
#: Added in version 6 (every usage table): activity and waiting reasons.
ACTIVITY_COLUMNS: tuple[str, ...] = ("active_ms", "active_allocated_ms", "activity_method") \
    + WAIT_COLUMNS
_ACTIVITY_SUMS: tuple[tuple[str, str], ...] = tuple(
    (c, "METHOD" if c == "activity_method" else "SUM") for c in ACTIVITY_COLUMNS)

#: Columns of the per-device usage tables after (start, dim), with their roll-up aggregate.
DEVICE_SUMS: tuple[tuple[str, str], ...] = (
    ("observed_ms", "SUM"), ("allocated_ms", "SUM"), ("busy_ms", "SUM"),
    ("busy_observed_ms", "SUM"), ("energy_mj", "SUM"), ("mem_sum", "SUM"),
    ("mem_samples", "SUM"), ("mem_peak", "MAX"), ("billed_ms", "SUM"), ("idle_ms", "ALLSUM"),
    ("idle_billed_ms", "ALLSUM"), ("idle_energy_mj", "SUM"), ("used_billed_ms", "SUM"),
    ("allocation_method", "METHOD"), ("usage_method", "METHOD"), ("attributed_ms", "ALLSUM"),
    *_ACTIVITY_SUMS)
#: Columns of the per-holder share tables after (start, dim or dev, hid).
HOLDER_SUMS: tuple[tuple[str, str], ...] = (
    ("observed_ms", "SUM"), ("allocated_ms", "SUM"), ("busy_ms", "SUM"), ("energy_mj", "SUM"),
    ("billed_ms", "SUM"), ("idle_ms", "ALLSUM"), ("idle_billed_ms", "ALLSUM"),
    ("idle_energy_mj", "SUM"), ("used_billed_ms", "SUM"),
    ("allocation_method", "METHOD"), ("usage_method", "METHOD"), *_ACTIVITY_SUMS)
#: ``ALLSUM``: a sum that is unknown (NULL) as soon as one of its terms is. Idle time is stored
#: NULL only where held time's idleness was unknown, so a window's idle time is never the known
#: part alone booked as the whole (``SUM`` skips NULLs: the rest is a sum of what is known).
#: Columns that are never NULL (the rest: NULL is unknown, never 0).
NOT_NULL = ("observed_ms", "busy_observed_ms", "mem_samples")
IDLE_COLUMNS = ("idle_ms", "idle_billed_ms", "idle_energy_mj")
#: Columns added in version 4 (split methods, busy time at the billing share).
SPLIT_COLUMNS = ("used_billed_ms", "allocation_method", "usage_method")
#: The text columns (the split methods); merged by :func:`merge_method`, never summed.
METHOD_COLUMNS = ("allocation_method", "usage_method", "activity_method")
#: Added in version 5 (device tables): observed time whose holders were known (an attribution
#: source that failed or timed out leaves them unknown); ``NULL`` (unknown) for what was
#: recorded before.
ATTRIBUTED_COLUMNS = ("attributed_ms",)


def _type(column: str) -> str:
    return "TEXT" if column in METHOD_COLUMNS else "INTEGER"


def _columns(sums: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{c} {_type(c)}{' NOT NULL' if c in NOT_NULL else ''}" for c, _ in sums)


def merge_method(mine: str | None, other: str | None) -> str | None:
    """Two rows' split method as one: the one they share, ``mixed`` when they differ."""
    if mine is None or mine == other:
        return other if mine is None else mine
    return mine if other is None else MIXED


_DEV_COLS, _HOLDER_COLS = _columns(DEVICE_SUMS), _columns(HOLDER_SUMS)

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS devices (dev INTEGER PRIMARY KEY, device_id TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS dims (
    dim INTEGER PRIMARY KEY, dev INTEGER NOT NULL, host TEXT NOT NULL, vendor TEXT NOT NULL,
    model TEXT NOT NULL, parent TEXT NOT NULL, resource_group TEXT NOT NULL, labels TEXT NOT NULL,
    UNIQUE (dev, host, vendor, model, parent, resource_group, labels));
CREATE TABLE IF NOT EXISTS intervals (
    start INTEGER NOT NULL, dev INTEGER NOT NULL, dim INTEGER NOT NULL,
    first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL, {_DEV_COLS},
    PRIMARY KEY (start, dev)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS holders (
    hid INTEGER PRIMARY KEY, user TEXT NOT NULL, namespace TEXT NOT NULL, pod TEXT NOT NULL,
    job TEXT NOT NULL, UNIQUE (user, namespace, pod, job));
CREATE TABLE IF NOT EXISTS holder_intervals (
    start INTEGER NOT NULL, dev INTEGER NOT NULL, hid INTEGER NOT NULL, {_HOLDER_COLS},
    PRIMARY KEY (start, dev, hid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS quarters (
    start INTEGER NOT NULL, dim INTEGER NOT NULL, {_DEV_COLS}, PRIMARY KEY (start, dim)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS holder_quarters (
    start INTEGER NOT NULL, dim INTEGER NOT NULL, hid INTEGER NOT NULL, {_HOLDER_COLS},
    PRIMARY KEY (start, dim, hid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS days (
    start INTEGER NOT NULL, dim INTEGER NOT NULL, {_DEV_COLS}, PRIMARY KEY (start, dim)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS holder_days (
    start INTEGER NOT NULL, dim INTEGER NOT NULL, hid INTEGER NOT NULL, {_HOLDER_COLS},
    PRIMARY KEY (start, dim, hid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    tier INTEGER NOT NULL, start INTEGER NOT NULL, PRIMARY KEY (tier, start)) WITHOUT ROWID;
"""

DEVICE_TABLES = ("intervals", "quarters", "days")
HOLDER_TABLES = ("holder_intervals", "holder_quarters", "holder_days")
#: Version-2 user tables and the holder tables that replace them.
_OLD_SHARES = {"user_intervals": "holder_intervals", "user_quarters": "holder_quarters",
               "user_days": "holder_days"}


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
class Share:
    """One holder's share of an interval (integers: ms and mJ)."""

    observed_ms: int
    allocated_ms: int | None
    busy_ms: int | None
    energy_mj: int | None
    billed_ms: int | None = None
    idle_ms: int | None = None
    idle_billed_ms: int | None = None
    idle_energy_mj: int | None = None
    used_billed_ms: int | None = None
    allocation_method: str | None = None
    usage_method: str | None = None
    active_ms: int | None = None
    active_allocated_ms: int | None = None
    activity_method: str | None = None
    wait_computing_ms: int | None = None
    wait_input_ms: int | None = None
    wait_host_ms: int | None = None
    wait_communication_ms: int | None = None
    wait_nothing_ms: int | None = None
    wait_unknown_ms: int | None = None


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
    holders: dict[Holder, Share] = field(default_factory=dict)
    billed_ms: int | None = None
    """Allocated time x the device's billing share (see the module docstring)."""
    idle_ms: int | None = None
    idle_billed_ms: int | None = None
    idle_energy_mj: int | None = None
    used_billed_ms: int | None = None
    allocation_method: str | None = None
    usage_method: str | None = None
    attributed_ms: int | None = None
    """Observed time during which who held the device was known (allocated time known)."""
    active_ms: int | None = None
    active_allocated_ms: int | None = None
    activity_method: str | None = None
    wait_computing_ms: int | None = None
    wait_input_ms: int | None = None
    wait_host_ms: int | None = None
    wait_communication_ms: int | None = None
    wait_nothing_ms: int | None = None
    wait_unknown_ms: int | None = None


#: Sums that an edge's weight leaves whole: the memory average's terms (an average of samples).
_UNWEIGHTED = frozenset({"mem_sum", "mem_samples"})


@dataclass
class Totals:
    """Sums over some intervals of one ``dim`` (and holder): ms, mJ and bytes."""

    observed_ms: int = 0
    allocated_ms: int | None = None
    busy_ms: int | None = None
    busy_observed_ms: int = 0
    energy_mj: int | None = None
    mem_sum: int | None = None
    mem_samples: int = 0
    mem_peak: int | None = None
    billed_ms: int | None = None
    idle_ms: int | None = None
    idle_billed_ms: int | None = None
    idle_energy_mj: int | None = None
    used_billed_ms: int | None = None
    allocation_method: str | None = None
    usage_method: str | None = None
    attributed_ms: int | None = None
    active_ms: int | None = None
    active_allocated_ms: int | None = None
    activity_method: str | None = None
    wait_computing_ms: int | None = None
    wait_input_ms: int | None = None
    wait_host_ms: int | None = None
    wait_communication_ms: int | None = None
    wait_nothing_ms: int | None = None
    wait_unknown_ms: int | None = None
    lost: set[str] = field(default_factory=set)
    """``ALLSUM`` columns that met a NULL: unknown for good."""

    def add(self, row: tuple, columns: tuple[tuple[str, str], ...],  # type: ignore[type-arg]
            weight: float = 1.0) -> None:
        """Add one SQL result row whose values are ``columns`` (:data:`DEVICE_SUMS` or
        :data:`HOLDER_SUMS`); NULL stays unknown, never 0 (and makes an ``ALLSUM`` unknown).
        ``weight`` (below 1): the share of an interval a window's edge cuts, by which its sums
        count (the memory average and peak, and the methods, are the interval's)."""
        for (name, agg), value in zip(columns, row):
            if weight != 1.0 and value is not None and agg in ("SUM", "ALLSUM") \
                    and name not in _UNWEIGHTED:
                value = round(value * weight)
            if agg == "ALLSUM" and (value is None or name in self.lost):
                self.lost.add(name)
                setattr(self, name, None)
                continue
            if value is None:
                continue
            mine = getattr(self, name)
            if agg == "METHOD":
                setattr(self, name, merge_method(mine, value))
            elif mine is None:
                setattr(self, name, value)
            elif agg == "MAX":
                setattr(self, name, max(mine, value))
            else:
                setattr(self, name, mine + value)


def upgrade(db: sqlite3.Connection, version: int) -> None:
    """Bring a version-1 to -5 ledger to :data:`SCHEMA_VERSION`, in the caller's transaction.

    Version 1 had no ``billed_ms`` (what was recorded then was billed whole); version 2 had
    per-user shares and no idle time (unknown for what was recorded then); version 3 had no
    split methods and no ``used_billed_ms``; version 4 did not record whether holders were
    known (``attributed_ms``). What was not recorded then is unknown (NULL), never 0."""
    def columns(table: str) -> set[str]:
        return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}

    if version < 2:
        for table in DEVICE_TABLES + tuple(_OLD_SHARES):
            if "billed_ms" not in columns(table):
                db.execute(f"ALTER TABLE {table} ADD COLUMN billed_ms INTEGER")
                db.execute(f"UPDATE {table} SET billed_ms = allocated_ms")
    for table in DEVICE_TABLES:
        for name in IDLE_COLUMNS + ATTRIBUTED_COLUMNS:
            if name not in columns(table):
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} INTEGER")
    # Version 4: the split methods and busy time at the billing share (unknown before);
    # version 6: activity and waiting reasons (unknown before).
    for table in DEVICE_TABLES + HOLDER_TABLES:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            for name in SPLIT_COLUMNS + ACTIVITY_COLUMNS:
                if name not in columns(table):
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {_type(name)}")
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'users'").fetchone():
        db.execute("INSERT OR IGNORE INTO holders (hid, user, namespace, pod, job) "
                   "SELECT uid, name, '', '', '' FROM users")
        for old, new in _OLD_SHARES.items():
            key = "dev" if old == "user_intervals" else "dim"
            db.execute(f"INSERT OR IGNORE INTO {new} (start, {key}, hid, observed_ms, allocated_ms, "
                       "busy_ms, energy_mj, billed_ms) SELECT start, "
                       f"{key}, uid, observed_ms, allocated_ms, busy_ms, energy_mj, billed_ms FROM {old}")
            db.execute(f"DROP TABLE {old}")
        db.execute("DROP TABLE users")
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def legacy_views(db: sqlite3.Connection, version: int) -> None:
    """Read an older ledger without changing it: temporary views (which shadow the stored
    tables) give it the current layout; idle time is unknown before version 3, the split
    methods and busy time at the billing share before version 4, whether holders were known
    (``attributed_ms``) before version 5, and version 1 billed whole."""
    split = ", ".join(f"NULL AS {c}" for c in SPLIT_COLUMNS + ACTIVITY_COLUMNS)
    attributed = ", ".join(f"NULL AS {c}" for c in ATTRIBUTED_COLUMNS)
    if version >= 3:  # holders and their tables are already there: add the missing columns
        for table in DEVICE_TABLES + HOLDER_TABLES:
            have = {r[1] for r in db.execute(f"PRAGMA main.table_info({table})")}
            wanted = SPLIT_COLUMNS + (ATTRIBUTED_COLUMNS if table in DEVICE_TABLES else ()) \
                + ACTIVITY_COLUMNS
            missing = ", ".join(f"NULL AS {c}" for c in wanted if c not in have)
            if missing:
                db.execute(f"CREATE TEMP VIEW {table} AS SELECT *, {missing} FROM main.{table}")
        return
    billed = "billed_ms" if version >= 2 else "allocated_ms AS billed_ms"
    idle = ", ".join(f"NULL AS {c}" for c in IDLE_COLUMNS)
    extra = "" if version >= 2 else ", allocated_ms AS billed_ms"
    for table in DEVICE_TABLES:
        db.execute(f"CREATE TEMP VIEW {table} AS SELECT *{extra}, {idle}, {split}, {attributed} "
                   f"FROM main.{table}")
    db.execute("CREATE TEMP VIEW holders AS SELECT uid AS hid, name AS user, '' AS namespace, "
               "'' AS pod, '' AS job FROM main.users")
    for old, new in _OLD_SHARES.items():
        key = "dev" if old == "user_intervals" else "dim"
        db.execute(f"CREATE TEMP VIEW {new} AS SELECT start, {key}, uid AS hid, observed_ms, "
                   f"allocated_ms, busy_ms, energy_mj, {billed}, {idle}, {split} FROM main.{old}")

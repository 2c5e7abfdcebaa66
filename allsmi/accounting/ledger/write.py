"""Writing the ledger: intervals and holder shares in one transaction, roll-ups and pruning.

Each completed interval of every device is written in one transaction with
an upsert that only adds time that starts where, or after, the row's time ends,
so a restart inside an interval continues it, an open interval can be written in
parts (the recorder's checkpoints), and nothing is counted twice.
"""

from __future__ import annotations

import operator
import sqlite3
from typing import TYPE_CHECKING, Iterable

from allsmi.accounting.ledger.schema import (DEVICE_SUMS, HOLDER_SUMS, METHOD_COLUMNS, NOT_NULL,
                                            Dim, Holder, IntervalRecord, LedgerError)
from allsmi.accounting.settings import ROLLUP_SECONDS
from allsmi.fairshare import MIXED

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Callable

#: Roll-up tiers, coarsest first: (seconds, table). Each is rolled up from the next finer one.
TIERS: tuple[tuple[int, str], ...] = ((86400, "days"), (ROLLUP_SECONDS, "quarters"))
RAW = "intervals"
#: ``meta`` key (+ the table's name) of the time before which a table's rows were pruned.
PRUNED_KEY = "pruned_before_"
DEVICE_COLUMNS = tuple(c for c, _ in DEVICE_SUMS)
HOLDER_COLUMNS = tuple(c for c, _ in HOLDER_SUMS)
ALLSUM_COLUMNS = frozenset(c for c, agg in DEVICE_SUMS + HOLDER_SUMS if agg == "ALLSUM")
#: A record's and a share's values in the columns' order (one call each, not a getattr per
#: column: the command writing a month's simulated bill stores 122,000 records).
_DEVICE_VALUES = operator.attrgetter(*DEVICE_COLUMNS)
_HOLDER_VALUES = operator.attrgetter(*HOLDER_COLUMNS)


def _add(column: str, table: str) -> str:
    """``column = column + excluded.column``, where NULL (unknown) plus NULL stays NULL."""
    if column in NOT_NULL or column in ALLSUM_COLUMNS:  # (NULL + x is NULL: unknown stays)
        return f"{column} = {table}.{column} + excluded.{column}"
    if column in METHOD_COLUMNS:  # the one both share, 'mixed' when they differ
        return (f"{column} = CASE WHEN {table}.{column} IS NULL THEN excluded.{column} "
                f"WHEN excluded.{column} IS NULL OR excluded.{column} = {table}.{column} "
                f"THEN {table}.{column} ELSE '{MIXED}' END")
    if column == "idle_energy_mj":  # the energy of idle time unknown once that time is
        return (f"{column} = CASE WHEN {table}.idle_ms IS NULL OR excluded.idle_ms IS NULL "
                f"THEN NULL WHEN {table}.{column} IS NULL AND excluded.{column} IS NULL THEN NULL "
                f"ELSE coalesce({table}.{column}, 0) + coalesce(excluded.{column}, 0) END")
    if column == "mem_peak":
        return (f"{column} = max(coalesce({table}.{column}, excluded.{column}), "
                f"coalesce(excluded.{column}, {table}.{column}))")
    return (f"{column} = CASE WHEN {table}.{column} IS NULL AND excluded.{column} IS NULL "
            f"THEN NULL ELSE coalesce({table}.{column}, 0) + coalesce(excluded.{column}, 0) END")


_UPSERT_INTERVAL = (
    f"INSERT INTO intervals (start, dev, dim, first_ms, last_ms, {', '.join(DEVICE_COLUMNS)}) "
    f"VALUES ({', '.join('?' * (5 + len(DEVICE_COLUMNS)))}) ON CONFLICT (start, dev) DO UPDATE SET "
    "last_ms = excluded.last_ms, " + ", ".join(_add(c, "intervals") for c in DEVICE_COLUMNS)
    + " WHERE excluded.first_ms >= intervals.last_ms")
_UPSERT_HOLDER = (
    f"INSERT INTO holder_intervals (start, dev, hid, {', '.join(HOLDER_COLUMNS)}) "
    f"VALUES ({', '.join('?' * (3 + len(HOLDER_COLUMNS)))}) ON CONFLICT (start, dev, hid) "
    "DO UPDATE SET " + ", ".join(_add(c, "holder_intervals") for c in HOLDER_COLUMNS))


def _holder_order(item: tuple[Holder, object]) -> tuple[str, ...]:
    """The order of a record's holders' rows: by their names, unknown ('') first."""
    return tuple(v or "" for v in item[0])


def _share_rows(start: int, dev: int, holders: dict[Holder, object],
                hid: "Callable[[Holder], int]") -> list[tuple[object, ...]]:
    """The rows of one interval's holders' shares, in :func:`_holder_order`."""
    if len(holders) == 1:  # (most records: no sorting)
        [(holder, share)] = holders.items()
        return [(start, dev, hid(holder), *_HOLDER_VALUES(share))]
    return [(start, dev, hid(holder), *_HOLDER_VALUES(share))
            for holder, share in sorted(holders.items(), key=_holder_order)]


def _aggregate(column: str, agg: str) -> str:
    if agg == "METHOD":  # the one all rows share, 'mixed' when they differ, NULL when none
        return (f"CASE WHEN MIN({column}) = MAX({column}) THEN MIN({column}) "
                f"WHEN MIN({column}) IS NULL THEN NULL ELSE '{MIXED}' END")
    if agg == "ALLSUM":  # unknown (NULL) as soon as one term is
        return f"CASE WHEN COUNT(*) = COUNT({column}) THEN SUM({column}) END"
    return f"{agg}({column})"


def sums(columns: tuple[tuple[str, str], ...], prefix: str = "") -> str:
    """``SUM(observed_ms), ..., MAX(mem_peak), ...`` for a SELECT (``ALLSUM``: NULL when any
    term is, see :data:`~allsmi.accounting.ledger.schema.HOLDER_SUMS`)."""
    return ", ".join(_aggregate(prefix + c, agg) for c, agg in columns)


class LedgerWriter:
    """The writing half of :class:`~allsmi.accounting.ledger.store.Ledger` (a mixin)."""

    path: object
    interval_seconds: int
    _db: sqlite3.Connection
    _lock: "AbstractContextManager[object]"
    _dev_ids: dict[str, int]
    _dim_ids: dict[Dim, int]
    _hids: dict[Holder, int]
    refused: list[tuple[int, str]]
    """(start, device id) of each record the last :meth:`write` refused (it overlapped time
    already stored, or a roll-up that could not be rebuilt whole)."""

    _transaction: "Callable[..., AbstractContextManager[None]]"
    """``Ledger._transaction(forget_ids=False)``: one write transaction, rolled back on error."""
    _check_file: "Callable[[], None]"
    """``Ledger._check_file()``: :class:`LedgerError` when the file written is gone."""

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

    def _hid(self, holder: Holder) -> int:
        hid = self._hids.get(holder)
        if hid is None:
            values = tuple(v or "" for v in holder)
            self._db.execute("INSERT OR IGNORE INTO holders (user, namespace, pod, job) "
                             "VALUES (?, ?, ?, ?)", values)
            hid = self._db.execute("SELECT hid FROM holders WHERE user = ? AND namespace = ? "
                                   "AND pod = ? AND job = ?", values).fetchone()[0]
            self._hids[holder] = hid
        return hid

    def write(self, records: Iterable[IntervalRecord], now: float,
              retention_days: float | None = None, rollup_retention_days: float | None = None) -> int:
        """Store intervals in one transaction; roll up complete quarters; prune old rows.

        ``now`` is the time of the snapshot that completed them: quarters
        ending at or before it are rolled up. Returns how many intervals were
        stored (an interval overlapping what is already stored is skipped); :attr:`refused`
        then holds (start, device id) of each record skipped.
        """
        with self._lock:
            self._check_file()
            self.refused = []
            try:
                with self._transaction(forget_ids=True):
                    records = list(records)
                    batch = self._rebuildable(records)
                    whole = {id(r) for r in batch}
                    refused = [r for r in records if id(r) not in whole]
                    if self.stored_at_once(batch):
                        kept = batch
                    else:
                        left = {id(r) for r in self.stored_one_by_one(batch)}
                        kept = [r for r in batch if id(r) not in left]
                        refused += [r for r in batch if id(r) in left]
                    stored, starts = len(kept), {rec.start for rec in kept}
                    units = {(size, start - start % size) for start in starts for size, _ in TIERS}
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
        self.refused = [(r.start, r.dim.device_id) for r in refused]
        return stored

    def stored_at_once(self, records: list[IntervalRecord]) -> bool:
        """Store every record's interval, then every holder's share, in one ``executemany``
        each (a month's simulated bill writes 122,000 intervals: a tenth of its writing time
        in the calls' own overhead), when none of the intervals overlaps time already stored;
        otherwise store nothing (rolled back) and answer ``False``: each is then stored on its
        own (:meth:`stored_one_by_one`). The rows are those, in the order, that one by one
        writes."""
        if not records:
            return True
        db, dev, dim, hid = self._db, self._dev, self._dim, self._hid
        rows = [(rec.start, dev(rec.dim.device_id), dim(rec.dim), rec.first_ms, rec.last_ms,
                 *_DEVICE_VALUES(rec)) for rec in records]
        db.execute("SAVEPOINT every_interval")
        # (an upsert whose WHERE skips an overlapping interval changes no row)
        if db.executemany(_UPSERT_INTERVAL, rows).rowcount != len(rows):
            db.execute("ROLLBACK TO every_interval")
            db.execute("RELEASE every_interval")
            return False
        db.execute("RELEASE every_interval")
        shares: list[tuple[object, ...]] = []
        for rec, (start, dev_id, *_) in zip(records, rows):
            shares += _share_rows(start, dev_id, rec.holders, hid)
        db.executemany(_UPSERT_HOLDER, shares)
        return True

    def stored_one_by_one(self, records: list[IntervalRecord]) -> list[IntervalRecord]:
        """Store each record whose interval overlaps no time already stored (the others are
        skipped: never counted twice), with its holders' shares; the records skipped."""
        skipped: list[IntervalRecord] = []
        for rec in records:
            dev = self._dev(rec.dim.device_id)
            cur = self._db.execute(_UPSERT_INTERVAL, (
                rec.start, dev, self._dim(rec.dim), rec.first_ms, rec.last_ms,
                *_DEVICE_VALUES(rec)))
            if cur.rowcount != 1:
                skipped.append(rec)  # overlaps time already stored: never count it twice
                continue
            self._db.executemany(_UPSERT_HOLDER, _share_rows(rec.start, dev, rec.holders,
                                                             self._hid))
        return skipped

    def _roll_up(self, now: float) -> None:
        # Finest first: a day is rolled up from quarters rolled up in the same transaction.
        for (size, table), source in zip(reversed(TIERS), (RAW,) + tuple(
                t for _, t in reversed(TIERS))):
            due = [u for (u,) in self._db.execute(
                "SELECT start FROM pending WHERE tier = ? AND start + ? <= ? ORDER BY start",
                (size, size, now))]
            for unit in due:
                self._roll_unit(size, table, source, unit)

    def _roll_unit(self, size: int, table: str, source: str, unit: int) -> None:
        end = unit + size
        dev_cols, holder_cols = ", ".join(DEVICE_COLUMNS), ", ".join(HOLDER_COLUMNS)
        self._db.execute(f"DELETE FROM {table} WHERE start = ?", (unit,))
        self._db.execute(f"DELETE FROM holder_{table} WHERE start = ?", (unit,))
        # Rows as long as the unit (a simulated bill's scratch ledger: quarter-hour rows) are
        # one row per device and holder in it, each aggregated over itself: SUM, MAX and MIN of
        # one value are that value, and so are ALLSUM and METHOD of one value or NULL. They are
        # copied (a month's bill rolls up 2,976 quarters; a third of its writing time).
        copy = source == RAW and self.interval_seconds == size
        self._db.execute(f"INSERT INTO {table} (start, dim, {dev_cols}) SELECT ?, dim, "
                         f"{dev_cols if copy else sums(DEVICE_SUMS)} FROM {source} "
                         f"WHERE start >= ? AND start < ?{'' if copy else ' GROUP BY dim'}",
                         (unit, unit, end))
        if source == RAW:
            values = ", ".join(f"h.{c}" for c in HOLDER_COLUMNS) if copy \
                else sums(HOLDER_SUMS, "h.")
            self._db.execute(
                f"INSERT INTO holder_{table} (start, dim, hid, {holder_cols}) SELECT ?, i.dim, "
                f"h.hid, {values} FROM holder_intervals h JOIN intervals i "
                "ON i.start = h.start AND i.dev = h.dev WHERE h.start >= ? AND h.start < ?"
                f"{'' if copy else ' GROUP BY i.dim, h.hid'}", (unit, unit, end))
        else:
            self._db.execute(
                f"INSERT INTO holder_{table} (start, dim, hid, {holder_cols}) SELECT ?, dim, hid, "
                f"{sums(HOLDER_SUMS)} FROM holder_{source} WHERE start >= ? AND start < ? "
                "GROUP BY dim, hid", (unit, unit, end))
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
            if self._db.execute("DELETE FROM intervals WHERE start < ?", (raw,)).rowcount:
                self._pruned(RAW, raw, self.interval_seconds)
            self._db.execute("DELETE FROM holder_intervals WHERE start < ?", (raw,))
        if rollup_retention_days is not None:
            # Quarter hours only: the daily roll-ups are small and kept for good.
            limit = cutoff(rollup_retention_days, TIERS[0][0])
            if self._db.execute("DELETE FROM quarters WHERE start < ?", (limit,)).rowcount:
                self._pruned(TIERS[-1][1], limit, TIERS[-1][0])
            self._db.execute("DELETE FROM holder_quarters WHERE start < ?", (limit,))

    def _pruned(self, table: str, before: int, size: int) -> None:
        """Note in ``meta`` that ``table`` (of rows ``size`` seconds long) holds no rows that
        start before ``before``: none before the first row boundary from there (read by
        :meth:`~allsmi.accounting.ledger.read.LedgerReader.unheld`)."""
        self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                         "SET value = max(CAST(value AS INTEGER), excluded.value)",
                         (PRUNED_KEY + table, -(-before // size) * size))

    def _rebuildable(self, records: list[IntervalRecord]) -> list[IntervalRecord]:
        """``records`` less those whose roll-ups could not be rebuilt whole.

        A record rolls its quarter up again from the raw intervals, and its day from the
        quarters. Where some of those were pruned already (a recorder whose wall clock is days
        behind what the ledger recorded: an RTC set wrong, a VM restored; a record held back
        longer than the retention), the rebuilt roll-up would hold the late record instead of
        what it held: what was recorded lost, the late time billed in its place (and no raw row
        is left to refuse it as time already recorded). Such records are refused, as time
        already recorded is (the recorder counts and logs them)."""
        (day, days), (quarter, quarters) = TIERS
        seen: dict[tuple[int, int], bool] = {}

        def whole(size: int, table: str, source: str, unit: int) -> bool:
            known = seen.get((size, unit))
            if known is None:
                known = seen[(size, unit)] = self._source_kept(size, table, source, unit)
            return known

        # (asked once per start, not per record: a simulated bill's chunk has 41 a start)
        kept = {start: whole(quarter, quarters, RAW, start - start % quarter)
                and whole(day, days, quarters, start - start % day)
                for start in {r.start for r in records}}
        return [r for r in records if kept[r.start]]

    def _source_kept(self, size: int, table: str, source: str, unit: int) -> bool:
        """Whether ``unit`` of ``table`` can be rolled up again from ``source`` without losing
        what it holds: it is pending (its source is kept until it is rolled up), it holds
        nothing, or its source still holds all of its devices and observed time."""
        db = self._db
        if db.execute("SELECT 1 FROM pending WHERE tier = ? AND start = ?",
                      (size, unit)).fetchone():
            return True
        rows, observed = db.execute(f"SELECT COUNT(*), SUM(observed_ms) FROM {table} "
                                    "WHERE start = ?", (unit,)).fetchone()
        if not rows:
            return True
        dims, kept = db.execute(f"SELECT COUNT(DISTINCT dim), SUM(observed_ms) FROM {source} "
                                "WHERE start >= ? AND start < ?", (unit, unit + size)).fetchone()
        return bool(dims >= rows and (kept or 0) >= observed)

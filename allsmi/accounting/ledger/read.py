"""Reading the ledger: sums per device (``dim``) and per holder over a window.

An export reads whole UTC days from the daily roll-ups, the rest of the window
from quarter hours, and raw intervals only for edges that are not on a quarter
hour and for units not rolled up yet (still ``pending``). A window edge inside a raw interval
(``--since 10:00:30`` on a ledger of minutes) counts that interval at the share of it inside
the window, its figures taken as even over the span the device was seen in it (its first to
its last sample: :meth:`LedgerReader._seen_share`): never the whole interval, nor none of it,
and none of it for a device not seen on the window's side of the edge (one that stopped at
10:00:20 is not billed, nor counted, from 10:00:30).
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Iterator

from allsmi.accounting.ledger.schema import (DEVICE_SUMS, HOLDER_SUMS, Dim, Holder, LedgerError,
                                            Totals)
from allsmi.accounting.ledger.write import PRUNED_KEY, RAW, TIERS, sums
from allsmi.accounting.settings import ROLLUP_SECONDS

if TYPE_CHECKING:
    from contextlib import AbstractContextManager


#: The columns of one row of an interval an edge cuts (read row by row, each at its share).
_DEVICE_VALUES = ", ".join(c for c, _ in DEVICE_SUMS)
_HOLDER_VALUES = ", ".join(f"h.{c}" for c, _ in HOLDER_SUMS)
#: The holder rows of a device shared at once (not held ``exclusive``, nor as a partition).
_SHARED_ONLY = "allocation_method IN ('equal', 'declared', 'mixed')"


class LedgerReader:
    """The reading half of :class:`~allsmi.accounting.ledger.store.Ledger` (a mixin)."""

    path: object
    interval_seconds: int
    _db: sqlite3.Connection
    _lock: "AbstractContextManager[object]"

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside the block sees the ledger as one commit left it (one read
        transaction). Without it each query sees the latest commit, and a recorder writing
        meanwhile (a quarter or a day rolled up between reading which units are ``pending``
        and reading the roll-ups; a checkpoint between the devices' totals and the holders')
        makes an export count a quarter twice, or holders' shares that are not the devices'."""
        with self._lock:
            try:
                self._db.execute("BEGIN")
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None
        try:
            yield
        finally:
            with self._lock, contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")  # (nothing was written: only the snapshot ends)

    def plan(self, start: int, end: int, level: int = 0) -> list[tuple[str, int, int, int | None]]:
        """Which table serves which part of ``[start, end)``: (table, lo, hi, tier to exclude)."""
        if start >= end:
            return []
        if level >= len(TIERS):
            return [(RAW, start, end, None)]
        size, table = TIERS[level]
        lo = -(-start // size) * size
        hi = end // size * size
        if lo >= hi:
            return self.plan(start, end, level + 1)
        out = self.plan(start, lo, level + 1)
        out.append((table, lo, hi, size))
        for (unit,) in self._db.execute(
                "SELECT start FROM pending WHERE tier = ? AND start >= ? AND start < ? "
                "ORDER BY start", (size, lo, hi)).fetchall():
            out += self.plan(unit, unit + size, level + 1)  # not rolled up yet: finer data
        out += self.plan(hi, end, level + 1)
        return out

    def _raw_pieces(self, lo: int, hi: int) -> list[tuple[int, int, tuple[int, int] | None]]:
        """``[lo, hi)`` of the raw intervals as (first start, end of starts, cut): the intervals
        that start on the ledger's grid inside it whole (cut ``None``), and an interval one of
        its edges cuts with the part of its time inside ``[lo, hi)`` (unix seconds), which
        :meth:`_seen_share` weighs each of its rows by."""
        size = self.interval_seconds
        first, last = -(-lo // size) * size, hi // size * size
        out: list[tuple[int, int, tuple[int, int] | None]] = []
        if lo % size:
            row = lo - lo % size
            out.append((row, row + 1, (lo, min(hi, row + size))))
        if first < last:
            out.append((first, last, None))
        if hi % size and last >= first:
            out.append((last, last + 1, (last, hi)))
        return out

    @staticmethod
    def _seen_share(start: int, first_ms: int, last_ms: int, cut: tuple[int, int]) -> float:
        """The share of a raw row's figures inside ``cut`` (unix seconds, ``[a, b)``), taken as
        even over the span its device was seen in the interval (its first to its last sample):
        0 for a device seen only outside the cut (it stopped before the window's start, or
        started at or after its end), never a part of time it was not seen."""
        a, b = (cut[0] - start) * 1000, (cut[1] - start) * 1000
        if last_ms <= first_ms:  # seen at one instant (a device lost at a single sample)
            return 1.0 if a <= first_ms < b else 0.0
        return max(0, min(b, last_ms) - max(a, first_ms)) / (last_ms - first_ms)

    def _pieces(self, start: int, end: int
                ) -> list[tuple[str, int, int, int | None, tuple[int, int] | None]]:
        """:meth:`plan` with each raw part cut at the interval grid: (table, lo, hi, tier to
        exclude, the cut of an interval an edge cuts: ``None`` for whole rows)."""
        out: list[tuple[str, int, int, int | None, tuple[int, int] | None]] = []
        for table, lo, hi, tier in self.plan(start, end):
            if table == RAW:
                out.extend((RAW, a, b, None, cut) for a, b, cut in self._raw_pieces(lo, hi))
            else:
                out.append((table, lo, hi, tier, None))
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
        """Sums per ``dim`` over ``[start, end)`` (unix seconds; an interval an edge cuts, at
        its share inside)."""
        with self._lock:
            try:
                out: dict[int, Totals] = {}
                for table, lo, hi, tier, cut in self._pieces(start, end):
                    if cut is not None:  # one interval an edge cuts: each row at its share
                        for row in self._db.execute(
                                f"SELECT dim, start, first_ms, last_ms, {_DEVICE_VALUES} "
                                "FROM intervals WHERE start = ?", (lo,)):
                            weight = self._seen_share(row[1], row[2], row[3], cut)
                            if weight > 0:
                                out.setdefault(row[0], Totals()).add(row[4:], DEVICE_SUMS, weight)
                        continue
                    where, args = self._where(lo, hi, tier)
                    for row in self._db.execute(
                            f"SELECT dim, {sums(DEVICE_SUMS)} FROM {table} WHERE {where} "
                            "GROUP BY dim", args):
                        out.setdefault(row[0], Totals()).add(row[1:], DEVICE_SUMS)
                return out
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None

    def holder_totals(self, start: int, end: int) -> dict[tuple[int, Holder], Totals]:
        """Sums per (``dim``, holder) over ``[start, end)``, as :meth:`totals`."""
        with self._lock:
            try:
                holders = {r[0]: Holder(*(v or None for v in r[1:])) for r in self._db.execute(
                    "SELECT hid, user, namespace, pod, job FROM holders")}
                out: dict[tuple[int, Holder], Totals] = {}
                for table, lo, hi, tier, cut in self._pieces(start, end):
                    if cut is not None:  # one interval an edge cuts: each row at its share
                        for row in self._db.execute(
                                "SELECT i.dim, h.hid, i.start, i.first_ms, i.last_ms, "
                                f"{_HOLDER_VALUES} FROM holder_intervals h JOIN intervals i "
                                "ON i.start = h.start AND i.dev = h.dev WHERE h.start = ?", (lo,)):
                            weight = self._seen_share(row[2], row[3], row[4], cut)
                            if weight > 0:
                                out.setdefault((row[0], holders[row[1]]), Totals()).add(
                                    row[5:], HOLDER_SUMS, weight)
                        continue
                    if table == RAW:
                        sql = (f"SELECT i.dim, h.hid, {sums(HOLDER_SUMS, 'h.')} "
                               "FROM holder_intervals h JOIN intervals i "
                               "ON i.start = h.start AND i.dev = h.dev "
                               "WHERE h.start >= ? AND h.start < ? GROUP BY i.dim, h.hid")
                        args: tuple[int, ...] = (lo, hi)
                    else:
                        where, args = self._where(lo, hi, tier)
                        sql = (f"SELECT dim, hid, {sums(HOLDER_SUMS)} FROM holder_{table} "
                               f"WHERE {where} GROUP BY dim, hid")
                    for row in self._db.execute(sql, args):
                        out.setdefault((row[0], holders[row[1]]), Totals()).add(
                            row[2:], HOLDER_SUMS)
                return out
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None

    def conflicts(self, start: int, end: int) -> list[tuple[int, int, tuple[Holder, ...]]]:
        """(``dim``, interval start, holders) of each interval starting in ``[start, end)``
        whose device a pod and a job that is no pod's held at once (a kubelet and a job-mapping
        file claiming it: each billed a part, so neither was given it ``exclusive``; a device
        handed from a pod to a job within an interval gives each of them all of it while they
        held it). Whole days are read at their quarter hours."""
        with self._lock:
            try:
                holders = {r[0]: Holder(*(v or None for v in r[1:])) for r in self._db.execute(
                    "SELECT hid, user, namespace, pod, job FROM holders")}
                out: list[tuple[int, int, tuple[Holder, ...]]] = []
                for table, lo, hi, tier in self.plan(start, end):
                    if table == RAW:
                        sql = ("SELECT i.dim, h.start, group_concat(h.hid) FROM holder_intervals h "
                               "JOIN intervals i ON i.start = h.start AND i.dev = h.dev "
                               f"WHERE h.start >= ? AND h.start < ? AND h.{_SHARED_ONLY} "
                               "GROUP BY i.dim, h.start HAVING COUNT(*) > 1")
                        args: tuple[int, ...] = (lo, hi)
                    else:
                        where, args = self._where(lo, hi, tier) if table == "quarters" \
                            else ("start >= ? AND start < ?", (lo, hi))
                        sql = (f"SELECT dim, start, group_concat(hid) FROM holder_quarters "
                               f"WHERE {where} AND {_SHARED_ONLY} "
                               "GROUP BY dim, start HAVING COUNT(*) > 1")
                    for dim, at, hids in self._db.execute(sql, args):
                        held = tuple(holders[int(h)] for h in str(hids).split(","))
                        if any(h.pod for h in held) and any(h.job and not h.pod for h in held):
                            out.append((dim, at, held))
                return sorted(out)
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None

    def newest_time(self) -> float | None:
        """The end of the newest time the ledger holds (unix seconds; the latest raw interval's
        last sample, else the end of the latest roll-up), ``None`` when it holds none."""
        with self._lock:
            (raw,) = self._db.execute(
                "SELECT MAX(start + last_ms / 1000.0) FROM intervals").fetchone()
            if raw is not None:
                return float(raw)
            ends = [self._db.execute(f"SELECT MAX(start) + ? FROM {table}", (size,)).fetchone()[0]
                    for size, table in TIERS]
            known = [float(e) for e in ends if e is not None]
            return max(known) if known else None

    def unheld(self, start: int, end: int) -> list[tuple[str, int, int, int | None]]:
        """The parts of ``[start, end)`` that an export reads from a table whose rows there were
        pruned (``retention_days``, ``rollup_retention_days``) while a coarser roll-up still
        holds that time (a day held only as a whole UTC day, a quarter hour only whole): what
        was recorded there cannot be billed in this window. (table, lo, hi, the time from which
        that table holds its rows, ``None`` when it holds none), in order."""
        with self._lock:
            try:
                held = {table: self._held_from(table) for table in (RAW, TIERS[-1][1])}
                out: list[tuple[str, int, int, int | None]] = []
                for table, lo, hi, _tier in self.plan(start, end):
                    if table not in held:
                        continue
                    cut = hi if held[table] is None else min(hi, held[table])
                    if lo < cut and self._coarser_holds(table, lo, cut):
                        if out and out[-1][0] == table and out[-1][2] == lo:
                            lo = out.pop()[1]
                        out.append((table, lo, cut, held[table]))
                return out
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None

    def _held_from(self, table: str) -> int | None:
        """The time before which ``table``'s rows were pruned (noted in ``meta``; for a ledger
        pruned by an older allsmi, its earliest row), ``None`` when it holds none."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?",
                               (PRUNED_KEY + table,)).fetchone()
        if row is not None:
            return int(row[0])
        (first,) = self._db.execute(f"SELECT MIN(start) FROM {table}").fetchone()
        return None if first is None else int(first)

    def _coarser_holds(self, table: str, lo: int, hi: int) -> bool:
        """Whether a roll-up coarser than ``table`` holds rows for time in ``[lo, hi)``."""
        coarser = [(size, t) for size, t in TIERS if table == RAW or size > ROLLUP_SECONDS]
        return any(self._db.execute(f"SELECT 1 FROM {t} WHERE start >= ? AND start < ? LIMIT 1",
                                    (lo - lo % size, hi)).fetchone() for size, t in coarser)

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` answer (``"ok"`` when sound)."""
        with self._lock:
            return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

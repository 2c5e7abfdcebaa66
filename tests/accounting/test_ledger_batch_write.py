"""The ledger stores a write's intervals and holders' shares in one statement each, and falls
back to one interval at a time when any of them overlaps time already stored: both ways store
the same rows, in the same order, and an overlapping interval is never counted twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from allsmi.accounting.ledger.write import HOLDER_COLUMNS, LedgerWriter

from .helpers import T0, device, record, rows, snap

TABLES = ("devices", "dims", "holders", "intervals", "holder_intervals", "quarters",
          "holder_quarters", "days", "holder_days", "pending")


def _snapshots(times: range | list[int]) -> list:
    """Two devices: one holder, then two (the shares sorted), then none."""
    out = []
    for t in times:
        users = (["alice"], ["bob", "alice"], [])[(t // 200) % 3]
        out.append(snap(T0 + t, device("GPU-a", power=100.0 + t % 7, util=float(t % 50),
                                       users=users),
                        device("GPU-b", power=80.0, users=["carol"] if t % 300 < 150 else [])))
    return out


def _contents(path: Path) -> dict[str, list[tuple]]:
    """Every table's rows in the order stored (rowid), or by key where there is no rowid."""
    db = sqlite3.connect(path)
    try:
        out = {}
        for table in TABLES:
            try:
                out[table] = db.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall()
            except sqlite3.OperationalError:  # (a WITHOUT ROWID table)
                out[table] = sorted(db.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
        return out
    finally:
        db.close()


def _runs(path: Path, runs: list[range | list[int]]) -> list:
    return [record(path, _snapshots(times)) for times in runs]


@pytest.mark.parametrize("runs", [
    [range(0, 1900, 10)],  # one run: every write at once
    [range(0, 301, 10), range(320, 700, 10)],  # a restart inside an interval continues it
    [range(0, 601, 10), range(0, 601, 10)],  # the clock went back: every interval overlaps
    [range(0, 601, 10), list(range(300, 1300, 10))],  # some overlap, the later ones do not
], ids=["one-run", "restart", "replayed", "partly-replayed"])
def test_at_once_and_one_by_one_store_the_same_rows(tmp_path: Path, monkeypatch,
                                                    runs: list) -> None:
    fallbacks: list[int] = []
    one_by_one = LedgerWriter.stored_one_by_one

    def counted(self, records):  # type: ignore[no-untyped-def]
        fallbacks.append(len(records))
        return one_by_one(self, records)
    monkeypatch.setattr(LedgerWriter, "stored_one_by_one", counted)
    batched = _runs(tmp_path / "batched.db", runs)
    fell_back = len(fallbacks)
    monkeypatch.setattr(LedgerWriter, "stored_at_once", lambda self, records: False)
    single = _runs(tmp_path / "single.db", runs)
    assert _contents(tmp_path / "batched.db") == _contents(tmp_path / "single.db")
    assert [r.refused_intervals for r in batched] == [r.refused_intervals for r in single]
    if len(runs) == 1 or runs[1][0] > runs[0][-1]:
        assert fell_back == 0  # nothing overlapped: never one by one
    else:
        assert fell_back >= 1 and batched[1].refused_intervals > 0


def test_an_overlapping_interval_adds_nothing_and_the_others_are_stored(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    _runs(db, [range(0, 601, 10)])
    # The minutes stored whole (the last one, seen but not observed yet, is continued).
    whole = "SELECT * FROM {} WHERE start < ? ORDER BY start, dev"
    before = [rows(db, whole.format(t), T0 + 600) for t in ("intervals", "holder_intervals")]
    second = _runs(db, [list(range(300, 1300, 10))])[0]
    assert second.refused_intervals > 0
    # They stay as they were, each share too; the later minutes came in whole.
    assert before[0] and before[1]
    assert [rows(db, whole.format(t), T0 + 600) for t in ("intervals", "holder_intervals")] \
        == before
    # (as a ledger that only the second run wrote books them)
    alone = tmp_path / "alone.db"
    _runs(alone, [list(range(300, 1300, 10))])
    later = {"intervals": "SELECT * FROM intervals WHERE start >= ? AND start < ? "
                          "ORDER BY start, dev",
             "holder_intervals": f"SELECT h.start, h.dev, o.user, {', '.join(HOLDER_COLUMNS)} "
                                 "FROM holder_intervals h JOIN holders o ON o.hid = h.hid "
                                 "WHERE h.start >= ? AND h.start < ? ORDER BY 1, 2, 3"}
    for query in later.values():
        booked = rows(db, query, T0 + 660, T0 + 1200)
        assert len({row[0] for row in booked}) >= 8
        assert booked == rows(alone, query, T0 + 660, T0 + 1200)

"""A ledger whose rows are a quarter hour long (a simulated bill's scratch ledger) rolls its
quarters up by copying its rows: each quarter holds one row per device and holder, whose
aggregates are its own values."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from allsmi.accounting.ledger.schema import DEVICE_SUMS, HOLDER_SUMS
from allsmi.accounting.ledger.write import sums

from .helpers import T0, config, device, record, rows, snap

QUARTER_ROWS = config("[ledger]\ninterval_seconds = 900\n")


def _snapshots() -> list:
    """Two hours and a half of two devices, every 20 s: holders coming and going (one, two,
    none), a label changed mid-quarter, a device lost for a while (unknown figures), power and
    utilization moving."""
    out = []
    for t in range(0, 9001, 20):
        users = (["alice"], ["alice", "bob"], [], ["carol"])[(t // 700) % 4]
        labels = {"team": "a" if t < 2000 else "b"}
        a = device("GPU-a", power=100.0 + t % 37, util=float(t % 91), users=users,
                   labels=labels, memory=1000 + t)
        b = device("GPU-b", power=None if 3000 <= t < 3500 else 80.0, util=None,
                   users=["dave"] if t % 1800 < 1000 else [],
                   health="lost" if 5000 <= t < 5300 else "ok")
        out.append(snap(T0 + t, a, b))
    return out


#: Beyond every row: nothing pending, every quarter is rolled up.
_ALL = 2**62


def _aggregated(path: Path, table: str) -> list[tuple]:
    """The quarters of ``table``'s rows as the roll-up's aggregating statements make them."""
    if table == "quarters":
        return rows(path, f"SELECT start - start % 900 AS q, dim, {sums(DEVICE_SUMS)} "
                          "FROM intervals WHERE start < coalesce((SELECT MIN(start) FROM pending "
                          f"WHERE tier = 900), {_ALL}) GROUP BY q, dim ORDER BY q, dim")
    return rows(path, f"SELECT h.start - h.start % 900 AS q, i.dim, h.hid, "
                      f"{sums(HOLDER_SUMS, 'h.')} FROM holder_intervals h JOIN intervals i "
                      "ON i.start = h.start AND i.dev = h.dev WHERE h.start < coalesce((SELECT "
                      f"MIN(start) FROM pending WHERE tier = 900), {_ALL}) GROUP BY q, i.dim, h.hid "
                      "ORDER BY q, i.dim, h.hid")


def _traced(monkeypatch) -> list[str]:
    """The statements the ledgers opened from now on run."""
    statements: list[str] = []
    connect = sqlite3.connect

    def tracing(*args, **kwargs):  # type: ignore[no-untyped-def]
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn
    monkeypatch.setattr(sqlite3, "connect", tracing)
    return statements


def test_quarter_long_rows_are_copied_into_the_quarters_as_their_aggregates(
        tmp_path: Path, monkeypatch) -> None:
    statements = _traced(monkeypatch)
    db = tmp_path / "l.db"
    record(db, _snapshots(), QUARTER_ROWS)
    monkeypatch.undo()
    quarters = rows(db, "SELECT * FROM quarters ORDER BY start, dim")
    holders = rows(db, "SELECT * FROM holder_quarters ORDER BY start, dim, hid")
    assert len(quarters) >= 18 and len(holders) >= 12  # (ten quarters of two devices)
    assert quarters == _aggregated(db, "quarters")
    assert holders == _aggregated(db, "holder_quarters")
    # (the types too: integers stay integers, unknown stays NULL)
    assert any(None in row for row in quarters) and any(None in row for row in holders)
    rolled = [s for s in statements if "INSERT INTO quarters" in s
              or "INSERT INTO holder_quarters" in s]
    assert len(rolled) >= 20 and not any("GROUP BY" in s for s in rolled)


def test_minute_rows_are_still_aggregated_into_their_quarters(tmp_path: Path,
                                                               monkeypatch) -> None:
    statements = _traced(monkeypatch)
    db = tmp_path / "l.db"
    record(db, _snapshots())
    monkeypatch.undo()
    assert rows(db, "SELECT * FROM quarters ORDER BY start, dim") == _aggregated(db, "quarters")
    assert rows(db, "SELECT * FROM holder_quarters ORDER BY start, dim, hid") == \
        _aggregated(db, "holder_quarters")
    assert any("INSERT INTO quarters" in s and "GROUP BY" in s for s in statements)

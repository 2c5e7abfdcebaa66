"""``allsmi serve --ledger`` sent SIGHUP (its terminal closed, an ssh session ended).

It used to die on the spot (SIGHUP's default action): exit -1 (129 to a shell), the ledger's
interval in progress lost, the collector and backends never closed. It now stops as for
SIGTERM, as ``allsmi record`` does: the interval in progress written, the ledger closed,
exit 0 (docs/exporter.md, "Exit codes").
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import pytest

from .server import run_serve
from .test_hostile_clients import SIMULATE, wait_for


def test_sighup_writes_the_ledgers_interval_in_progress_and_exits_0(tmp_path: Path) -> None:
    ledger = tmp_path / "usage.db"
    server = run_serve([*SIMULATE, "--ledger", str(ledger)], tmp=tmp_path)
    try:
        server.wait_ready()
        code = server.stop(signal.SIGHUP)
    finally:
        server.stop()
    output = server.output()
    assert code == 0, output[-3000:]
    assert "shutting down" in output, output[-3000:]
    with sqlite3.connect(ledger) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # the minute in progress, never committed before the signal, is there for every device
        assert db.execute("SELECT COUNT(DISTINCT dev) FROM intervals").fetchone()[0] == 41
    assert not Path(f"{ledger}-wal").exists() or Path(f"{ledger}-wal").stat().st_size == 0


@pytest.mark.long(20)
def test_serve_exits_1_when_ledger_intervals_are_still_unwritten(tmp_path: Path) -> None:
    """The ledger held by another writer when SIGTERM comes: the intervals in memory cannot be
    written. `allsmi record` exits 1 and says so; `allsmi serve --ledger` exited 0 (a clean
    shutdown to its supervisor) with only a log line, and the time was lost unnoticed."""
    ledger = tmp_path / "usage.db"
    server = run_serve([*SIMULATE, "--ledger", str(ledger)], tmp=tmp_path)
    try:
        server.wait_ready()
        wait_for(lambda: _intervals(ledger) > 0)  # the first checkpoint committed
        blocker = sqlite3.connect(str(ledger), isolation_level=None, timeout=30)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            wait_for(lambda: "not ready" in server.get("/ready").text
                     or "not written" in server.get("/ready").text, timeout=60)
            code = server.stop(timeout=40)  # (the stop retries the write for 10 s)
        finally:
            blocker.rollback()
            blocker.close()
    finally:
        server.stop()
    output = server.output()
    assert code == 1, output[-3000:]
    assert "could not be written" in output and str(ledger) in output, output[-3000:]


def _intervals(ledger: Path) -> int:
    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT COUNT(*) FROM intervals").fetchone()[0])
    except sqlite3.Error:
        return 0

"""Ledger writes that fail (issue 9, item 2): no interval is lost once the fault clears.

Faults on a real SQLite file: the database held by another writer (``BEGIN EXCLUSIVE`` from a
second connection, or process), a full filesystem (a tiny tmpfs, when this runs as root), and
one record SQLite cannot store. ``allsmi record`` is driven as a subprocess: it keeps what it
could not write, retries, says so on stderr, and exits 1 if anything was still unwritten at
shutdown.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from allsmi.accounting.recorder import CLOSE_RETRY_SECONDS, MAX_UNWRITTEN, LedgerRecorder

from .helpers import T0, config, device, rows, snap


def sized(dev_id: str, bad: bool) -> object:
    """A device whose record SQLite cannot store when ``bad`` (2**70 bytes of memory: no SQLite
    integer holds it). The schema keeps byte counts within 64 bits, so the value is put past it
    here, standing for any record whose write fails alone."""
    dev = device(dev_id, memory=1)
    if bad:
        object.__setattr__(dev, "memory_used_bytes", 2**70)
    return dev


def hold(db: Path) -> sqlite3.Connection:
    """Another connection that holds the write lock until it is rolled back."""
    conn = sqlite3.connect(str(db), isolation_level=None, timeout=30)
    conn.execute("BEGIN EXCLUSIVE")
    return conn


def minutes(db: Path) -> dict[int, tuple[int, int]]:
    """{interval start: (devices, smallest observed ms)}."""
    return {s: (n, lo) for s, n, lo in rows(
        db, "SELECT start, COUNT(*), MIN(observed_ms) FROM intervals GROUP BY start")}


# -- in process: the recorder's bookkeeping ------------------------------------------------

@pytest.fixture()
def short_lock_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's wait for a lock cut from 2 s to 50 ms, for the tests that count attempts, not
    seconds (each failed attempt waited the whole 2 s)."""
    import allsmi.accounting.ledger.store as store
    monkeypatch.setattr(store, "BUSY_TIMEOUT_SECONDS", 0.05)


@pytest.mark.usefixtures("short_lock_waits")
def test_locked_database_keeps_intervals_and_writes_them_later(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, config())
    feed = lambda t: rec.on_snapshot(snap(T0 + t, device("GPU-a", power=100.0, users=["ann"]),  # noqa: E731
                                          device("GPU-b", power=50.0)))
    for t in range(0, 70, 10):  # the first minute is written
        feed(t)
    assert rec.unwritten == 0 and rec.write_errors == 0
    assert minutes(db)[T0] == (2, 60_000)  # (and the minute in progress, so far: checkpoints)
    blocker = hold(db)
    for t in range(70, 250, 10):  # minutes 1, 2 and 3 complete while the database is held
        feed(t)
    assert rec.unwritten == 6, "three minutes of two devices kept in memory"
    # the checkpoint of the minute in progress at 70 s; retries 5, 10, 20 s after each failure
    # (80, 90, 110: issue 32, a lock held for seconds costs seconds); minutes 1, 2 and 3 as
    # they complete (120, 180, 240), the retries' wait doubling up to a minute meanwhile
    assert rec.write_errors == 7 and "locked" in (rec.last_error or "")
    blocker.rollback()
    blocker.close()
    for t in range(250, 310, 10):
        feed(t)  # minute 4 completes at 300: the held minutes go with it
    assert rec.unwritten == 0 and rec.last_error is None
    rec.close()
    got = minutes(db)
    assert sorted(got) == [T0 + 60 * m for m in range(5)]  # (the sample at 300 s ended minute 4)
    assert all(n == 2 and lo == 60_000 for s, (n, lo) in got.items() if s < T0 + 300)
    # Energy and the user's share survived the retry too: 100 W for 5 minutes.
    assert rows(db, "SELECT SUM(energy_mj) FROM intervals i JOIN devices d ON d.dev = i.dev "
                    "WHERE d.device_id = 'GPU-a'") == [(100 * 300 * 1000,)]
    assert rows(db, "SELECT SUM(observed_ms) FROM holder_intervals") == [(300_000,)]


def test_ids_of_a_rolled_back_transaction_are_not_reused(tmp_path: Path) -> None:
    """A device first seen in a write that was rolled back is stored with its device row."""
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, config())
    for t in range(0, 130, 10):
        # Minute 1: GPU-new (first seen) is inserted, then GPU-zbad's record fails the
        # transaction, rolling GPU-new's device, dim and user rows back.
        devices = [device("GPU-a"), sized("GPU-zbad", 60 <= t < 120)]
        if t >= 60:
            devices.append(device("GPU-new", users=["zoe"]))
        rec.on_snapshot(snap(T0 + t, *devices))
    rec.close()
    assert rows(db, "SELECT COUNT(*) FROM intervals i LEFT JOIN dims m ON m.dim = i.dim "
                    "LEFT JOIN devices d ON d.dev = i.dev WHERE m.dim IS NULL OR d.dev IS NULL") \
        == [(0,)], "every stored interval refers to a stored device and dim"
    assert rows(db, "SELECT d.device_id, COUNT(*) FROM intervals i JOIN devices d ON d.dev = i.dev "
                    "JOIN dims m ON m.dim = i.dim GROUP BY d.device_id") == [
        ("GPU-a", 2), ("GPU-new", 1), ("GPU-zbad", 1)]  # (the samples at 120 s end minute 60)
    assert rows(db, "SELECT n.user, u.observed_ms FROM holder_intervals u "
                    "JOIN holders n ON n.hid = u.hid") == [("zoe", 60_000)]


def test_one_bad_record_does_not_block_the_others(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, config())
    for t in range(0, 130, 10):
        # 2**70 bytes cannot be stored in an SQLite integer: that record, and only it, fails.
        rec.on_snapshot(snap(T0 + t, device("GPU-good", power=10.0),
                             sized("GPU-bad", 60 <= t < 120)))
    started = time.monotonic()
    rec.close()
    # A record the ledger refuses is refused again: closing does not retry it for
    # CLOSE_RETRY_SECONDS as it does a locked or full database.
    assert time.monotonic() - started < CLOSE_RETRY_SECONDS / 2
    assert rec.write_errors >= 1 and rec.unwritten == 1, "the bad minute is kept, not dropped"
    assert rows(db, "SELECT d.device_id, i.start FROM intervals i JOIN devices d ON d.dev = i.dev "
                    "ORDER BY 1, 2") == [("GPU-bad", T0), ("GPU-good", T0),
                                         ("GPU-good", T0 + 60)]  # (120 s: minute 60's end)


@pytest.mark.usefixtures("short_lock_waits")
def test_unwritten_intervals_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import allsmi.accounting.recorder as recorder
    monkeypatch.setattr(recorder, "MAX_UNWRITTEN", 3)
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, config())
    blocker = hold(db)
    for t in range(0, 310, 10):  # five minutes complete; only the newest three are kept
        rec.on_snapshot(snap(T0 + t, device("GPU-a")))
    assert rec.unwritten == 3 and rec.dropped_intervals == 2
    blocker.rollback()
    blocker.close()
    rec.close()
    assert sorted(minutes(db)) == [T0 + 120, T0 + 180, T0 + 240]  # (300 s: minute 4's end)
    assert MAX_UNWRITTEN >= 10_000  # the documented bound is generous


# -- as a user runs it ---------------------------------------------------------------------

def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_LEDGER": "",
            "ALLSMI_CONFIG": "", "ALLSMI_SIMULATE_SPEED": "60"}


@pytest.fixture()
def recorder(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    procs: list[subprocess.Popen[str]] = []

    def start(db: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-m", "allsmi", "record", "--simulate", "mixed",
                                 "--interval", "0.25", "--ledger", str(db)], env=env(tmp_path),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def wait_for(condition, what: str, proc: subprocess.Popen[str], timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"recorder exited early: {proc.communicate()[1]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def latest(db: Path) -> int:
    try:
        return rows(db, "SELECT COALESCE(MAX(start), 0) FROM intervals")[0][0]
    except sqlite3.OperationalError:
        return 0


def assert_no_holes(db: Path, last_complete: int) -> None:
    got = minutes(db)
    first = min(got)
    # Every minute after the first, up to the last complete one, is there for all 41 devices.
    for start in range(first + 60, last_complete + 60, 60):
        assert got.get(start, (0, 0))[0] == 41, f"minute {start} lost"
        assert got[start][1] >= 59_000, f"minute {start} incomplete: {got[start]}"


def test_record_survives_a_held_database(tmp_path: Path, recorder) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "ledger.db"
    proc = recorder(db)
    wait_for(lambda: latest(db) > 0, "a first committed minute", proc)
    blocker = hold(db)
    held_at = time.monotonic()
    time.sleep(6)  # six simulated minutes complete while the database is held
    blocker.rollback()
    blocker.close()
    held_for = time.monotonic() - held_at
    before = latest(db)
    wait_for(lambda: latest(db) >= before + 5 * 60, "the held minutes written", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "not written, kept for the next write" in err and "locked" in err
    assert_no_holes(db, latest(db) - 60)
    assert held_for >= 6


@pytest.mark.long(17)
def test_record_exits_1_when_intervals_are_still_unwritten(tmp_path: Path, recorder) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "ledger.db"
    proc = recorder(db)
    wait_for(lambda: latest(db) > 0, "a first committed minute", proc)
    blocker = hold(db)
    try:
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        blocker.rollback()
        blocker.close()
    assert proc.returncode == 1, err
    assert out == ""
    assert "could not be written" in err and str(db) in err


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                           str(where)], capture_output=True, timeout=30).returncode == 0


def test_record_survives_a_full_filesystem(tmp_path: Path, recorder) -> None:  # type: ignore[no-untyped-def]
    mnt = tmp_path / "tiny"
    if not _mount_tmpfs(mnt, "4m"):
        pytest.skip("mounting a tiny tmpfs needs root (CAP_SYS_ADMIN); the held-database "
                    "tests cover the same path portably")
    try:
        db = mnt / "ledger.db"
        proc = recorder(db)
        wait_for(lambda: latest(db) > 0, "a first committed minute", proc)
        ballast = mnt / "ballast"
        fd = os.open(ballast, os.O_CREAT | os.O_WRONLY, 0o600)
        try:  # fill the filesystem to the last block
            for chunk in (65536, 512):
                try:
                    while True:
                        os.write(fd, b"\0" * chunk)
                except OSError:
                    pass
        finally:
            os.close(fd)
        time.sleep(5)
        full_at = latest(db)
        ballast.unlink()
        wait_for(lambda: latest(db) >= full_at + 4 * 60, "the kept minutes written", proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "not written, kept for the next write" in err
        assert_no_holes(db, latest(db) - 60)
        assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


@pytest.mark.long(12)
def test_ready_says_503_during_a_retry_that_fails_again(tmp_path: Path) -> None:
    """Issue 19 item 8: the intervals stay counted as unwritten while a write is attempted, so
    /ready never says 200 (and the gauge never says 0) in the middle of a failing retry."""
    import threading

    from allsmi.exporter.exposition import Exposition

    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, config())
    expo = Exposition(ledger=rec)
    feed = lambda t: rec.on_snapshot(snap(T0 + t, device("GPU-a", power=100.0)))  # noqa: E731
    for t in range(0, 70, 10):
        feed(t)
    expo.on_snapshot(snap(T0 + 70, device("GPU-a", power=100.0)))
    assert expo.readiness() == (True, "ready")
    blocker = hold(db)
    try:
        for t in range(70, 130, 10):
            feed(t)  # minute 1 completes at 120: the write fails after SQLite's 2 s wait
        assert rec.unwritten == 1 and rec.write_errors >= 1
        errors = rec.write_errors
        assert expo.readiness()[0] is False
        for t in range(130, 180, 10):
            feed(t)  # (no checkpoint while minute 1 waits)
        retry = threading.Thread(target=feed, args=(180,))  # minute 2 completes: a retry, held 2 s
        retry.start()
        seen: list[tuple[int, bool]] = []
        while retry.is_alive():
            seen.append((rec.unwritten, expo.readiness()[0]))
            time.sleep(0.01)
        retry.join()
        assert rec.write_errors == errors + 1 and rec.unwritten == 2
        assert len(seen) > 20
        assert all(n > 0 for n, _ in seen), "the unwritten gauge dropped to 0 during the retry"
        assert not any(ready for _, ready in seen), "/ready said 200 during the retry"
    finally:
        blocker.rollback()
        blocker.close()
    feed(240)
    assert rec.unwritten == 0 and expo.readiness() == (True, "ready")
    rec.close()


def test_a_short_lock_costs_seconds_of_ready_not_the_rest_of_the_minute(tmp_path: Path) -> None:
    """Issue 32, item 11: after a transient write lock, /ready stayed 503 (and checkpoints
    paused) until the next minute boundary, ~21 s in the report. Unwritten intervals are now
    retried 5 s after the failure."""
    from allsmi.exporter.exposition import Exposition

    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, config())
    expo = Exposition(ledger=rec)
    feed = lambda t: rec.on_snapshot(snap(T0 + t, device("GPU-a", power=100.0)))  # noqa: E731
    for t in range(0, 60):
        feed(t)
    expo.on_snapshot(snap(T0 + 59, device("GPU-a", power=100.0)))
    blocker = hold(db)
    try:
        feed(60)  # minute 0 completes: its write waits SQLite's 2 s and fails
    finally:
        blocker.rollback()
        blocker.close()
    assert rec.unwritten == 1 and expo.readiness()[0] is False
    ready_at = None
    for t in range(61, 120):
        feed(t)
        if expo.readiness() == (True, "ready"):
            ready_at = t
            break
    assert ready_at is not None and ready_at <= 66, ready_at
    assert rec.unwritten == 0 and T0 in minutes(db)
    for t in range(ready_at + 1, ready_at + 12):
        feed(t)  # checkpoints of minute 1 resumed: it is on disk before it completes
    assert T0 + 60 in minutes(db)
    rec.close()


def test_record_retries_at_its_stop_a_lock_held_a_few_seconds_more(tmp_path: Path,
                                                                    recorder) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM while another program holds the database (a backup, the sqlite3 shell): the
    stop tried once (SQLite's 2 s wait) and gave every interval held in memory up, exit 1. It
    now retries for a while: a lock released a few seconds later finds them written, exit 0."""
    import threading
    db = tmp_path / "ledger.db"
    proc = recorder(db)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()

    def failed_writes(at_least: int) -> None:
        deadline = time.monotonic() + 60
        while sum("not written" in line for line in lines) < at_least and proc.poll() is None:
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)

    wait_for(lambda: latest(db) > 0, "a first committed minute", proc)
    blocker = hold(db)
    try:
        failed_writes(1)  # intervals wait in memory
        proc.send_signal(signal.SIGTERM)
        failed_writes(3)  # and the stop could not write them either (the last cycle, the stop)
    finally:
        blocker.rollback()
        blocker.close()
    proc.wait(timeout=60)
    reader.join(10)
    err = "".join(lines)
    assert proc.returncode == 0, err
    assert "could not be written" not in err
    assert latest(db) > 0 and rows(db, "PRAGMA integrity_check") == [("ok",)]

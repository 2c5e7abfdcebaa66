"""The ledger as an operator running it for months meets it: an export while the recorder rolls
up, a recorder whose clock is behind what the ledger has already rolled up and pruned, a ledger
read from a read-only mount or a backup copy. Real SQLite files; ``allsmi export`` as a
subprocess where the outside can tell."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sqlite3
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from allsmi.accounting.ledger.read import LedgerReader
from allsmi.accounting.ledger.source import ledger_parts
from allsmi.accounting.recorder import LedgerRecorder

from .helpers import T0, config, device, record, rows, snap, window


def export(tmp_path: Path, db: Path, since: float, until: float,
           *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_CONFIG": "",
           "ALLSMI_LEDGER": ""}
    return subprocess.run(
        [sys.executable, "-m", "allsmi", "export", "--ledger", str(db), "--since", iso(since),
         "--until", iso(until), "--format", "json", *args],
        env=env, capture_output=True, text=True, timeout=120)


def iso(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.timezone.utc).isoformat()


def held(when: float, user: str = "ann") -> Any:
    return snap(when, device(power=100, util=50, users=[user]))


def test_an_export_sees_one_commit_while_the_recorder_rolls_a_quarter_up(tmp_path: Path,
                                                                         monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The recorder completes the quarter 00:00-00:15 (rolls it up, no longer pending) between
    the export reading which quarters are pending and reading the roll-ups: the export read the
    quarter from the raw minutes and from the roll-up, 30 minutes of a 15-minute window."""
    db = tmp_path / "ledger.db"
    rec = LedgerRecorder(db, config())
    for i in range(90):  # 00:00:00 to 00:14:50: the quarter is pending
        rec.on_snapshot(held(T0 + 10 * i))
    real_plan = LedgerReader.plan
    depth = [0]
    done: list[bool] = []

    def plan(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        depth[0] += 1
        try:
            return real_plan(self, *args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0 and not done:  # the plan is made: now the recorder commits
                done.append(True)
                rec.on_snapshot(held(T0 + 905))

    monkeypatch.setattr(LedgerReader, "plan", plan)
    parts, holders = ledger_parts(db, window(T0, T0 + 900), by_holder=True)
    rec.close()
    assert done
    [part] = parts
    assert part.observed_s <= 900
    assert part.observed_s == pytest.approx(890)  # what was committed when the export began
    assert sum(h.observed_s for h in holders) == part.observed_s  # the holders are the device's
    assert sum(h.allocated_s or 0 for h in holders) == part.allocated_s


def test_a_recorder_behind_the_pruned_minutes_neither_loses_nor_invents(tmp_path: Path) -> None:
    """An hour recorded and rolled up, its raw minutes pruned (retention 0.01 days); then a
    recorder restarted with its wall clock 55 minutes behind (an RTC set wrong, a VM restored)
    records two minutes into the first quarter, where no raw row is left to refuse them. They
    rolled that quarter up again from its raw minutes alone: 13 recorded minutes gone, bob's 2
    billed in their place. Now they are refused and counted, and the hour bills as recorded."""
    db = tmp_path / "ledger.db"
    cfg = config("[ledger]\nretention_days = 0.01\n")
    record(db, [held(T0 + 10 * i) for i in range(361)], cfg)
    assert rows(db, "SELECT MIN(start) FROM intervals")[0][0] > T0 + 900  # pruned
    before = export(tmp_path, db, T0, T0 + 3600)
    assert before.returncode == 0, before.stderr
    late = record(db, [held(T0 + 300 + 10 * i, "bob") for i in range(13)], cfg)
    assert late.refused_intervals > 0
    record(db, [held(T0 + 3600 + 10 * i) for i in range(100)], cfg)  # rolls up what is due
    assert rows(db, "SELECT observed_ms FROM quarters WHERE start = ?", T0) == [(900_000,)]
    after = export(tmp_path, db, T0, T0 + 3600, "--group-by", "resource_group,user")
    assert after.returncode == 0, after.stderr
    billed = {r["user"]: r["observed_device_hours"] for r in json.loads(after.stdout)["rows"]}
    assert billed == {"ann": pytest.approx(1.0), None: 0.0}
    assert export(tmp_path, db, T0, T0 + 3600).stdout == before.stdout


def _mount_read_only(source: Path, target: Path) -> bool:
    """``source`` bind-mounted read-only on ``target`` (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    target.mkdir()
    done = subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(target)],
                          capture_output=True, timeout=30).returncode == 0
    if done and os.access(target, os.W_OK):  # an old mount(8) that bound it writable
        subprocess.run(["umount", str(target)], capture_output=True, timeout=30)
        return False
    return done


def test_a_ledger_on_a_read_only_mount_is_billed(tmp_path: Path) -> None:
    """A ledger closed cleanly (no -wal, no -shm), on a read-only mount (a backup, a snapshot
    of /var/lib/allsmi): SQLite cannot create the -shm a WAL database needs; it was "unable to
    open database file" (exit 1). A copy whose -wal holds data, without its -shm, cannot be read
    there, and is said so (never billed without what the log holds)."""
    store = tmp_path / "store"
    store.mkdir()
    db = store / "ledger.db"
    record(db, [held(T0 + 10 * i) for i in range(361)])
    for extra in ("ledger.db-wal", "ledger.db-shm", "ledger.db.lock"):
        (store / extra).unlink(missing_ok=True)
    expected = export(tmp_path, db, T0, T0 + 3600)
    assert expected.returncode == 0, expected.stderr
    (store / "ledger.db-shm").unlink(missing_ok=True)  # (the export left one)
    # a copy whose write-ahead log holds a commit, without its -shm
    copy = store / "copy.db"
    shutil.copy(db, copy)
    conn = sqlite3.connect(copy)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("INSERT INTO meta (key, value) VALUES ('note', 'in the log only')")
    conn.commit()
    shutil.copy(store / "copy.db-wal", tmp_path / "copy.db-wal")
    conn.close()  # (checkpoints the log and removes it: put the log back, without -shm)
    shutil.copy(tmp_path / "copy.db-wal", store / "copy.db-wal")
    (store / "copy.db-shm").unlink(missing_ok=True)
    mount = tmp_path / "ro"
    if not _mount_read_only(store, mount):
        pytest.skip("bind-mounting read-only needs root")
    try:
        got = export(tmp_path, mount / "ledger.db", T0, T0 + 3600)
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["rows"] == json.loads(expected.stdout)["rows"]
        refused = export(tmp_path, mount / "copy.db", T0, T0 + 3600)
        assert refused.returncode == 1 and refused.stdout == ""
        assert "copy.db-wal" in refused.stderr and "writable directory" in refused.stderr
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, timeout=30)


def run_record(tmp_path: Path, db: Path) -> subprocess.CompletedProcess[str]:
    """``allsmi record`` on ``db``, stopped after 20 s if it records (it should not)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_CONFIG": "",
           "ALLSMI_LEDGER": ""}
    return subprocess.run([sys.executable, "-m", "allsmi", "record", "--simulate", "mixed",
                           "--ledger", str(db)], env=env, capture_output=True, text=True,
                          timeout=20)


def test_another_programs_database_is_not_recorded_into(tmp_path: Path) -> None:
    """``--ledger`` mistyped into another program's SQLite file: it was turned to WAL mode and
    given eleven tables beside its own, and recorded into."""
    db = tmp_path / "app.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers VALUES (1, 'ann')")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    out = run_record(tmp_path, db)
    assert out.returncode == 1, out.stderr
    assert "not an allsmi ledger" in out.stderr and "customers" in out.stderr
    assert db.read_bytes() == before
    assert rows(db, "PRAGMA journal_mode") == [("delete",)]


def test_a_ledger_of_a_newer_schema_is_refused_unchanged(tmp_path: Path) -> None:
    """After a rollback of allsmi, a ledger a newer version upgraded (here: version 7, without
    the table holder_days): refused, as before, but no longer after creating the tables it
    lacks in it."""
    db = tmp_path / "ledger.db"
    record(db, [held(T0 + 10 * i) for i in range(13)])
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    conn.execute("DROP TABLE holder_days")
    conn.commit()
    conn.close()
    out = run_record(tmp_path, db)
    assert out.returncode == 1, out.stderr
    assert "schema version 7 is not supported" in out.stderr
    assert rows(db, "SELECT name FROM sqlite_master WHERE name = 'holder_days'") == []


@pytest.mark.parametrize("key,value", [("schema_version", "six"), ("interval_seconds", "1m")])
def test_a_damaged_meta_table_is_said_not_a_traceback(tmp_path: Path, key: str, value: str) -> None:
    db = tmp_path / "ledger.db"
    record(db, [held(T0 + 10 * i) for i in range(13)])
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))
    conn.commit()
    conn.close()
    for out in (run_record(tmp_path, db), export(tmp_path, db, T0, T0 + 120)):
        assert out.returncode == 1, out.stderr
        assert out.stdout == ""
        assert "damaged" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.long(13)
def test_a_ledger_deleted_under_the_recorder_is_said_not_written_into(tmp_path: Path) -> None:
    """A clean-up job deletes the ledger while ``allsmi record`` runs: SQLite went on writing
    into the deleted file, every minute lost with it, and the recorder stopped with exit 0 as if
    all was well. Now the intervals are kept, the failure is logged, and it exits 1 saying so."""
    db = tmp_path / "ledger.db"
    proc = _recording(tmp_path, db)
    try:
        for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        time.sleep(3)  # three simulated minutes
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err
    assert out == ""
    assert "was deleted while this process recorded into it" in err
    assert "could not be written" in err


def _recording(tmp_path: Path, db: Path) -> "subprocess.Popen[str]":
    """``allsmi record`` of the simulated node (a simulated minute a second) into ``db``, once
    it has committed a minute."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_CONFIG": "",
           "ALLSMI_LEDGER": "", "ALLSMI_SIMULATE_SPEED": "60"}
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", "record", "--simulate", "mixed",
                             "--interval", "0.25", "--ledger", str(db)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    try:
        while not db.exists() or not _committed(db):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no minute committed"
            time.sleep(0.1)
    except BaseException:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        raise
    return proc


def _committed(db: Path) -> bool:
    try:
        return bool(rows(db, "SELECT COUNT(*) FROM intervals")[0][0])
    except sqlite3.Error:
        return False


def test_a_write_ahead_log_deleted_under_the_recorder_loses_nothing(tmp_path: Path) -> None:
    """``rm ledger.db-wal`` (a clean-up job, someone taking it for a temporary file) while
    ``allsmi record`` runs: SQLite went on writing into the deleted log, which no reader saw (an
    export failed with a disk I/O error), and a SIGKILL then lost every interval committed since
    the last checkpoint of the log: here all of them, the ledger left without even its tables.
    Now what the log held is written into the ledger and the log opened anew: readers see the
    intervals written after the deletion, and a SIGKILL loses only seconds."""
    db = tmp_path / "ledger.db"
    proc = _recording(tmp_path, db)
    try:
        (tmp_path / "ledger.db-wal").unlink()
        before = _newest(db)
        deadline = time.monotonic() + 30
        while _newest(db) <= before + 120:  # two more simulated minutes, seen by a reader
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "what was written after the log's deletion is " \
                "not seen"
            time.sleep(0.1)
        seen = _newest(db)
        proc.kill()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err
    assert "write-ahead log" in err and "nothing is lost" in err
    assert _newest(db) >= seen  # what a reader saw survives the SIGKILL
    (first, last, count), = rows(db, "SELECT MIN(start), MAX(start), COUNT(DISTINCT start) "
                                     "FROM intervals")
    assert count == (last - first) // 60 + 1  # every minute from the first, none lost


def _newest(db: Path) -> float:
    try:
        return float(rows(db, "SELECT MAX(start + last_ms / 1000.0) FROM intervals")[0][0] or 0)
    except sqlite3.Error:
        return 0.0


@pytest.mark.parametrize("option,name", [
    ("--output", "ledger.db"), ("--output", "ledger.db-shm"), ("--textfile", "ledger.db"),
    ("--output", "other.db"), ("--textfile", "other.db")])
def test_a_bill_or_a_status_never_replaces_a_ledger(tmp_path: Path, option: str, name: str) -> None:
    """``--output`` (or ``--textfile``, which every run rewrites, failing ones included) naming
    the ledger, one of its files or another ledger: written atomically, the bill replaced months
    of recorded usage. Refused (exit 2) before anything is written; the status of the failure
    is not written there either."""
    db = tmp_path / "ledger.db"
    record(db, [held(T0 + 10 * i) for i in range(361)])
    shutil.copy(db, tmp_path / "other.db")
    (tmp_path / "ledger.db-shm").write_bytes(b"\0" * 32768)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for extra in ((), ("--period", "not-a-period")):
        out = export(tmp_path, db, T0, T0 + 3600, option, str(tmp_path / name), *extra)
        assert out.returncode == 2, out.stderr
        assert out.stdout == ""
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("command", [["report"], ["idle", "--format", "csv"], ["waste", "--format", "json"]])
@pytest.mark.parametrize("name", ["ledger.db", "ledger.db-wal", "other.db"])
def test_a_report_never_replaces_a_ledger(tmp_path: Path, command: list[str], name: str) -> None:
    """``report``, ``idle`` and ``waste`` refuse an ``--output`` that is the ledger, one of its
    files or another ledger, as ``export`` does (before, ``report --output ledger.db`` wrote the
    HTML over the recorded usage)."""
    db = tmp_path / "ledger.db"
    record(db, [held(T0 + 10 * i) for i in range(361)])
    shutil.copy(db, tmp_path / "other.db")
    (tmp_path / "ledger.db-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 28)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_CONFIG": "",
           "ALLSMI_LEDGER": ""}
    out = subprocess.run([sys.executable, "-m", "allsmi", command[0], "--ledger", str(db),
                          "--since", iso(T0), "--until", iso(T0 + 3600), *command[1:],
                          "--output", str(tmp_path / name)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert "is a ledger" in out.stderr, out.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before

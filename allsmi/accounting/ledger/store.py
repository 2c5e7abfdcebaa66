"""The ledger: an embedded SQLite database of per-device usage per interval.

This module opens, locks, checks and upgrades the file; the tables are described in
:mod:`allsmi.accounting.ledger.schema`, writing is :mod:`allsmi.accounting.ledger.write` and
reading :mod:`allsmi.accounting.ledger.read`. One writer per file: a lock on ``PATH.lock`` next to
the file that ``PATH`` resolves to, through any symbolic links, and an ``flock`` on the database
file itself, which every name of it shares (a hard link, a bind mount into a container: the
same device and inode, but SQLite would give each name its own WAL). Readers open it
read-only while the writer writes (WAL).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Iterator, Mapping

from allsmi.accounting.ledger.read import LedgerReader
from allsmi.accounting.ledger.schema import (OLD_SCHEMA_VERSIONS, SCHEMA, SCHEMA_VERSION, Dim,
                                            Holder, IntervalRecord, LedgerError, Share, Totals,
                                            labels_json, legacy_views, upgrade)
from allsmi.accounting.ledger.write import TIERS, LedgerWriter
from allsmi.support.atomic import make_private_dirs

log = logging.getLogger(__name__)

#: SQLITE_CANTOPEN (``sqlite3.SQLITE_CANTOPEN`` from Python 3.11 on).
_CANTOPEN = 14
#: Another writer (the sqlite3 shell, a backup tool) holding the database: the writer waits
#: this long, then the recorder keeps the intervals in memory and retries later rather than
#: stall the collector that calls it.
BUSY_TIMEOUT_SECONDS = 2.0

__all__ = ["Dim", "Holder", "IntervalRecord", "Ledger", "LedgerError", "SCHEMA_VERSION", "Share",
           "TIERS", "Totals", "labels_json"]


def _create_private(path: Path) -> bool:
    """Create ``path`` empty with mode 0600 unless it exists; True when created."""
    make_private_dirs(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _file_id(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of ``path``, ``None`` when it does not exist."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def _last_modified(path: Path) -> float | None:
    """The newest modification time of ``path`` and its ``-wal`` file, ``None`` when neither
    exists (in WAL mode the writes of a running recorder change the ``-wal`` file only)."""
    times = []
    for name in (path, path.with_name(path.name + "-wal")):
        try:
            times.append(os.stat(name).st_mtime)
        except OSError:
            pass
    return max(times) if times else None


class Ledger(LedgerWriter, LedgerReader):
    """A ledger file, opened for writing (one writer, enforced by a lock) or read-only."""

    def __init__(self, path: str | os.PathLike[str], *, interval_seconds: int | None = None,
                 readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        #: When the file (or its write-ahead log) was last changed before this opening: the
        #: wall-clock time of its last write, ``None`` for a new file (see the recorder's
        #: clock hold, :mod:`allsmi.accounting.recorderhold`).
        self.last_modified = _last_modified(self.path)
        self._lock = threading.Lock()
        self._lock_fds: list[int] = []
        self._dev_ids: dict[str, int] = {}
        self._dim_ids: dict[Dim, int] = {}
        self._hids: dict[Holder, int] = {}
        self.refused: list[tuple[int, str]] = []
        #: The (device, inode) of the write-ahead log the writer's connection writes into.
        self._wal: tuple[int, int] | None = None
        self._wal_file: Path | None = None
        if readonly:
            if not self.path.is_file():
                raise LedgerError(f"no ledger at {self.path}")
            try:
                self._db = self._connect_readonly()
                self.interval_seconds = self._read_meta(interval_seconds)
            except sqlite3.Error as exc:
                self._abandon()
                raise LedgerError(f"cannot read the ledger {self.path}: {exc}") from None
            except LedgerError:
                self._abandon()
                raise
            return
        try:
            _create_private(self.path)
            self._take_lock()
            self._connect_writer(refuse_unknown=True)
            self._db.executescript(SCHEMA)
            self.interval_seconds = self._init_meta(interval_seconds or 60)
            self._wal = _file_id(self._wal_path())
        except sqlite3.Error as exc:
            self._abandon()
            raise LedgerError(f"cannot open the ledger {self.path}: {exc}") from None
        except OSError as exc:
            self._abandon()
            raise LedgerError(f"cannot open the ledger {self.path}: {exc.strerror or exc}") from None

    # -- opening -------------------------------------------------------------
    def _connect_writer(self, refuse_unknown: bool = False) -> None:
        """Open the writer's connection in WAL mode (``refuse_unknown``: first refuse a file
        that is no ledger of a known schema, before anything is changed in it)."""
        self._db = db = sqlite3.connect(str(self.path), check_same_thread=False,
                                        isolation_level=None)
        if refuse_unknown:
            self._refuse_unknown()
        db.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed interval survives power loss too; one commit a minute is cheap.
        db.execute("PRAGMA synchronous=FULL")
        db.execute(f"PRAGMA busy_timeout={round(BUSY_TIMEOUT_SECONDS * 1000)}")

    def _wal_path(self) -> Path:
        """The write-ahead log's path (beside the file that ``path`` resolves to), resolved
        once."""
        if self._wal_file is None:
            real = self.path.resolve()
            self._wal_file = real.with_name(real.name + "-wal")
        return self._wal_file

    def _connect_readonly(self) -> sqlite3.Connection:
        """A read-only connection, also to a ledger where its ``-shm`` file cannot be created
        (a read-only mount, a backup copy): SQLite needs one for a database in WAL mode. Without
        a write-ahead log holding data (a ledger closed cleanly, or copied without it) nothing
        can change it there, so it is opened ``immutable``; a log that holds data and has no
        ``-shm`` beside it cannot be read there, and is said so (never billed without it)."""
        real = self.path.resolve()
        try:
            return self._connect(real.as_uri() + "?mode=ro")
        except sqlite3.OperationalError as exc:
            # (os.access: False on a read-only mount, for root too)
            if getattr(exc, "sqlite_errorcode", _CANTOPEN) != _CANTOPEN \
                    or os.access(real.parent, os.W_OK):
                raise
            wal = real.with_name(real.name + "-wal")
            try:
                pending = wal.stat().st_size
            except FileNotFoundError:
                pending = 0
            if pending:
                raise sqlite3.OperationalError(
                    f"{exc}: its write-ahead log {wal} holds {pending} bytes that SQLite cannot "
                    f"read where it cannot create {real.name}-shm (a read-only directory or mount); "
                    "copy the ledger with its -wal file to a writable directory and read the "
                    "copy") from None
            return self._connect(real.as_uri() + "?mode=ro&immutable=1")

    @staticmethod
    def _connect(uri: str) -> sqlite3.Connection:
        db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        try:  # (reading opens the WAL index: a missing -shm fails here, not in a later read)
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def scratch(self) -> None:
        """Give up durability for a temporary ledger deleted when its command ends (a
        simulation being billed): commits are not synced to disk, since no crash or power
        loss can lose what is thrown away anyway."""
        self._db.execute("PRAGMA synchronous=OFF")

    def _take_lock(self) -> None:
        # Keyed by the file itself, not the name given: a symbolic link to the database (or to
        # a directory above it) or a relative path must find the same PATH.lock (which older
        # versions take too). A hard link or a bind mount is another name for the same inode
        # that PATH.lock cannot see: the flock on the database file itself (its device and
        # inode) is what they share. flock locks do not interact with SQLite's own (POSIX
        # record) locks on Linux, and this descriptor stays open until the connection is
        # closed (closing one would drop SQLite's record locks).
        real = self.path.resolve()
        for path in (real.with_name(real.name + ".lock"), real):
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._release_lock()
                links = os.stat(real).st_nlink
                names = f" ({links} hard links name this file)" if links > 1 else ""
                raise LedgerError(
                    f"the ledger {self.path} is already being recorded by another process "
                    f"(allsmi record or allsmi serve --ledger), possibly through another name for "
                    f"the same file: a hard link or a bind mount{names}") from None
            self._lock_fds.append(fd)

    def _check_file(self) -> None:
        """Refuse to write into a ledger file that was deleted while it was open (a clean-up
        job, a mistaken ``rm``): SQLite would go on writing into it, and every interval would be
        lost with it, silently, until a restart. The intervals are kept in memory and retried
        instead (loudly: logged, counted, ``/ready`` 503, ``allsmi record`` exits 1). A file
        renamed, or linked elsewhere, is still written (nothing is lost). A write-ahead log
        deleted while it was open is written into the ledger file and opened anew (logged)."""
        if self._lock_fds and os.fstat(self._lock_fds[-1]).st_nlink == 0:
            raise LedgerError(f"the ledger {self.path} was deleted while this process recorded "
                              "into it: what it wrote there would be lost with it; the "
                              "intervals are kept in memory until it stops (restart it to "
                              f"start a new ledger at {self.path})")
        wal = self._wal_path()
        found = _file_id(wal)
        if self._wal is None or found == self._wal:
            self._wal = found
            return
        # The write-ahead log was deleted (``rm ledger.db-wal``, a clean-up job) or replaced:
        # SQLite would go on writing into the deleted one, which readers no longer see (an
        # export fails), and a crash would lose every interval committed since the last
        # checkpoint (all of them, for a young ledger), silently. What it holds is copied into
        # the ledger file and the log opened anew; a log put there by another hand is never
        # read in its place.
        try:
            size = wal.stat().st_size
        except FileNotFoundError:
            size = 0
        gone = (f"the write-ahead log {wal} of the ledger was deleted or replaced while this "
                "process recorded into it")
        try:
            if self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                raise LedgerError(f"{gone}: what was committed there is not in the ledger file "
                                  "yet (a reader holds it); the intervals are kept in memory "
                                  "and retried")
            if size:
                raise LedgerError(f"{gone}, and {wal} is now another file of {size} bytes, "
                                  "never read in its place: remove it; the intervals are kept "
                                  "in memory and retried")
            self._db.close()
            self._connect_writer()
        except sqlite3.Error as exc:
            raise LedgerError(f"{gone}, and could not be written into the ledger: {exc}; the "
                              "intervals are kept in memory and retried") from None
        self._wal = _file_id(wal)
        log.warning("ledger: the write-ahead log %s was deleted while this process recorded "
                    "into %s: what it held was written into the ledger and the log opened "
                    "anew (nothing is lost)", wal, self.path)

    def _release_lock(self) -> None:
        while self._lock_fds:
            os.close(self._lock_fds.pop())

    def _abandon(self) -> None:
        """Close what a failed open left behind: the connection, then the locks."""
        db = getattr(self, "_db", None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        self._release_lock()

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

    def _refuse_unknown(self) -> None:
        """Refuse, before changing anything in it, a database that is not an allsmi ledger (a
        path mistyped into another program's SQLite file: its tables, then ours beside them) or
        a ledger of a schema this allsmi does not know (written by a newer allsmi, before a
        rollback: tables it dropped would be created again). A new, empty file is a new ledger."""
        tables = {name for (name,) in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return
        if "meta" not in tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise LedgerError(f"{self.path} is not an allsmi ledger: it is an SQLite database "
                              f"of other tables ({shown}), left as it is; give the path of an "
                              "allsmi ledger, or of a new file")
        self._version(dict(self._db.execute("SELECT key, value FROM meta").fetchall()))

    def _version(self, rows: Mapping[str, str]) -> int:
        """The ledger's schema version, one this allsmi reads (else :class:`LedgerError`); 0
        for a ``meta`` table not filled yet (a new ledger whose first opening stopped there)."""
        if not rows:
            return 0
        text = rows.get("schema_version")
        try:
            version = int(text)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            version = -1
        if version not in OLD_SCHEMA_VERSIONS + (SCHEMA_VERSION,):
            raise LedgerError(f"{self.path}: ledger schema version {text} is not supported "
                              f"(this allsmi reads versions {OLD_SCHEMA_VERSIONS[0]} to "
                              f"{SCHEMA_VERSION}); a newer allsmi wrote it, or it is damaged")
        return version

    def _check_meta(self, rows: Mapping[str, str], interval_seconds: int | None) -> int:
        version = self._version(rows)
        if version in OLD_SCHEMA_VERSIONS:
            if self.readonly:  # read as it is: temporary views give it today's layout
                legacy_views(self._db, version)
            else:
                with self._transaction():
                    upgrade(self._db, version)
            version = SCHEMA_VERSION
        try:
            stored = int(rows["interval_seconds"])
        except (KeyError, ValueError):
            raise LedgerError(f"{self.path}: the ledger's interval_seconds is "
                              f"{rows.get('interval_seconds')!r}, not a number of seconds: it "
                              "is damaged") from None
        if interval_seconds is not None and not self.readonly and stored != interval_seconds:
            raise LedgerError(f"{self.path} records {stored}-second intervals but the "
                              f"configuration asks for {interval_seconds} (ledger.interval_seconds); "
                              "use a new ledger file to change it")
        return stored

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
                self._hids.clear()
            raise

    def close(self) -> None:
        """Close the database (checkpointing the WAL) and release the writer lock."""
        with self._lock:
            try:
                self._db.close()
            finally:
                self._release_lock()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

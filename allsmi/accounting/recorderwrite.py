"""How a recorder writes its completed intervals: retried after a failure, never lost, and
what the ledger refuses counted once per interval.

:class:`RecorderWrites` is the writing half of
:class:`~allsmi.accounting.recorder.LedgerRecorder` (a mixin): the intervals a write could not
store are kept in memory and retried (:data:`RETRY_SECONDS`), ``/ready`` reads how many wait
(:attr:`RecorderWrites.unwritten_overdue`), and the ledger's refusals of time it already holds
are counted in :attr:`RecorderWrites.refused_intervals`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from allsmi.accounting.ledger.store import IntervalRecord

if TYPE_CHECKING:
    from typing import Callable

    from allsmi.accounting.buckets import Bucket
    from allsmi.accounting.ledger.store import Ledger
    from allsmi.accounting.recorderhold import ClockHold
    from allsmi.accounting.settings import LedgerSettings

log = logging.getLogger("allsmi.accounting.recorder")

#: A first write attempt still running after this long makes its intervals overdue
#: (:attr:`RecorderWrites.unwritten_overdue`) even before it fails: SQLite waits 2 s for a lock.
WRITE_GRACE_SECONDS = 5.0
#: Unwritten intervals are retried this long (ledger time) after a failed write, not only
#: when the next interval completes, doubling after each failure up to :data:`RETRY_MAX_SECONDS`:
#: a lock held for a few seconds (a backup, the sqlite3 shell) costs seconds of ``/ready``,
#: not the rest of the minute, and a lasting one is not retried every cycle (each attempt
#: waits SQLite's 2 s busy timeout on the collector's thread).
RETRY_SECONDS = 5.0
RETRY_MAX_SECONDS = 60.0


class RecorderWrites:
    """The writing half of a recorder (see the module)."""

    ledger: "Ledger"
    settings: "LedgerSettings"
    interval: int
    hold: "ClockHold"
    _keep: "Callable[[list[IntervalRecord]], None]"
    """``LedgerRecorder._keep(failed)``: hold ``failed`` as the unwritten intervals (bounded)."""
    _open_since: "Callable[[], int | None]"
    """``LedgerRecorder._open_since()``: the start of the oldest interval still open."""

    def _init_writes(self) -> None:
        self.intervals_written = 0
        self.last_error: str | None = None
        """Why the last write failed while intervals are still unwritten (or why snapshots are
        held back: :mod:`allsmi.accounting.recorderhold`); ``None`` once all are written."""
        self.write_errors = 0
        """Writes that failed (``allsmi_ledger_write_errors_total``)."""
        self.dropped_intervals = 0
        """Intervals given up because more than ``MAX_UNWRITTEN`` were waiting."""
        self.refused_intervals = 0
        """Intervals the ledger refused because it already held time placed there
        (``allsmi_ledger_refused_intervals_total``): a wall clock that stepped back into time
        already recorded, by this recorder or an earlier one. An interval written in parts
        (checkpoints) counts once."""
        self._refused: set[tuple[int, str]] = set()
        """(start, device id) of the refused intervals whose later parts may still come."""
        self._unwritten: list[IntervalRecord] = []
        #: Ledger time from which unwritten intervals are retried, and the wait after the next
        #: failure (see RETRY_SECONDS).
        self._retry_at = float("-inf")
        self._retry_delay = RETRY_SECONDS
        #: Whether the last failed write failed for the whole database (locked, full,
        #: read-only: it may pass later) rather than for the intervals kept (a value SQLite
        #: cannot store fails again, however often it is retried).
        self.retry_may_pass = False
        #: When the write in progress began (monotonic), None between writes.
        self._writing_since: float | None = None

    @property
    def unwritten(self) -> int:
        """Intervals (device x interval) held in memory because the ledger could not take them
        yet (an interval written in parts counts once), or held back while the wall clock is
        in doubt (:mod:`allsmi.accounting.recorderhold`)."""
        pending = self._unwritten
        count = len({(r.start, r.dim.device_id) for r in pending}) if len(pending) > 1 \
            else len(pending)
        return count + self.hold.held_intervals

    @property
    def unwritten_overdue(self) -> int:
        """Unwritten intervals that should make ``/ready`` fail: all of them, except while the
        first attempt to write them is running normally (no failure since the last success,
        and for less than :data:`WRITE_GRACE_SECONDS`)."""
        count = self.unwritten
        since = self._writing_since
        if count and self.last_error is None and since is not None \
                and time.monotonic() - since < WRITE_GRACE_SECONDS:
            return 0
        return count

    def _store(self, records: list[IntervalRecord], now: float) -> None:
        """Write ``records``; ``now`` (the trusted wall time: never a clock in the future)
        decides which quarters are complete and which rows have expired."""
        s = self.settings
        stored = self.ledger.write(records, now, s.retention_days, s.rollup_retention_days)
        self.intervals_written += stored
        if stored < len(records):
            self._count_refused(self.ledger.refused)

    def _count_refused(self, keys: list[tuple[int, str]]) -> None:
        """Count the intervals of ``keys`` (start, device id) not counted yet, and log them."""
        new = set(keys) - self._refused
        if new:
            self.refused_intervals += len(new)
            log.warning("ledger: %d interval(s) refused: the ledger already holds time placed "
                        "there (a wall clock that stepped back into recorded time, or into time "
                        "already rolled up and pruned, or time recorded earlier under a wall "
                        "clock that was ahead); %d so far", len(new), self.refused_intervals)
        oldest = self._open_since()
        self._refused = set() if oldest is None else \
            {k for k in self._refused | new if k[0] >= oldest}

    def _write(self, buckets: "list[Bucket]", now: float) -> None:
        """Write what the ledger does not have yet of ``buckets`` (see :meth:`Bucket.take`)."""
        iv = self.interval
        self._write_records([r for r in (b.take(iv) for b in buckets) if r is not None], now)

    def _write_records(self, buckets: list[IntervalRecord], now: float) -> None:
        """Write ``buckets`` after any held back earlier; keep what fails, for the next write.

        They count as unwritten (``/ready`` says 503) from before the attempt until it
        succeeds: the list is emptied only once they are stored."""
        if not buckets and not self._unwritten:
            return
        # One assignment: the exporter's thread reads len(self._unwritten) without the lock.
        self._writing_since = time.monotonic()
        self._unwritten = pending = self._unwritten + buckets
        try:
            self._store(pending, now)
        except Exception as exc:  # noqa: BLE001 - a failed write must never lose the intervals
            self.write_errors += 1
            self.last_error = str(exc)
            whole = bool(getattr(exc, "whole_database", False))
            if whole or len(pending) == 1:
                failed = pending
            else:  # perhaps one record's fault: write them one by one, keep only the bad ones
                failed = []
                for bucket in pending:
                    try:
                        self._store([bucket], now)
                    except Exception as one:  # noqa: BLE001
                        failed.append(bucket)
                        whole = whole or bool(getattr(one, "whole_database", False))
            self.retry_may_pass = whole
            self._keep(failed)
            self._retry_at = now + self._retry_delay
            self._retry_delay = min(2 * self._retry_delay, RETRY_MAX_SECONDS)
            log.error("ledger: %d interval(s) not written, kept for the next write: %s",
                      len(failed), exc)
        else:
            self._unwritten = []
            self.last_error = None
            self._retry_delay = RETRY_SECONDS
        finally:
            self._writing_since = None

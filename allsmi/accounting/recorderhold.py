"""A recorder's first snapshots, held back while its wall clock may be far in the future.

A recorder started before NTP has set the clock (at boot, on an RTC that is wrong or kept in
local time) would trust its first timestamp: minutes written hours or days in the future, where
the real minutes later collide with them (refused); quarters and days rolled up, and "old" rows
pruned, relative to that future (real minutes deleted). :class:`~allsmi.accounting.placement.
Placement` already distrusts a wall clock that steps forward while the recorder runs; this is
the same rule for the step from what the ledger last recorded to the recorder's first snapshot:

* **The reference** is the newest time the ledger holds (the end of its newest row) or the
  time the file was last written (its modification time, before the recorder opened it),
  whichever is later. A new ledger has none: nothing is held.
* A first snapshot more than :data:`AHEAD_SECONDS` after the reference is **held back**, unless
  the kernel says its clock is synchronized (:func:`clock_synchronized`: NTP has set it, so the
  gap is a downtime, as after a reboot, and nothing is held): it and
  the snapshots after it stay in memory, not written, while the monotonic clock runs for at most
  :data:`HOLD_SECONDS`. Meanwhile ``/ready`` answers 503 (they count as unwritten) and the
  reason is logged.
* **The wall clock steps back** while they are held (NTP sets it): the held snapshots are
  placed on the corrected clock (each at the new wall time less the monotonic time since it
  was taken) and recorded; nothing was written in the future.
* **It does not** within :data:`HOLD_SECONDS` (a recorder restarted after a long downtime, or a
  clock that stays wrong): the held snapshots are recorded as they are, and completed quarters
  are rolled up and rows pruned no later than the reference plus the monotonic time since the
  first snapshot (:attr:`ClockHold.trusted_cap`) until the recorder restarts, so that a clock
  that is in fact wrong never makes real rows expire. Logged.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from allsmi.accounting.placement import STEP_TOLERANCE_SECONDS
from allsmi.schema import Snapshot

log = logging.getLogger("allsmi.accounting.recorder")

#: ``adjtimex``'s answer for a clock that is not synchronized (``TIME_ERROR``).
TIME_ERROR = 5


def clock_synchronized() -> bool | None:
    """Whether the kernel says its clock is synchronized (NTP or PTP has set it), read with
    ``adjtimex`` asking nothing to change (``modes = 0``: allowed to any process, in a container
    too); ``None`` where it cannot say (not Linux, no C library)."""
    import sys
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        import ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        timex = ctypes.create_string_buffer(512)  # struct timex (208 bytes on 64-bit), zeroed
        state = libc.adjtimex(timex)
    except (OSError, AttributeError):
        return None
    return None if state < 0 else state != TIME_ERROR

#: A first snapshot further than this after the ledger's newest time is held back.
AHEAD_SECONDS = 600.0
#: How long (monotonic seconds) snapshots are held waiting for the wall clock to step back.
HOLD_SECONDS = 300.0


def utc(unix: float) -> str:
    """``unix`` as RFC 3339 UTC text, to the second."""
    return f"{dt.datetime.fromtimestamp(unix, dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"


def span(seconds: float) -> str:
    """A duration as people read it: ``3 days``, ``5 h``, ``12 min``, ``40 s``."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 7200:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


class ClockHold:
    """Decides, snapshot by snapshot, what a recorder records now (see the module)."""

    def __init__(self, reference: float | None, interval_seconds: int,
                 newest: float | None = None) -> None:
        self.reference = reference
        #: The end of the newest row (``reference`` is this or the file's modification time).
        self.newest = newest
        self.interval = interval_seconds
        self._held: list[Snapshot] = []
        self._intervals: set[tuple[int, str]] = set()
        self._decided = False
        self.reason: str | None = None
        """Why snapshots are held, while they are."""
        self._cap_from: tuple[float, float] | None = None

    @property
    def held_intervals(self) -> int:
        """Device-intervals held (as the recorder counts its unwritten intervals)."""
        return len(self._intervals)

    def trusted_cap(self, steady: float | None) -> float | None:
        """The latest time roll-ups and pruning may use once held snapshots were recorded on a
        clock that never stepped back (``None``: no limit): the reference plus the monotonic
        time since the first snapshot (``steady``: the latest snapshot's monotonic time)."""
        if self._cap_from is None or steady is None:
            return None
        reference, first = self._cap_from
        return reference + max(0.0, steady - first)

    def admit(self, snapshot: Snapshot) -> list[Snapshot]:
        """The snapshots to record now, in order: ``snapshot``, none while held, or every held
        one (placed on the corrected clock if it stepped back) at the release."""
        if self._decided:
            return [snapshot]
        if not self._held:
            wall = snapshot.unix_time
            if self.newest is not None and wall < self.newest - AHEAD_SECONDS:
                log.warning("ledger: the ledger holds time up to %s, %s after this wall clock "
                            "(%s): recorded under a wall clock that was ahead, or this one is "
                            "behind; time placed where the ledger already holds time is refused "
                            "(logged, and counted in allsmi_ledger_refused_intervals_total)",
                            utc(self.newest), span(self.newest - wall), utc(wall))
            if self.reference is None or snapshot.monotonic is None \
                    or wall <= self.reference + AHEAD_SECONDS:
                self._decided = True
                return [snapshot]
            if clock_synchronized():
                log.info("ledger: resuming %s after the newest time the ledger holds (%s); the "
                         "kernel's clock is synchronized", span(wall - self.reference),
                         utc(self.reference))
                self._decided = True
                return [snapshot]
            self.reason = (f"the wall clock ({utc(wall)}) is {span(wall - self.reference)} "
                           f"ahead of the newest time the ledger holds ({utc(self.reference)}): "
                           "perhaps not set yet (NTP at boot); the snapshots are held, not "
                           f"written, until it steps back or for {HOLD_SECONDS:g} s")
            log.warning("ledger: %s", self.reason)
            self._hold(snapshot)
            return []
        first, last = self._held[0], self._held[-1]
        steady = snapshot.monotonic
        if steady is None or first.monotonic is None or last.monotonic is None \
                or steady < last.monotonic:  # (another clock: nothing to compare with)
            return self._accept("the snapshots' monotonic clock changed") + [snapshot]
        behind = last.unix_time + (steady - last.monotonic) - snapshot.unix_time
        if behind > STEP_TOLERANCE_SECONDS:  # the wall clock stepped back: it was wrong
            log.warning("ledger: the wall clock stepped back %s to %s: the %d snapshot(s) held "
                        "are recorded on it", span(behind), utc(snapshot.unix_time),
                        len(self._held))
            return self._release([snapshot], -behind)
        self._hold(snapshot)
        if steady - first.monotonic < HOLD_SECONDS:
            return []
        return self._accept()

    def close(self) -> list[Snapshot]:
        """The snapshots still held, to record as they are (the recorder is stopping)."""
        return self._accept("the recorder stopped") if self._held else []

    def _accept(self, why: str = f"it did not step back within {HOLD_SECONDS:g} s") \
            -> list[Snapshot]:
        """Release the held snapshots on the wall clock as it is, limiting roll-ups and pruning
        (see :meth:`trusted_cap`)."""
        first = self._held[0]
        assert self.reference is not None and first.monotonic is not None
        self._cap_from = (self.reference, first.monotonic)
        log.warning("ledger: the wall clock is followed, %s ahead of the newest time the ledger "
                    "holds (%s: a restart after a long downtime, or a clock that stays wrong); "
                    "%d held snapshot(s) recorded on it; quarters are rolled up and old rows "
                    "pruned as of %s plus the time since, not by this clock, until the recorder "
                    "restarts", span(first.unix_time - self.reference), why, len(self._held),
                    utc(self.reference))
        return self._release([], None)

    def _hold(self, snapshot: Snapshot) -> None:
        self._held.append(snapshot)
        start = int(snapshot.unix_time // self.interval * self.interval)
        self._intervals.update((start, dev.id) for dev in snapshot.devices)

    def _release(self, then: list[Snapshot], shift: float | None) -> list[Snapshot]:
        held = self._held
        if shift is not None:
            held = [dataclasses.replace(s, timestamp=s.timestamp + dt.timedelta(seconds=shift))
                    for s in held]
        self._held, self._intervals = [], set()
        self._decided, self.reason = True, None
        return held + then

"""Where the recorder places each snapshot on the ledger's time line, whatever the wall clock does.

Durations always come from the monotonic clock (:mod:`allsmi.usage`); only the placement of time
in intervals comes from the wall clock, and the wall clock can step: NTP correcting a clock that
was wrong at boot (an RTC kept in local time), a VM resumed, an operator, ``faketime``. The rules:

* **Slewing** (the wall clock within :data:`STEP_TOLERANCE_SECONDS` of the monotonic account
  since the previous snapshot) is followed: placement is the wall clock.
* **A step forward** is not trusted at once: until the wall clock has stayed ahead for
  :data:`FORWARD_CONFIRM_SECONDS`, time is placed right after the previous snapshot, on the
  monotonic account. A step that is corrected within that time (a wrong clock set right again)
  thus never puts a minute in the future, where it would later collide with the real minute.
  A step that lasts (a resumed VM, a clock that was slow) is followed from then on; the time
  until then sits right after the time before the step.
* **A step back** is followed (placement is the wall clock again), unless the wall clock lands
  in time this recorder has already placed: then time is placed right after the previous
  snapshot (so that it lands in no interval already stored, which would refuse it), ahead of
  the wall clock by the size of the step, until the recorder restarts. A step back that lands
  before time this recorder placed (past its first sample: an NTP step soon after boot) is
  followed until the wall clock runs into that time; from there time is placed after it, as a
  forward step is followed, ahead of the wall clock by the length of what it had placed there,
  until the recorder restarts. So no snapshot is ever placed in time already placed.
* ``trusted``: the wall clock, never ahead of the monotonic account since this recorder started
  or since the wall clock last stepped back. Completed quarters are rolled up and old rows pruned
  by it, so that a clock in the future never makes real minutes expire.
"""

from __future__ import annotations

#: A wall clock further from the monotonic clock's account of time than this has stepped (NTP
#: step, VM resume); less is slewing and jitter.
STEP_TOLERANCE_SECONDS = 1.0
#: How long a wall clock that stepped forward must stay ahead before placement follows it.
FORWARD_CONFIRM_SECONDS = 120.0
#: Spans of placed time remembered (a span ends where placement jumps).
MAX_SPANS = 32


class Placement:
    """The ledger time line of one recorder's life (not thread-safe: the recorder's lock)."""

    __slots__ = ("_placed", "_steady", "_ahead_since", "_spans", "trusted", "interval")

    def __init__(self, interval_seconds: float = 60.0) -> None:
        #: The ledger's interval: it keeps only time that starts after what it already has for
        #: an interval, so time placed before a span, in the interval it starts in, is refused.
        self.interval = interval_seconds
        self._placed: float | None = None
        self._steady: float | None = None
        #: Monotonic time since which the wall clock has been ahead of the placement.
        self._ahead_since: float | None = None
        #: [lo, hi] of the time placed in this life, the current one last.
        self._spans: list[list[float]] = []
        self.trusted: float | None = None
        """The latest snapshot's wall time, never ahead of the monotonic account (see above)."""

    def _start(self, lo: float) -> float:
        """Where placed time starting at ``lo`` begins to collide: the start of its interval."""
        return min(lo - STEP_TOLERANCE_SECONDS, lo // self.interval * self.interval)

    def _placed_already(self, when: float) -> bool:
        return any(self._start(lo) <= when <= hi for lo, hi in self._spans)

    def _ran_into(self, when: float) -> float | None:
        """The end of an earlier span (not the current one) whose time ``when`` would collide
        with, if any."""
        ends = [hi for lo, hi in self._spans[:-1] if self._start(lo) <= when <= hi]
        return max(ends) if ends else None

    def place(self, wall: float, steady: float | None) -> float:
        """Where a snapshot taken at ``wall`` (unix seconds) and ``steady`` (monotonic) goes."""
        if steady is None or self._steady is None or self._placed is None or steady < self._steady:
            # No monotonic time (another host's snapshot), the first one, or another clock.
            placed = self.trusted = wall
            self._ahead_since = None
            if self._spans and self._spans[-1][1] - STEP_TOLERANCE_SECONDS <= wall:
                self._extend(placed)
            else:
                self._jump(placed)
        else:
            elapsed = steady - self._steady
            follows = self._placed + elapsed
            self.trusted = min(wall, (self.trusted if self.trusted is not None else wall) + elapsed)
            if wall > follows + STEP_TOLERANCE_SECONDS:  # ahead: a step forward
                if self._ahead_since is None:
                    self._ahead_since = self._steady  # it stepped after the previous snapshot
                if steady - self._ahead_since >= FORWARD_CONFIRM_SECONDS:
                    placed, self._ahead_since = wall, None
                    self._jump(placed)
                else:
                    placed = follows
                    self._extend(placed)
            elif wall < follows - STEP_TOLERANCE_SECONDS:  # behind: a step back
                self._ahead_since = None
                if self._placed_already(wall):
                    placed = follows
                    self._extend(placed)
                else:
                    placed = wall
                    self._jump(placed)
            else:
                self._ahead_since = None
                end = self._ran_into(wall) if len(self._spans) > 1 else None
                if end is not None:  # the wall clock ran into time placed before a step back
                    placed = max(follows, end + elapsed)  # its increment starts at the end
                    self._jump(placed)
                else:
                    placed = wall
                    self._extend(placed)
        self._placed, self._steady = placed, steady
        return placed

    def _extend(self, placed: float) -> None:
        span = self._spans[-1]
        if placed > span[1]:
            span[1] = placed

    def _jump(self, placed: float) -> None:
        self._spans.append([placed, placed])
        if len(self._spans) > MAX_SPANS:
            del self._spans[0]

"""Gaudi loop mode: one long-running ``hl-smi ... -l <interval>`` child whose rows are cut
into frames, restarted with back-off when it dies, and given up for one-shot mode when the
installed hl-smi cannot loop.

:class:`LoopMode` is mixed into :class:`allsmi.backends.gaudi.GaudiBackend`. The line reader
and the CSV parser are imported when the loop starts, never with the class.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence

from allsmi.backend_api import BackendError
from allsmi.backends.gaudi import EXECUTABLE

if TYPE_CHECKING:
    from allsmi.backends._common.stream import LineStream, StreamExit
    from allsmi.backends.gaudi.csv_output import Frame, FrameAssembler

#: A device whose newest row is older than this many intervals is degraded.
STALE_INTERVALS = 3.0


class LoopMode:
    """The loop child and its frames; expects the backend's options, clock and tool call."""

    warnings: list[str]
    mode: str
    interval: float
    timeout_seconds: float
    _fields: tuple[str, ...]
    _clock: Callable[[], float]
    _backoff: tuple[float, float]
    _lock: threading.Lock
    _assembler: FrameAssembler | None
    _stream: LineStream | None
    _first_frame: threading.Event
    _loop_unusable: str | None
    _issues: collections.deque[str]
    _notes: list[str]
    _seed: Frame | None
    _generation: int
    _last_crash: str | None
    _query_argv: Callable[[Sequence[str]], list[str]]
    _add_line_warnings: Callable[[Sequence[str]], None]

    def _stop_loop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def _start_loop(self, expected: frozenset[str]) -> None:
        from allsmi.backends.gaudi.csv_output import FrameAssembler
        from allsmi.backends._common.stream import LineStream
        self._first_frame = threading.Event()
        self._loop_unusable = None
        self._assembler = FrameAssembler(idle_close=self.interval / 2, clock=self._clock,
                                         expected=expected)
        argv = self._query_argv(self._fields) + ["-l", f"{self.interval:g}"]
        stream = LineStream(
            argv, on_line=self._on_line, on_start=self._on_start, on_exit=self._on_exit,
            on_long_line=self._on_long_line, idle_timeout=STALE_INTERVALS * self.interval + self.timeout_seconds,
            backoff_initial=self._backoff[0], backoff_max=self._backoff[1],
            name="allsmi-gaudi-hl-smi")
        self._stream = stream
        stream.start()
        deadline = time.monotonic() + self.timeout_seconds + self.interval
        while not self._first_frame.wait(0.02):
            if self._loop_unusable is not None or time.monotonic() > deadline:
                break
        if not self._first_frame.is_set() and self._loop_unusable is None:
            self._loop_unusable = (f"{EXECUTABLE} -l printed no complete frame within "
                                   f"{self.timeout_seconds + self.interval:g} s")
        if self._loop_unusable is not None:
            self._fall_back_to_oneshot(self._loop_unusable)

    def _fall_back_to_oneshot(self, why: str) -> None:
        self._stop_loop()
        self.mode = "oneshot"
        self._loop_unusable = None
        self._notes.append(f"loop mode unusable ({why}); running {EXECUTABLE} once per sample")

    def _on_start(self, generation: int) -> None:
        with self._lock:
            assert self._assembler is not None
            self._assembler.discard_partial()
        self._generation = generation

    def _on_line(self, line: str) -> None:
        from allsmi.backends._common.cells import shorten
        from allsmi.backends.gaudi import csv_output as csvfmt
        parsed = csvfmt.parse_line(line, self._fields)
        if isinstance(parsed, str):
            if parsed != "empty line":
                self._issues.append(f"{EXECUTABLE} -l: {parsed}: {shorten(line)!r}; skipped")
            return
        with self._lock:
            assert self._assembler is not None
            self._assembler.add(parsed, self._generation)
            if self._assembler.frames:
                self._first_frame.set()

    def _on_long_line(self, length: int) -> None:
        # a row is a few hundred bytes: a longer line is no row (its device misses this frame)
        self._issues.append(f"{EXECUTABLE} -l: a line of {length} bytes, over the length "
                            "limit; dropped unread")

    def _on_exit(self, info: StreamExit) -> bool:
        with self._lock:
            assert self._assembler is not None
            dropped = self._assembler.discard_partial()
        what = info.describe(f"{EXECUTABLE} -l")
        if info.generation == 1 and (not self._first_frame.is_set() or info.returncode == 0):
            # The very first child either never produced a frame (option
            # rejected, tool too old) or ended by itself (ignores -l): a loop
            # restarted forever would only hide that.
            self._loop_unusable = what
            return False
        if dropped:
            what += f"; dropped its unfinished frame of {dropped} row(s)"
        if info.reason == "exited" and info.returncode != 0:
            self._last_crash = what
        self._issues.append(what + "; restarting with back-off")
        return True

    def _loop_frame(self) -> tuple[Frame, float | None]:
        """The newest frame, and its age when that is past the staleness limit."""
        with self._lock:
            assert self._assembler is not None
            frame = self._assembler.poll() or self._seed
            issues = list(self._issues)
            self._issues.clear()
        assert frame is not None
        self._add_line_warnings(issues)
        age = self._clock() - frame.closed_at
        limit = STALE_INTERVALS * self.interval
        if age <= limit:
            self._last_crash = None
            return frame, None
        if self._last_crash is not None:
            # The loop child crashed and no fresh frame came since: the tool is failing.
            raise BackendError(f"{self._last_crash}; no fresh data for {age:.1f} s, restarting it")
        stream = self._stream
        state = ""
        if stream is not None and stream.next_start_at is not None:
            state = f"; next restart in {max(0.0, stream.next_start_at - time.monotonic()):.1f} s"
        self.warnings.append(f"no fresh {EXECUTABLE} data for {age:.1f} s (limit {limit:g} s); "
                             f"devices reported degraded without values{state}")
        return frame, age

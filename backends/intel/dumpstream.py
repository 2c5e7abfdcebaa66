"""``xpu-smi dump -d -1 -m 18 -i 1``: memory in use of every GPU, from one long-running xpu-smi.

xpu-smi's dump waits out its interval before it prints a row (even ``-n 1`` takes about a
second), so running it once per sample would hold every sample up by that second and start
another process each cycle. One child runs instead, from the backend's ``open()`` to its
``close()``: it prints its header once (``Timestamp, DeviceId, GPU Memory Used (MiB)``), then a
row per device every ``-i`` seconds (whole seconds, 1 to 999), and each sample reads the newest
row of each device (:class:`MemoryUsedStream`, on
:class:`~allsmi.backends._common.stream.LineStream`: an argument list, no shell, the child's
process group killed and reaped, lines and stderr bounded, a child silent for too long killed):

* a row older than :attr:`MemoryUsedStream.stale_after` (two intervals, or the backend's timeout
  where that is longer) is unknown, never its old number, and a warning names its devices;
* the first read waits, within the sample's deadline, for the child's first rows; no later read
  waits;
* a line that is no row (the ``Error: ...`` xpu-smi prints before it stops, a cut or garbled
  line, one over :data:`MAX_LINE`) is skipped and named in the next read's warnings;
* a child that ends is named in every read's warnings until a new child prints a row, and is
  restarted by a later read: at once when it had printed rows, else after a back-off that
  doubles from one interval up to :data:`BACKOFF_MAX` (an xpu-smi that cannot dump is not
  started again every second).

The rows' ``DeviceId`` is xpu-smi's device id (``discovery -j``'s ``device_id``); the backend
matches it to a GPU. The ``Timestamp`` column (wall-clock time of day, no date) is not read: a
row's age is measured from when it arrived.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import TYPE_CHECKING, Callable

from allsmi.backends._common.cells import shorten

if TYPE_CHECKING:
    from allsmi.backends._common.stream import LineStream, StreamExit

#: xpu-smi's dump interval (``-i``: whole seconds).
INTERVAL = 1
#: A row older than this many intervals (or the backend's timeout, where longer) is unknown.
STALE_INTERVALS = 2.0
#: The longest wait before restarting a child that printed no row (seconds).
BACKOFF_MAX = 30.0
#: The longest line read: a row or the header is under a hundred bytes.
MAX_LINE = 4096
#: The most devices kept (a garbled dump inventing device ids cannot grow the table).
MAX_DEVICES = 1024
#: Problems kept between two reads (the first ones say enough).
MAX_ISSUES = 8


def dump_args(interval: int = INTERVAL) -> tuple[str, ...]:
    """Metric 18 (GPU Memory Used, MiB) of every device (``-d -1``) every ``interval`` s."""
    return ("dump", "-d", "-1", "-m", "18", "-i", str(interval))


class MemoryUsedStream:
    """The newest ``GPU Memory Used`` row of each device of a running ``xpu-smi dump``."""

    def __init__(self, path: str, *, timeout: float, clock: Callable[[], float] = time.monotonic,
                 interval: int = INTERVAL) -> None:
        self.path = path
        self.interval = interval
        self.command = " ".join((os.path.basename(path), *dump_args(interval)))
        """The call as messages name it."""
        self.stale_after = max(STALE_INTERVALS * interval, timeout)
        self.children = 0
        """Children started so far."""
        self._clock = clock
        self._lock = threading.Lock()
        self._arrived = threading.Event()
        self._rows: dict[int, tuple[int | None, float]] = {}
        self._header: tuple[int, int, int] | None = None
        self._child_rows = 0
        self._issues: collections.deque[str] = collections.deque(maxlen=MAX_ISSUES)
        self._ended: tuple[StreamExit, int] | None = None
        self._why: str | None = None
        self._stream: LineStream | None = None
        self._restart_at: float | None = None
        self._delay = 0.0
        self._waited = False

    @property
    def pid(self) -> int | None:
        """The running child's pid, or ``None``."""
        return None if self._stream is None else self._stream.pid

    @property
    def running(self) -> bool:
        """True while a child runs (until its end has been handled by its reader)."""
        return self._stream is not None and self._stream.running

    @property
    def devices(self) -> frozenset[int]:
        """The device ids any row was printed for."""
        with self._lock:
            return frozenset(self._rows)

    def start(self) -> None:
        """Start a child (nothing while one runs)."""
        from allsmi.backends._common.stream import LineStream
        if self._stream is not None:
            return
        self._restart_at = None
        self.children += 1
        self._stream = LineStream(
            [self.path, *dump_args(self.interval)], on_line=self._on_line, on_start=self._on_start,
            on_exit=self._on_exit, on_long_line=self._on_long_line, max_line_bytes=MAX_LINE,
            idle_timeout=self.stale_after + self.interval, name="allsmi-intel-xpu-smi-dump")
        self._stream.start()

    def close(self) -> None:
        """Kill and reap the child, forget every row (idempotent; never raises)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        with self._lock:
            self._rows, self._header, self._ended, self._why = {}, None, None, None
            self._issues.clear()
        self._restart_at, self._delay, self._waited = None, 0.0, False
        self._arrived.clear()

    def read(self, warnings: list[str], wait_until: float | None = None) -> dict[int, int | None]:
        """Bytes in use (``None`` for ``N/A``) by xpu-smi's device id, from each device's newest
        row no older than :attr:`stale_after`; what went wrong into ``warnings``. The first read
        waits for the first rows until ``wait_until`` (``time.monotonic``)."""
        if not self._waited and wait_until is not None:
            self._waited = True
            while not self._arrived.is_set() and self._ended is None and self._stream is not None:
                left = wait_until - time.monotonic()
                if left <= 0:
                    break
                self._arrived.wait(min(left, 0.02))
        now = self._clock()
        with self._lock:
            issues = list(self._issues)
            self._issues.clear()
            ended, self._ended = self._ended, None
            rows = dict(self._rows)
        warnings.extend(f"{self.command}: {issue}" for issue in issues)
        if ended is not None:
            self._child_ended(*ended, now)
        if self._stream is None and self._restart_at is not None and now >= self._restart_at:
            self.start()
        with self._lock:
            why = self._why
        if why is not None:
            when = "restarted" if self._stream is not None else \
                f"restarting it in {max(0.0, (self._restart_at or now) - now):.1f} s"
            warnings.append(f"{why}; {when}")
        elif not rows and self._stream is not None:
            warnings.append(f"{self.command} has printed no row yet; memory in use unknown")
        fresh = {device: value for device, (value, at) in rows.items() if now - at <= self.stale_after}
        stale = sorted(set(rows) - set(fresh))
        if stale:
            age = now - max(rows[device][1] for device in stale)
            warnings.append(f"no fresh row from {self.command} for device {', '.join(map(str, stale))} "
                            f"for {age:.1f} s (limit {self.stale_after:g} s); memory in use unknown")
        return fresh

    def _child_ended(self, info: StreamExit, printed: int, now: float) -> None:
        """Reap the ended child's reader and schedule the next child."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        self._delay = 0.0 if printed else min(max(2 * self._delay, float(self.interval)), BACKOFF_MAX)
        self._restart_at = now + self._delay
        with self._lock:
            self._why = info.describe(self.command)

    # -- the stream's thread ---------------------------------------------------------------
    def _issue(self, text: str) -> None:
        with self._lock:
            self._issues.append(text)

    def _on_start(self, generation: int) -> None:
        with self._lock:
            self._header, self._child_rows = None, 0  # each child prints its own header

    def _on_line(self, line: str) -> None:
        from allsmi.backends.intel.xpusmi import MEMORY_USED_COLUMN, clean_line, dump_header, dump_row
        text = clean_line(line)
        if not text:
            return
        header = dump_header(text)
        with self._lock:
            if header is not None:
                self._header = header
                return
            header = self._header
        if header is None:
            self._issue(f"printed {shorten(text)!r} where its {MEMORY_USED_COLUMN!r} header belongs; skipped")
            return
        try:
            device, used = dump_row(text, header)
        except ValueError as exc:
            self._issue(f"{exc}: {shorten(text)!r}; skipped")
            return
        with self._lock:
            if device not in self._rows and len(self._rows) >= MAX_DEVICES:
                self._issues.append(f"more than {MAX_DEVICES} devices; device {device} skipped")
                return
            self._rows[device] = (used, self._clock())
            self._child_rows += 1
            self._why = None
        self._arrived.set()

    def _on_long_line(self, length: int) -> None:
        self._issue(f"a line of {length} bytes, over the limit of {MAX_LINE}; dropped unread")

    def _on_exit(self, info: StreamExit) -> bool:
        with self._lock:
            self._ended = (info, self._child_rows)
        return False  # restarted by a later read, with its own back-off

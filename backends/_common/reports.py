"""A long-running vendor tool that prints one whole report per line: read the newest, restart
the tool with back-off when it dies.

``neuron-monitor`` prints one JSON document per line for as long as it runs; ``tpu-info
--streaming`` and ``hl-smi -l`` are the same kind of tool. Starting such a tool once per
collection cycle would throw away what it measures between two reports (neuron-monitor's
utilization is an average over its own period), so a backend keeps one child running and reads
its newest report. :class:`NewestReport` does that on top of
:class:`~allsmi.backends._common.stream.LineStream` (argument lists, process groups killed and
reaped, bounded lines, stderr kept for messages, restarts with exponential back-off):

* :meth:`NewestReport.newest` returns the newest parsed report; before the first one it waits
  at most ``first_report_timeout`` seconds, then raises :class:`BackendError` naming the
  unreadable output when the tool printed only lines ``parse`` rejects (a tool that prints
  garbage), :class:`BackendTimeout` when it printed nothing (a tool that hangs), or, when the
  child ended without a report,
  :class:`BackendError` naming its exit status or signal, its stderr and what it printed that
  could not be read (a tool that crashes, or prints garbage and exits);
* a report older than ``stale_after`` seconds is not used: :class:`BackendError` saying how old
  the newest one is, how the child last ended and what it printed since that could not be
  read, while the stream restarts it;
* a line that ``parse`` rejects (``ValueError``) is skipped and named in the next
  :meth:`newest`'s warnings, never turned into values;
* a line longer than ``max_line_bytes`` is dropped by the stream, unread: while it is the
  newest line the tool printed, :meth:`newest` raises :class:`BackendError` saying the report
  was too long (an older report would hide what the tool reports now).

Only whole lines are parsed: a line cut by a dying child is dropped by the stream.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Generic, Sequence, TypeVar

from allsmi.backend_api import BackendError, BackendTimeout

from .cells import shorten
from .stream import DEFAULT_MAX_LINE, LineStream, StreamExit

Report = TypeVar("Report")

#: Parse problems kept between two reads (the first ones say enough).
MAX_ISSUES = 8


class NewestReport(Generic[Report]):
    """The newest report of ``argv``, a tool printing one report per line (see the module)."""

    def __init__(self, argv: Sequence[str], parse: Callable[[str], Report], *, label: str,
                 first_report_timeout: float, stale_after: float,
                 backoff: tuple[float, float] = (0.5, 30.0),
                 max_line_bytes: int = DEFAULT_MAX_LINE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.argv = tuple(argv)
        self.label = label
        """The tool as messages name it (``neuron-monitor``)."""
        self.first_report_timeout = first_report_timeout
        self.stale_after = stale_after
        self.max_line_bytes = max_line_bytes
        """The longest report line read; a longer one is dropped and is the backend's error."""
        self._parse = parse
        self._backoff = backoff
        self._clock = clock
        self._lock = threading.Lock()
        self._arrived = threading.Event()
        self._report: Report | None = None
        self._report_at: float | None = None
        self._last_exit: StreamExit | None = None
        self._issues: collections.deque[str] = collections.deque(maxlen=MAX_ISSUES)
        self._too_long: str | None = None
        """Set while the newest line the tool printed was dropped for its length."""
        self._stream: LineStream | None = None

    @property
    def running(self) -> bool:
        """True while the child runs or waits out a back-off."""
        return self._stream is not None and self._stream.running

    @property
    def pid(self) -> int | None:
        """The running child's pid, or ``None``."""
        return None if self._stream is None else self._stream.pid

    def start(self) -> None:
        """Start the child (idempotent)."""
        if self._stream is not None:
            return
        self._stream = LineStream(
            self.argv, on_line=self._on_line, on_exit=self._on_exit,
            on_long_line=self._on_long_line, max_line_bytes=self.max_line_bytes,
            idle_timeout=max(self.stale_after, self.first_report_timeout),
            backoff_initial=self._backoff[0], backoff_max=self._backoff[1],
            name=f"allsmi-{self.label}")
        self._stream.start()

    def close(self) -> None:
        """Kill and reap the child, forget every report (idempotent; never raises)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        with self._lock:
            self._report, self._report_at, self._last_exit = None, None, None
            self._issues.clear()
            self._too_long = None
        self._arrived.clear()

    def newest(self, warnings: list[str]) -> Report:
        """The newest report (starting the child on first use); raises as the module says."""
        self.start()
        deadline = time.monotonic() + self.first_report_timeout
        while not self._arrived.is_set():
            with self._lock:
                ended, too_long = self._last_exit, self._too_long
            if too_long is not None:
                raise BackendError(too_long)
            if ended is not None:
                raise BackendError(self._exit_message(ended, self._unreadable()))
            left = deadline - time.monotonic()
            if left <= 0:
                unreadable = self._unreadable()
                if unreadable:
                    raise BackendError(f"{self.label} printed no readable report within "
                                       f"{self.first_report_timeout:g} s: {unreadable}")
                raise BackendTimeout(f"{self.label} printed no report within "
                                     f"{self.first_report_timeout:g} s")
            self._arrived.wait(min(left, 0.02))
        with self._lock:
            report, at, ended, too_long = self._report, self._report_at, self._last_exit, self._too_long
            issues = list(self._issues)
            self._issues.clear()
        warnings.extend(issues)
        assert report is not None and at is not None
        if too_long is not None:
            raise BackendError(too_long)
        age = self._clock() - at
        if age > self.stale_after:
            unreadable = issues[0] if issues else ""
            if ended is not None:
                how = f"; {self._exit_message(ended, unreadable)}"
            else:
                how = f"; it printed unreadable output: {unreadable}" if unreadable else ""
            raise BackendError(f"no fresh {self.label} report for {age:.1f} s "
                               f"(limit {self.stale_after:g} s){how}; restarting it with back-off")
        return report

    # -- the stream's thread ---------------------------------------------------------------
    def _on_line(self, line: str) -> None:
        if not line.strip():
            return
        try:
            report = self._parse(line)
        except ValueError as exc:
            with self._lock:
                self._issues.append(f"{self.label}: {exc}: {shorten(line)!r}; skipped")
            return
        with self._lock:
            # ``_last_exit`` is kept: a child restarted after a crash may print once and die
            # again, and a stale report's message should still say how the child last ended.
            self._report, self._report_at = report, self._clock()
            self._too_long = None
        self._arrived.set()

    def _on_long_line(self, length: int) -> None:
        message = (f"{self.label}'s report was too long to read: a line of {length} bytes, over "
                   f"the limit of {self.max_line_bytes} bytes (dropped)")
        with self._lock:
            self._too_long = message
            self._issues.append(message)

    def _on_exit(self, info: StreamExit) -> bool:
        with self._lock:
            self._last_exit = info
        return True

    def _unreadable(self) -> str:
        """What the tool printed that could not be read, or ``""``: the over-long line while it is
        the newest, else the oldest unreadable line kept."""
        with self._lock:
            return self._too_long or (self._issues[0] if self._issues else "")

    def _exit_message(self, info: StreamExit, unreadable: str) -> str:
        message = info.describe(self.label)
        if unreadable:
            message += f"; it printed unreadable output: {unreadable}"
        elif not info.lines and info.returncode == 0:
            message += " before printing a report"
        return message

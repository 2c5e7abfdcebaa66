"""A long-running vendor tool whose output is read line by line.

Some vendor tools have a loop mode (``hl-smi -l``, ``nvidia-smi -l``) that is
far cheaper than starting the tool once per cycle. :class:`LineStream` runs
such a tool as a child in its own session and guarantees what
:func:`allsmi.backends._common.runner.run_tool` guarantees for one-shot calls:

* an argument list, never a shell;
* stdout and stderr drained continuously by one reader thread, so a chatty
  stderr can never block the child;
* bounded memory: a line longer than ``max_line_bytes`` is dropped, counted and handed to
  ``on_long_line`` (its length, so the caller can fail loudly: a tool whose every line is
  over the limit would otherwise look like one that prints nothing), and only the last
  ``stderr_tail_bytes`` of stderr are kept;
* a child that prints nothing for ``idle_timeout`` seconds is killed;
* a child that exits is reaped and restarted after an exponential back-off, also when a
  grandchild it left behind still holds its pipes (the group is killed once the child is gone
  and has printed nothing for :data:`EXIT_GRACE` seconds);
* :meth:`LineStream.close` kills the child's process group, reaps it and joins
  the reader thread, so nothing is left behind.

Only whole lines reach ``on_line``: a partial line left when a child dies is
dropped and reported in :class:`StreamExit`, so a row cut in half can never be
taken for a complete one.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from allsmi.backends._common.runner import describe_exit, kill_group, tool_environment

#: Longest stdout line kept; a CSV row for one device is far below this.
DEFAULT_MAX_LINE = 64 * 1024
#: How much of stderr is kept for error messages.
DEFAULT_STDERR_TAIL = 4096
#: A child that has exited while something else keeps its pipes open: what it wrote last is read
#: for this long, then its group is killed.
EXIT_GRACE = 0.2


@dataclass(frozen=True)
class StreamExit:
    """How one child of a :class:`LineStream` ended."""

    generation: int
    """1 for the first child, 2 for the first restart, ..."""
    returncode: int | None
    """The exit status; negative for a signal, ``None`` if it could not be started."""
    reason: str
    """``exited``, ``hung`` (killed after ``idle_timeout``), ``closed`` or ``spawn-failed``."""
    lines: int
    """Whole stdout lines this child delivered."""
    dropped_partial: bool
    """True when the child died in the middle of a line (that partial line was dropped)."""
    stderr_tail: str
    """The last bytes the child wrote to stderr (or the spawn error)."""
    long_lines: int = 0
    """Lines this child printed that were over the limit and dropped."""

    def describe(self, tool: str) -> str:
        """One line for warnings and error messages."""
        if self.reason == "spawn-failed":
            return f"cannot run {tool}: {self.stderr_tail}"
        if self.reason == "hung":
            what = f"{tool} printed nothing for too long and was killed"
        elif self.returncode is not None:
            what = f"{tool} {describe_exit(self.returncode)}"
        else:
            what = f"{tool} ended"
        tail = " ".join(self.stderr_tail.split())
        if tail:
            what = f"{what}: {tail[-300:]}"
        if self.dropped_partial:
            what += " (its last line was cut off and dropped)"
        if self.long_lines:
            what += f" ({self.long_lines} line(s) over the length limit dropped)"
        return what


class LineStream:
    """Run ``argv`` in the background, hand each stdout line to ``on_line``.

    ``on_start(generation)`` is called before a child's first line,
    ``on_long_line(length)`` for each line dropped for being longer than
    ``max_line_bytes`` (its length in bytes), ``on_exit(StreamExit)`` after
    the child has been reaped; if ``on_exit`` returns False the stream stops
    instead of restarting. All callbacks run on the reader thread and must be
    quick and must not raise.
    """

    def __init__(self, argv: Sequence[str], *,
                 on_line: Callable[[str], None],
                 on_start: Callable[[int], None] | None = None,
                 on_exit: Callable[[StreamExit], bool] | None = None,
                 on_long_line: Callable[[int], None] | None = None,
                 idle_timeout: float = 30.0,
                 backoff_initial: float = 0.5,
                 backoff_max: float = 30.0,
                 max_line_bytes: int = DEFAULT_MAX_LINE,
                 stderr_tail_bytes: int = DEFAULT_STDERR_TAIL,
                 env: dict[str, str] | None = None,
                 name: str = "allsmi-stream") -> None:
        self.argv = tuple(argv)
        self._on_line = on_line
        self._on_start = on_start
        self._on_exit = on_exit
        self._on_long_line = on_long_line
        self.idle_timeout = idle_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.max_line_bytes = max_line_bytes
        self.stderr_tail_bytes = stderr_tail_bytes
        self._env = env
        self._name = name
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self.generation = 0
        """How many children have been started (or tried)."""
        self.dropped_long_lines = 0
        """Lines longer than ``max_line_bytes`` that were dropped."""
        self.next_start_at: float | None = None
        """Monotonic time of the next restart while waiting out a back-off, else None."""

    @property
    def tool(self) -> str:
        return os.path.basename(self.argv[0])

    @property
    def pid(self) -> int | None:
        """The running child's pid, or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the reader thread is alive (a child runs or a restart is pending)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the reader thread (which starts the first child)."""
        if self._thread is not None:
            raise RuntimeError("stream already started")
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop restarting, kill the child's process group, reap it, join the thread.

        Idempotent; never raises.
        """
        with self._lock:
            self._stop.set()
            proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if proc is not None and (thread is None or not thread.is_alive()):
            kill_group(proc)  # reaps; a no-op for a child the thread already reaped

    # -- reader thread -------------------------------------------------------

    def _run(self) -> None:
        delay = self.backoff_initial
        while not self._stop.is_set():
            exit_info = self._run_one()
            keep_going = True
            if self._on_exit is not None and exit_info.reason != "closed":
                keep_going = self._on_exit(exit_info)
            if not keep_going or self._stop.is_set():
                break
            # A child that delivered data was healthy: start over with a short
            # wait. One that delivered nothing backs off exponentially.
            delay = self.backoff_initial if exit_info.lines else min(delay * 2, self.backoff_max)
            self.next_start_at = time.monotonic() + delay
            self._stop.wait(delay)
            self.next_start_at = None

    def _run_one(self) -> StreamExit:
        with self._lock:
            if self._stop.is_set():
                return StreamExit(self.generation, None, "closed", 0, False, "")
            self.generation += 1
            generation = self.generation
            try:
                proc = subprocess.Popen(
                    list(self.argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, start_new_session=True,
                    env=tool_environment() if self._env is None else self._env,
                    close_fds=True)
            except OSError as exc:
                return StreamExit(generation, None, "spawn-failed", 0, False,
                                  str(exc.strerror or exc))
            self._proc = proc
        if self._on_start is not None:
            self._on_start(generation)
        lines = long_lines = 0
        reason = "exited"
        pending = bytearray()
        skipped = 0  # inside an over-long line: bytes of it already dropped
        stderr_tail = bytearray()
        sel = selectors.DefaultSelector()
        try:
            assert proc.stdout is not None and proc.stderr is not None
            sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
            sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
            open_streams = 2
            last_output = time.monotonic()
            exited_at: float | None = None
            while open_streams:
                if self._stop.is_set():
                    reason = "closed"
                    break
                now = time.monotonic()
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - max(exited_at, last_output) > EXIT_GRACE:
                    break  # exited; a grandchild holds the pipes (the group is killed below)
                if now - last_output > self.idle_timeout:
                    reason = "hung"
                    break
                events = sel.select(timeout=0.05 if exited_at is not None else 0.1)
                for key, _ in events:
                    data = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                    if not data:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        continue
                    if key.data == "stderr":
                        stderr_tail += data
                        del stderr_tail[:-self.stderr_tail_bytes]
                        continue
                    last_output = time.monotonic()
                    pending += data
                    while True:
                        newline = pending.find(b"\n")
                        if newline < 0:
                            break
                        raw = bytes(pending[:newline])
                        del pending[:newline + 1]
                        if skipped or len(raw) > self.max_line_bytes:
                            length, skipped = skipped + len(raw), 0
                            long_lines += 1
                            self.dropped_long_lines += 1
                            if self._on_long_line is not None:
                                self._on_long_line(length)
                            continue
                        lines += 1
                        self._on_line(raw.decode("utf-8", "replace").rstrip("\r"))
                    if len(pending) > self.max_line_bytes:
                        skipped += len(pending)
                        pending.clear()
        finally:
            sel.close()
            kill_group(proc)  # kills the group if still running; always reaps
            with self._lock:
                self._proc = None
        return StreamExit(generation, proc.returncode, reason, lines,
                          bool(pending) or skipped > 0,
                          bytes(stderr_tail).decode("utf-8", "replace"), long_lines)

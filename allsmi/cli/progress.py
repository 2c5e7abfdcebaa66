"""Progress of long work, on standard error only when it is a terminal.

A bill over a month (``export --simulate mixed --period last-month``, a month from
Prometheus) takes tens of seconds. On a terminal, a rich progress line on stderr says what
is being done, how far it is and for how long (drawn over itself, gone at the end); off a
terminal (cron, a pipe, a file) nothing is written, so logs and captured stderr stay as they
were. ``--verbose`` adds one line at the end, on a terminal or not: the time the work took.
Standard output is never touched: it carries the one document the command prints.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, TextIO


class Progress:
    """``with Progress("replaying", total=31) as p: ... p.advance()``; ``total=None`` counts
    steps without a bar (``12 queries``)."""

    def __init__(self, what: str, total: int | None = None, *, unit: str = "",
                 verbose: bool = False, stream: TextIO | None = None) -> None:
        self.what, self.total, self.unit, self.verbose = what, total, unit, verbose
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.started = 0.0
        self._bar: Any = None
        self._task: Any = None

    def _is_terminal(self) -> bool:
        """A terminal that can redraw a line (``TERM=dumb`` cannot: rich wrote blank lines)."""
        if os.environ.get("TERM") == "dumb":
            return False
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):  # closed or not a file
            return False

    def __enter__(self) -> "Progress":
        self.started = time.monotonic()
        if self._is_terminal():
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn)
            columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
            if self.total is not None:
                columns += [BarColumn(), MofNCompleteColumn()]
            elif self.unit:  # (steps of no unit are not counted on screen: "billing 0")
                columns.append(TextColumn("{task.completed} " + self.unit))
            columns.append(TimeElapsedColumn())
            # redirect_stdout=False: rich would otherwise send what is printed meanwhile to the
            # bar's stream (stderr), taking it out of the document on stdout
            self._bar = Bar(*columns, console=Console(file=self.stream), transient=True,
                            redirect_stdout=False)
            self._bar.start()
            from rich.markup import escape  # a ledger path or scenario name is text, not markup
            self._task = self._bar.add_task(escape(f"allsmi: {self.what}"), total=self.total)
        return self

    def set_total(self, total: int) -> None:
        """The number of steps, once known."""
        self.total = total
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def advance(self, steps: int = 1) -> None:
        """``steps`` more done (callable from any thread)."""
        self.done += steps
        if self._bar is not None:
            self._bar.update(self._task, advance=steps)

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if self.verbose and kind is None:
            seconds = time.monotonic() - self.started
            steps = f" ({self.done} {self.unit})" if self.unit and self.done else ""
            print(f"allsmi: {self.what}: {seconds:.1f} s{steps}", file=self.stream, flush=True)


def counting(call: Callable[..., Any], progress: Progress) -> Callable[..., Any]:
    """``call``, counting each completed call as one step of ``progress``."""
    def counted(*args: Any, **kwargs: Any) -> Any:
        result = call(*args, **kwargs)
        progress.advance()
        return result
    return counted

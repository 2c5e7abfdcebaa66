"""Progress of a long benchmark (benchmark helper): allsmi's own progress line on standard
error when it is a terminal, nothing when it is not (a pipe, a file, CI), so that what a
benchmark prints on standard output stays one table (issue 35).

Usage: ``with progress("idle CPU", total=6, unit="windows") as p: ... p.advance()``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # allsmi from the checkout if needed
from allsmi.cli.progress import Progress  # noqa: E402


def progress(what: str, total: int | None = None, unit: str = "") -> Progress:
    """A :class:`~allsmi.cli.progress.Progress` on standard error (drawn only on a terminal)."""
    return Progress(what, total, unit=unit)

"""The ``allsmi`` command: a group whose subcommands are imported on demand.

Only the chosen subcommand's module is imported, so ``allsmi snapshot
--format json`` never imports textual, rich or prometheus_client. The plain
``allsmi snapshot`` invocations do not even import click: :mod:`allsmi.cli.fast`
parses them and runs the same code the click command runs; anything else (help,
a bad value, another command) goes to the click group in :mod:`allsmi.cli.group`.
"""

from __future__ import annotations

import errno
import io
import sys
from typing import Any

#: name -> "module:attribute". Commands whose module is not installed are hidden.
COMMANDS: dict[str, str] = {
    "snapshot": "allsmi.cli.snapshot:snapshot",
    "doctor": "allsmi.cli.doctor:doctor",
    "backends": "allsmi.cli.backends_cmd:backends",
    "serve": "allsmi.cli.serve:serve",
    "view": "allsmi.cli.view:view",
    "record": "allsmi.cli.record:record",
    "export": "allsmi.cli.billing.export:export",
    "idle": "allsmi.cli.billing.idle:idle",
    "waste": "allsmi.cli.billing.waste:waste",
    "report": "allsmi.cli.billing.htmlreport:report",
}


#: Why writing to standard output fails, as opposed to a bug: a full or over-quota disk, a file
#: over its size limit, a device error, a reader that left.
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EPIPE,
                           errno.EBADF})


class ClosedStdout(io.TextIOBase):
    """Standard output when the process started with fd 1 closed (``allsmi snapshot >&-``,
    where Python leaves ``sys.stdout`` ``None`` and a print is silently dropped): writing fails
    as a closed descriptor does, so a command that writes a document says it could not and
    exits 1, never 0 with nothing written; one that writes none (``--output FILE``) is
    unaffected."""

    encoding = "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def main() -> None:
    """Console-script entry point: the click-free fast path when it applies, else click."""
    if sys.stdout is None:
        sys.stdout = ClosedStdout()
    try:
        from allsmi.cli.fast import run_fast
        code = run_fast(sys.argv[1:])
        if code is None:
            from allsmi.cli.group import cli
            cli(prog_name="allsmi")  # (exits by itself)
        sys.stdout.flush()  # here, where a failure can still be said, not at interpreter exit
    except OSError as exc:
        if not is_output_lost(exc):
            raise
        output_lost(exc)
    sys.exit(code)


def is_output_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is standard output refusing the document (not a file, not a bug)."""
    return isinstance(exc, OSError) and exc.filename is None and exc.errno in OUTPUT_ERRNOS


def output_lost_message(exc: OSError) -> str:
    return f"cannot write the output to standard output: {exc.strerror or exc}"


def output_lost(exc: OSError) -> None:
    """Standard output could not take the document: say so in one line (nothing for a reader
    that left, ``| head``) and exit 1; stdout is pointed at /dev/null so that Python's own
    flush at exit does not fail again."""
    import os
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    if exc.errno != errno.EPIPE:
        sys.stderr.write(f"allsmi: {output_lost_message(exc)}\n")
    sys.exit(1)


def __getattr__(name: str) -> Any:
    """``cli``, ``LazyGroup`` and ``EPILOG`` live in :mod:`allsmi.cli.group` (they need click)."""
    if name in ("cli", "LazyGroup", "EPILOG"):
        from allsmi.cli import group
        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The ``allsmi`` command: a group whose subcommands are imported on demand.

Only the chosen subcommand's module is imported, so ``allsmi snapshot
--format json`` never imports textual, rich or prometheus_client. The plain
``allsmi snapshot`` invocations do not even import click: :mod:`allsmi.cli.fast`
parses them and runs the same code the click command runs; anything else (help,
a bad value, another command) goes to the click group in :mod:`allsmi.cli.group`.
"""

from __future__ import annotations

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
    "export": "allsmi.cli.export:export",
    "idle": "allsmi.cli.idle:idle",
    "waste": "allsmi.cli.waste:waste",
    "report": "allsmi.cli.htmlreport:report",
}


def main() -> None:
    """Console-script entry point: the click-free fast path when it applies, else click."""
    from allsmi.cli.fast import run_fast
    code = run_fast(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from allsmi.cli.group import cli
    cli(prog_name="allsmi")


def __getattr__(name: str) -> Any:
    """``cli``, ``LazyGroup`` and ``EPILOG`` live in :mod:`allsmi.cli.group` (they need click)."""
    if name in ("cli", "LazyGroup", "EPILOG"):
        from allsmi.cli import group
        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

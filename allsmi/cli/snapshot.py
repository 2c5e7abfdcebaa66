"""``allsmi snapshot``: one collection cycle, printed or written to a file."""

from __future__ import annotations

from typing import Any

import click

from allsmi.cli.common import common_options
# The work itself lives in a click-free module shared with the start-up fast path
# (allsmi/cli/fast.py); these names stay importable from here.
from allsmi.cli.snapshot_run import (CLOSE_GRACE_SECONDS, FORMATS, OriginalStdout, leave_now,  # noqa: F401
                                     output_mode, render, run)


@click.command()
@click.option("--format", "output_format", type=click.Choice(FORMATS), default=None,
              help="Output format (default: table on a terminal, json otherwise); csv has one row "
                   "per device, processes-csv one row per process (with its device's id and uuid).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write to FILE atomically instead of stdout: owner-only (0600), except "
                   "--format prometheus (0644, for node_exporter's textfile collector).")
@common_options
def snapshot(output_format: str | None, output: str | None, **opts: Any) -> None:
    """Take one snapshot of every device and print it.

    \b
    Examples:
      allsmi snapshot                                  table on a terminal, JSON in a pipe
      allsmi snapshot --format json | jq '.devices[] | {id, power_watts}'
      allsmi snapshot --simulate mixed --format csv -o devices.csv
      allsmi snapshot --simulate mixed --format processes-csv -o processes.csv
    """
    run(output_format, output, opts)

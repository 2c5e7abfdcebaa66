"""``allsmi snapshot``: one collection cycle, printed or written to a file."""

from __future__ import annotations

from typing import Any

import click

from allsmi.cli.common import build_collector, common_options, fail, settings, stdout_is_terminal
from allsmi.host import HostSampler

FORMATS = ("json", "csv", "table", "prometheus")


def render(snapshot: Any, output_format: str) -> str:
    """The snapshot in ``output_format``; imports only what that format needs."""
    if output_format == "json":
        from allsmi.output import to_json
        return to_json(snapshot)
    if output_format == "csv":
        from allsmi.output import to_csv
        return to_csv(snapshot)
    if output_format == "prometheus":
        from allsmi.exporter.exposition import render_snapshot
        return render_snapshot(snapshot)
    from allsmi.cli.table import render_table
    return render_table(snapshot)


@click.command()
@click.option("--format", "output_format", type=click.Choice(FORMATS), default=None,
              help="Output format (default: table on a terminal, json otherwise).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write to FILE atomically (owner-only) instead of stdout.")
@common_options
def snapshot(output_format: str | None, output: str | None, **opts: Any) -> None:
    """Take one snapshot of every device and print it.

    \b
    Examples:
      allsmi snapshot                                  table on a terminal, JSON in a pipe
      allsmi snapshot --format json | jq '.devices[] | {id, power_watts}'
      allsmi snapshot --simulate mixed --format csv -o devices.csv
    """
    host = HostSampler()
    host.prime()
    s = settings(**opts)
    if output_format is None:
        output_format = "table" if (output is None and stdout_is_terminal()) else "json"
    collector = build_collector(s)
    collector.host = host
    try:
        snap = collector.collect_once()
    finally:
        collector.close()
    text = render(snap, output_format)
    if output:
        from allsmi.atomic import write_atomic
        try:
            write_atomic(output, text)
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror or exc}", 1) from None
    else:
        click.echo(text, nl=False)

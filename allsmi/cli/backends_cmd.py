"""``allsmi backends``: what is registered, without importing any backend."""

from __future__ import annotations

import json

import click

from allsmi import registry


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def backends(as_json: bool) -> None:
    """List the registered backends (built-in and third-party entry points)."""
    rows = []
    for name in registry.names():
        ep = registry.entry_point(name)
        dist = getattr(ep, "dist", None)
        rows.append({"name": name, "target": ep.value,
                     "distribution": f"{dist.name} {dist.version}" if dist else None,
                     "simulation": name in registry.SIMULATION_BACKENDS})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        note = "  (simulation)" if row["simulation"] else ""
        click.echo(f"{row['name']:<13} {row['target']:<45} {row['distribution'] or ''}{note}")

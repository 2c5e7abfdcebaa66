"""``allsmi backends``: what is registered, without importing any backend (``--json`` adds each
built-in backend's ``[backends.NAME]`` options, from its vendor package's declaration)."""

from __future__ import annotations

import json

import click

from allsmi import registry
from allsmi.declarations import BackendOption


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def backends(as_json: bool) -> None:
    """List the registered backends (built-in and third-party entry points)."""
    rows = []
    declared = {d.backend: d.options for d in registry.declarations()} if as_json else {}
    declared.update((name, ()) for name in registry.SIMULATION_BACKENDS)
    for name in registry.names():
        ep = registry.entry_point(name)
        dist = getattr(ep, "dist", None)
        rows.append({"name": name, "target": ep.value,
                     "distribution": f"{dist.name} {dist.version}" if dist else None,
                     "simulation": name in registry.SIMULATION_BACKENDS,
                     "options": _options(declared.get(name))})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        note = "  (simulation)" if row["simulation"] else ""
        click.echo(f"{row['name']:<13} {row['target']:<45} {row['distribution'] or ''}{note}")


def _options(options: "tuple[BackendOption, ...] | None") -> "list[dict[str, object]] | None":
    """A backend's options as JSON (``None``: a plug-in that does not declare them)."""
    if options is None:
        return None
    return [{"name": o.name, "default": o.default, "takes": o.range_text(), "meaning": o.meaning}
            for o in options]

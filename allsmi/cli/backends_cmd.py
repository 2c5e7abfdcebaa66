"""``allsmi backends``: what is registered, without importing any backend (``--json`` adds each
built-in backend's ``[backends.NAME]`` options, from its vendor package's declaration)."""

from __future__ import annotations

import json

import click

from allsmi.collection import registry
from allsmi.schema.declarations import BackendOption


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
    for ep in registry.clashes():  # registered, not loaded: said, never silently left out
        dist = getattr(ep, "dist", None)
        rows.append({"name": ep.name, "target": ep.value,
                     "distribution": f"{dist.name} {dist.version}" if dist else None,
                     "simulation": False, "options": None,
                     "not_loaded": f"the name is taken by {registry.entry_point(ep.name).value}"})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    # what installed packages registered is shown as it is, never as control sequences
    from allsmi.schema.text import escaped
    shown = [(escaped(r["name"]), escaped(r["target"]), escaped(r["distribution"] or ""), r)
             for r in rows]
    name_width = max((len(name) for name, _, _, _ in shown), default=0)
    target_width = max((len(target) for _, target, _, _ in shown), default=0)
    for name, target, dist, row in shown:
        note = "  (simulation)" if row["simulation"] else ""
        if row.get("not_loaded"):
            note = f"  (not loaded: {escaped(row['not_loaded'])})"
        click.echo(f"{name:<{name_width}}  {target:<{target_width}}  {dist}{note}".rstrip())


def _options(options: "tuple[BackendOption, ...] | None") -> "list[dict[str, object]] | None":
    """A backend's options as JSON (``None``: a plug-in that does not declare them)."""
    if options is None:
        return None
    return [{"name": o.name, "default": o.default, "takes": o.range_text(), "meaning": o.meaning}
            for o in options]

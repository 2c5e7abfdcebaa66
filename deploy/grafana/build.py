#!/usr/bin/env python3
"""Build the Grafana dashboards from the exporter's declarations.

    python deploy/grafana/build.py           # rewrite allsmi-fleet.json and allsmi-node.json
    python deploy/grafana/build.py --check   # exit 1 if the committed JSON differs

The dashboards are the package next to this script: ``dashboards/units.py`` derives every
unit from the metric's declaration (``allsmi.exporter.families``, whose device gauges come
from ``allsmi.schema.fields.MEASUREMENTS``): a gauge in bytes is shown in bytes, the rate of a
joules counter in watts; ``dashboards/panels.py`` holds the JSON building blocks;
``dashboards/fleet.py`` and ``dashboards/node.py`` the two dashboards' contents. The node
dashboard has one panel per measured field, so a field added to ``allsmi/schema/fields.py`` gets
its panel by rebuilding. ``tests/deploy/test_grafana.py`` checks that the committed JSON is
this script's output and runs every panel query against a real Prometheus.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the dashboards package lies next to this script
    sys.path.insert(0, str(HERE))

from dashboards.fleet import fleet  # noqa: E402
from dashboards.node import node  # noqa: E402

DASHBOARDS = {"allsmi-fleet.json": fleet, "allsmi-node.json": node}


def render(name: str) -> str:
    """The JSON text of one dashboard, as committed."""
    return json.dumps(DASHBOARDS[name](), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print("usage: build.py [--check]", file=sys.stderr)
        return 2
    stale = []
    for name in DASHBOARDS:
        path, text = HERE / name, render(name)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python deploy/grafana/build.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Regenerate ``docs/dashboard.svg``: the dashboard on a simulated mixed node at 160x48.

Usage: python benchmarks/dashboard_screenshot.py [OUTPUT.svg]

Deterministic: two minutes of the built-in ``mixed`` scenario at a fixed
time (so the sparklines have history), a fixed hostname and a frozen clock.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from allsmi.backends.simulated import simulated_backends  # noqa: E402
from allsmi.collection.collector import Collector  # noqa: E402
from allsmi.config import parse_config  # noqa: E402
from allsmi.dashboard.screen.app import DashboardApp  # noqa: E402
from allsmi.dashboard.sources import StaticSource  # noqa: E402
from allsmi.schema import HostSample  # noqa: E402

START = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc).timestamp()
CONFIG = """
[groups.training]
labels = { team = "ml", project = "llm" }
[groups.inference]
labels = { team = "serving" }
[[rules]]
resource_group = "training"
vendor = "nvidia"
[[rules]]
resource_group = "inference"
vendor = "amd"
"""


class _Host:
    def sample(self) -> HostSample:
        return HostSample("gpu-node-01", 23.0, 187 * 1024**3, 2048 * 1024**3)


async def _shoot(output: Path) -> None:
    now = [START]
    clock = lambda: now[0]  # noqa: E731
    config = parse_config(CONFIG)
    collector = Collector(simulated_backends("mixed", clock=clock), config, interval_seconds=2.0,
                          host_sampler=_Host(), clock=clock)  # type: ignore[arg-type]
    snapshots = []
    try:
        for i in range(60):
            now[0] = START - 118 + 2 * i
            snapshots.append(collector.collect_once())
    finally:
        collector.close()
    source = StaticSource.of(snapshots, clock=lambda: 0.0, interval=2.0)
    app = DashboardApp(source, config=config, clock=lambda: 0.4)
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(len(snapshots) - 1):
            source.advance()
            app.poll()
        await pilot.press("down", "down", "down")
        await pilot.pause()
        app.save_screenshot(filename=output.name, path=str(output.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", type=Path, default=REPO / "docs" / "dashboard.svg",
                        metavar="OUTPUT.svg", help="where the SVG is written (docs/dashboard.svg)")
    output = parser.parse_args().output
    asyncio.run(_shoot(output))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()

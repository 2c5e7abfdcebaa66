"""Deterministic inputs for the dashboard tests: simulated snapshots at a fixed time."""

from __future__ import annotations

import datetime as dt
from typing import Sequence

from allsmi.config import Config, parse_config
from allsmi.schema import HostSample, Snapshot

#: A fixed instant in the simulated day (jobs are running on most devices).
FIXED_TIME = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc).timestamp()

GROUPS_TOML = """
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


def groups_config() -> Config:
    """NVIDIA devices in ``training``, AMD in ``inference``, the rest in ``default``."""
    return parse_config(GROUPS_TOML)


class FixedHost:
    """A host sampler with constant readings (psutil would make screens differ)."""

    def __init__(self, hostname: str = "node-a") -> None:
        self.hostname = hostname

    def prime(self) -> None:
        """Nothing to prime."""

    def sample(self) -> HostSample:
        return HostSample(hostname=self.hostname, cpu_utilization_percent=12.5,
                          memory_used_bytes=96 * 1024**3, memory_total_bytes=512 * 1024**3)


def simulated_snapshots(count: int = 3, *, step: float = 1.0, scenario: str = "mixed",
                        hostname: str = "node-a", start: float = FIXED_TIME,
                        config: Config | None = None, attribution: bool = False) -> list[Snapshot]:
    """``count`` snapshots of a simulated node, ``step`` seconds apart, from ``start``; with
    ``attribution`` the simulated pods and jobs hold its devices (as ``allsmi --simulate``)."""
    from allsmi.backends.simulated import simulated_backends
    from allsmi.collection.collector import Collector

    now = [start]
    clock = lambda: now[0]  # noqa: E731
    config = config or groups_config()
    attributor = None
    if attribution:
        from allsmi.collection import registry
        from allsmi.attribution import build_attributor
        attributor = build_attributor(config, environ={}, simulate=True,
                                      declarations=registry.declarations())
    collector = Collector(simulated_backends(scenario, clock=clock), config,
                          interval_seconds=step, host_sampler=FixedHost(hostname),  # type: ignore[arg-type]
                          attributor=attributor, clock=clock)
    out = []
    try:
        for i in range(count):
            now[0] = start + i * step
            out.append(collector.collect_once())
    finally:
        collector.close()
    return out


def scaled(snapshot: Snapshot, copies: int) -> Snapshot:
    """One snapshot with its devices repeated ``copies`` times under fresh ids and indexes."""
    from dataclasses import replace
    devices = []
    for c in range(copies):
        for dev in snapshot.devices:
            devices.append(replace(dev, id=f"{dev.id}#{c}", parent=None if dev.parent is None
                                   else f"{dev.parent}#{c}",
                                   index=None if dev.index is None else dev.index + 100 * c))
    return replace(snapshot, devices=tuple(devices))


def frames_of(snapshots: Sequence[Snapshot]) -> list[dict[str, Snapshot | str]]:
    """StaticSource frames for one host."""
    return [{s.host.hostname: s} for s in snapshots]

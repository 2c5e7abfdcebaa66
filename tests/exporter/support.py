"""Helpers shared by the exporter tests: building snapshots and reading expositions."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace
from typing import Any, Iterable

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from allsmi.schema import BackendStatus, DeviceSample, HostSample, ProcessSample, Snapshot

T0 = 1_800_000_000.0

SeriesKey = tuple[str, frozenset[tuple[str, str]]]


def device(dev_id: str = "GPU-a", **kw: Any) -> DeviceSample:
    """A healthy NVIDIA-like device with every field known unless overridden."""
    base: dict[str, Any] = dict(
        id=dev_id, vendor="nvidia", kind="gpu", backend="nvidia", index=0, uuid=dev_id,
        name="H100", bus_id="00000000:18:00.0", driver_version="560.35.03",
        firmware_version="96.00", resource_group="training", labels={"team": "ml"}, health="ok",
        utilization_percent=55.0, memory_used_bytes=1024, memory_total_bytes=4096,
        temperature_celsius=61.5, power_watts=300.0, power_limit_watts=700.0,
        energy_joules=None, clock_mhz=1980.0, fan_percent=40.0,
        compute_active_percent=20.0, compute_active_source="sm_active", sm_occupancy_percent=12.0,
        tensor_active_percent=5.0, memory_bandwidth_percent=30.0,
        processes=(ProcessSample(4242, "alice", "python train.py", 512),))
    base.update(kw)
    return DeviceSample(**base)


def snapshot(devices: Iterable[DeviceSample], at: float = T0,
             backends: Iterable[BackendStatus] | None = None) -> Snapshot:
    devs = tuple(devices)
    if backends is None:
        backends = [BackendStatus(name, "ok", "", 0.01) for name in sorted({d.backend for d in devs})]
    return Snapshot(timestamp=dt.datetime.fromtimestamp(at, dt.timezone.utc),
                    host=HostSample("node1"), devices=devs, backends=tuple(backends))


def series(text: str, openmetrics: bool = False) -> dict[SeriesKey, float]:
    """Every sample of an exposition, keyed by (sample name, label set)."""
    parse = parse_openmetrics if openmetrics else parse_text
    out: dict[SeriesKey, float] = {}
    for family in parse(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def values(text: str, name: str, openmetrics: bool = False, **match: str) -> dict[str, float]:
    """Values of sample ``name`` by ``uuid`` label (or the whole label set), filtered by ``match``."""
    found: dict[str, float] = {}
    for (sample, labels), value in series(text, openmetrics).items():
        lab = dict(labels)
        if sample == name and all(lab.get(k) == v for k, v in match.items()):
            found[lab.get("uuid", repr(sorted(lab.items())))] = value
    return found


def labelsets(text: str, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (sample, labels) in series(text) if sample == name]


def no_nan(text: str) -> bool:
    return not any(math.isnan(v) for v in series(text).values())


__all__ = ["T0", "device", "snapshot", "series", "values", "labelsets", "no_nan", "replace"]

"""Usage parts for a window, computed by Prometheus from the exporter's counters.

The fleet path: every node runs ``allsmi serve``; Prometheus scrapes them;
the export asks Prometheus, at the window's end (``/api/v1/query?time=``),
for the ``increase()`` of each accounting counter over the window, per device:

    sum by (uuid, instance, resource_group, vendor, model)
        (increase(allsmi_device_energy_joules_total[<window>s]))

and likewise for ``busy``, ``allocated`` and ``observed`` seconds. A device
counts in ``device_count`` when it has an ``allsmi_device_info`` series (or an
observed-seconds series) in the window, as the ledger counts every device it
saw, lost ones included; ``host`` is Prometheus' ``instance`` label; the group labels come
from ``allsmi_resource_group_info{resource_group, <labels>}``.

Prometheus' ``increase()`` extrapolates from the first and last samples in
the window toward its edges, and counters only move when the exporter
collects, so the figures differ slightly from the ledger's (which splits at
exact boundaries): by up to about one scrape interval plus one collection
interval of usage per device and window edge.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from allsmi.accounting.periods import Window
from allsmi.accounting.report import Part

COUNTERS = {
    "observed": "allsmi_device_observed_seconds_total",
    "allocated": "allsmi_device_allocated_seconds_total",
    "busy": "allsmi_device_busy_seconds_total",
    "energy": "allsmi_device_energy_joules_total",
}
DEVICE_LABELS = ("uuid", "instance", "resource_group", "vendor", "model")
GROUP_INFO = "allsmi_resource_group_info"
DEVICE_INFO = "allsmi_device_info"
MEMORY = "allsmi_device_memory_used_bytes"
_NOT_LABELS = {"__name__", "instance", "job", "resource_group"}


class PrometheusError(Exception):
    """Prometheus could not be reached or answered with an error."""


class PrometheusClient:
    """A minimal client for the instant-query API."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise PrometheusError(f"invalid Prometheus URL {url!r} (expected http://host:port)")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        """The vector result of ``promql`` evaluated at unix time ``at``."""
        params = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        request = urllib.request.Request(f"{self.url}/api/v1/query?{params}",
                                         headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                body = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            raise PrometheusError(f"{self.url}: HTTP {exc.code} for {promql!r}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{self.url}: the answer is not JSON") from None
        if doc.get("status") != "success":
            raise PrometheusError(f"{self.url}: query {promql!r} failed: "
                                  f"{doc.get('errorType', '')} {doc.get('error', '')}".strip())
        data = doc.get("data") or {}
        if data.get("resultType") != "vector":
            raise PrometheusError(f"{self.url}: expected a vector for {promql!r}, "
                                  f"got {data.get('resultType')!r}")
        return list(data.get("result") or [])


def _value(sample: dict[str, Any]) -> float | None:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _device_key(metric: dict[str, str]) -> tuple[str, ...]:
    return tuple(metric.get(k, "") for k in DEVICE_LABELS)


def prometheus_parts(client: PrometheusClient, window: Window) -> list[Part]:
    """One part per device series seen in the window (hosts named by ``instance``)."""
    at, rng = window.end_unix, f"{max(window.seconds, 1)}s"
    by = ", ".join(DEVICE_LABELS)
    values: dict[str, dict[tuple[str, ...], float]] = {}
    for name, metric in COUNTERS.items():
        values[name] = {}
        for sample in client.query(f"sum by ({by}) (increase({metric}[{rng}]))", at):
            value = _value(sample)
            if value is not None:
                values[name][_device_key(sample.get("metric", {}))] = max(0.0, value)
    mem_avg = {(s["metric"].get("uuid", ""), s["metric"].get("instance", "")): _value(s)
               for s in client.query(f"max by (uuid, instance) (avg_over_time({MEMORY}[{rng}]))", at)}
    mem_max = {(s["metric"].get("uuid", ""), s["metric"].get("instance", "")): _value(s)
               for s in client.query(f"max by (uuid, instance) (max_over_time({MEMORY}[{rng}]))", at)}
    labels: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
    for sample in client.query(f"last_over_time({GROUP_INFO}[{rng}])", at):
        metric = sample.get("metric", {})
        group_labels = tuple(sorted((k, v) for k, v in metric.items() if k not in _NOT_LABELS))
        labels[(metric.get("instance", ""), metric.get("resource_group", ""))] = group_labels
        labels.setdefault(("", metric.get("resource_group", "")), group_labels)

    # Devices: every one with an info series in the window (lost ones too, as the ledger counts
    # them), and every one with an observed-time counter.
    keys = set(values["observed"])
    for sample in client.query(f"group by ({by}) (last_over_time({DEVICE_INFO}[{rng}]))", at):
        keys.add(_device_key(sample.get("metric", {})))
    parts: list[Part] = []
    for key in sorted(keys):
        observed = values["observed"].get(key, 0.0)
        uuid, instance, group, vendor, model = key
        busy = values["busy"].get(key)
        mem = mem_avg.get((uuid, instance))
        parts.append(Part(
            resource_group=group, labels=labels.get((instance, group), labels.get(("", group), ())),
            vendor=vendor, model=model, host=instance, device=f"{instance}/{uuid}",
            observed_s=observed, allocated_s=values["allocated"].get(key), busy_s=busy,
            busy_observed_s=observed if busy is not None else 0.0,
            energy_j=values["energy"].get(key), mem_sum=mem, mem_samples=0 if mem is None else 1,
            mem_peak=mem_max.get((uuid, instance))))
    return parts

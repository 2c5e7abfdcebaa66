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

import math
from dataclasses import replace
from typing import Any

from allsmi.accounting.periods import Window
from allsmi.accounting.promclient import (MAX_RESPONSE_BYTES, MAX_SECRET_BYTES, Credentials,
                                          PrometheusClient, PrometheusError, access_settings,
                                          read_secret, redact_url, split_url)
from allsmi.accounting.report import Part

__all__ = ["COUNTERS", "Credentials", "MAX_RESPONSE_BYTES", "MAX_SECRET_BYTES", "PrometheusClient",
           "PrometheusError", "access_settings", "holder_parts", "prometheus_parts", "read_secret",
           "redact_url", "split_holders", "split_url"]

COUNTERS = {
    "observed": "allsmi_device_observed_seconds_total",
    "allocated": "allsmi_device_allocated_seconds_total",
    "busy": "allsmi_device_busy_seconds_total",
    "energy": "allsmi_device_energy_joules_total",
    "idle": "allsmi_device_idle_allocated_seconds_total",
}
DEVICE_LABELS = ("uuid", "instance", "resource_group", "vendor", "model")
GROUP_INFO = "allsmi_resource_group_info"
DEVICE_INFO = "allsmi_device_info"
MEMORY = "allsmi_device_memory_used_bytes"
SHARE = "allsmi_device_partition_share_ratio"
WORKLOAD_INFO = "allsmi_device_workload_info"
#: What identifies a holder in ``allsmi_device_workload_info`` (besides the device).
WORKLOAD_KEYS = ("namespace", "pod", "job_id")
_NOT_LABELS = {"__name__", "instance", "job", "resource_group"}
def _value(sample: dict[str, Any]) -> float | None:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _device_key(metric: dict[str, str]) -> tuple[str, ...]:
    return tuple(metric.get(k, "") for k in DEVICE_LABELS)


def _series(client: PrometheusClient, promql: str, at: float,
            keys: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for sample in client.query(promql, at):
        value = _value(sample)
        if value is not None:
            metric = sample.get("metric", {})
            out[tuple(metric.get(k, "") for k in keys)] = value
    return out


def prometheus_parts(client: PrometheusClient, window: Window,
                     by_holder: bool = False) -> tuple[list[Part], list[Part] | None]:
    """One part per device series seen in the window (hosts named by ``instance``), and with
    ``by_holder`` the workloads' shares of them (see :func:`holder_parts`)."""
    at, rng = window.end_unix, f"{max(window.seconds, 1)}s"
    by = ", ".join(DEVICE_LABELS)
    values: dict[str, dict[tuple[str, ...], float]] = {}
    for name, metric in COUNTERS.items():
        values[name] = {k: max(0.0, v) for k, v in _series(
            client, f"sum by ({by}) (increase({metric}[{rng}]))", at, DEVICE_LABELS).items()}
    pair = ("uuid", "instance")
    mem_avg = _series(client, f"max by (uuid, instance) (avg_over_time({MEMORY}[{rng}]))", at, pair)
    mem_max = _series(client, f"max by (uuid, instance) (max_over_time({MEMORY}[{rng}]))", at, pair)
    # Partitions and their parents: billed at their share (the average over the window).
    shares = _series(client, f"max by (uuid, instance) (avg_over_time({SHARE}[{rng}]))", at, pair)
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
        allocated, idle = values["allocated"].get(key), values["idle"].get(key)
        energy = values["energy"].get(key)
        if idle is not None and allocated is not None:
            idle = min(idle, allocated)  # increase() extrapolates each counter on its own
        share = shares.get((uuid, instance))
        scale = lambda v: None if v is None or share is None else v * share  # noqa: E731
        parts.append(Part(
            resource_group=group, labels=labels.get((instance, group), labels.get(("", group), ())),
            vendor=vendor, model=model, host=instance, device=f"{instance}/{uuid}",
            observed_s=observed, allocated_s=allocated, busy_s=busy,
            busy_observed_s=observed if busy is not None else 0.0,
            energy_j=energy, mem_sum=mem, mem_samples=0 if mem is None else 1,
            mem_peak=mem_max.get((uuid, instance)), billed_s=scale(allocated),
            idle_s=idle, idle_billed_s=scale(idle),
            # The energy of idle time: the device's energy in proportion to its idle time.
            idle_energy_j=None if idle is None or energy is None or observed <= 0
            else energy * min(1.0, idle / observed)))
    if not by_holder:
        return parts, None
    return parts, holder_parts(client, window, parts)


def holder_parts(client: PrometheusClient, window: Window, parts: list[Part]) -> list[Part]:
    """The workloads' shares of each device part, plus what no workload was given.

    Each workload of ``allsmi_device_workload_info`` (per namespace, pod and job id) gets a
    device's allocated, billed and idle time (and idle energy) in proportion to the samples in
    which it held the device among all its workloads' samples, and its observed and used time
    and energy in proportion to its samples among the device's samples in the window (the rest:
    time no workload held it). Users are not split (Prometheus has no per-user accounting).
    """
    at, rng = window.end_unix, f"{max(window.seconds, 1)}s"
    dev_keys = ("uuid", "instance", "resource_group")
    held = _series(client, f"sum by ({', '.join(dev_keys + WORKLOAD_KEYS)}) "
                           f"(count_over_time({WORKLOAD_INFO}[{rng}]))", at, dev_keys + WORKLOAD_KEYS)
    samples = _series(client, f"max by (uuid, instance) (count_over_time({DEVICE_INFO}[{rng}]))",
                      at, ("uuid", "instance"))
    return split_holders(parts, held, samples)


def split_holders(parts: list[Part], held: dict[tuple[str, ...], float],
                  samples: dict[tuple[str, str], float]) -> list[Part]:
    """Each device part split among its workloads by ``held`` (samples per uuid, instance,
    resource group and workload keys) out of ``samples`` (the device's samples)."""
    per_device: dict[tuple[str, ...], list[tuple[tuple[str, ...], float]]] = {}
    for key, count in held.items():
        if count > 0:
            per_device.setdefault(key[:3], []).append((key[3:], count))
    out: list[Part] = []
    for part in parts:
        instance, uuid = part.device.split("/", 1)
        works = sorted(per_device.get((uuid, instance, part.resource_group), []))
        total = sum(n for _, n in works)
        seen = max(total, samples.get((uuid, instance), 0.0))
        given: list[Part] = []
        for (namespace, pod, job), count in works:
            held_f, seen_f = count / total, count / seen
            f = lambda v, k=held_f: None if v is None else v * k  # noqa: E731
            g = lambda v, k=seen_f: None if v is None else v * k  # noqa: E731
            given.append(replace(
                part, namespace=namespace or None, pod=pod or None, job=job or None,
                observed_s=part.observed_s * seen_f, busy_s=g(part.busy_s),
                busy_observed_s=part.busy_observed_s * seen_f, energy_j=g(part.energy_j),
                mem_sum=None, mem_samples=0, mem_peak=None,
                allocated_s=f(part.allocated_s), billed_s=f(part.billed_s), idle_s=f(part.idle_s),
                idle_billed_s=f(part.idle_billed_s), idle_energy_j=f(part.idle_energy_j)))
        out.extend(given)
        out.append(_rest(part, given))
    return out


def _rest(part: Part, given: list[Part]) -> Part:
    """``part`` less what ``given`` holds (never negative): the unattributed share."""
    def left(name: str) -> float | None:
        whole = getattr(part, name)
        if whole is None:
            return None
        return max(0.0, whole - sum(getattr(p, name) or 0.0 for p in given))
    names = ("observed_s", "allocated_s", "busy_s", "busy_observed_s", "energy_j", "billed_s",
             "idle_s", "idle_billed_s", "idle_energy_j")
    return replace(part, mem_sum=None, mem_samples=0, mem_peak=None,
                   **{n: left(n) for n in names})  # type: ignore[arg-type]

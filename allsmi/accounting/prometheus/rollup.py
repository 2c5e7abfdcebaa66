"""Usage for a window from the hourly billing roll-ups where they exist, raw counters elsewhere.

``deploy/prometheus/allsmi-rules.yml`` (group ``allsmi-billing-hourly``) records, once an hour,
each device's increase of every accounting counter over the hour just closed, the hour's
partition share, memory and sample counts, and a marker series
``fleet:allsmi_billing_rollup_window_seconds:hourly`` whose value is the length of the hour it covers. The
marker's samples (their timestamps, read as a range vector) tell which hours were rolled up:
each sample at time ``t`` with value ``w`` covers ``(t - w, t]``. ``vmalert`` evaluates at whole
hours (``-datasource.queryTimeAlignment``, on by default); Prometheus at a fixed offset within
the hour; either way every roll-up covers the hour before its timestamp.

A window is billed from the roll-ups that lie wholly inside it, and from the raw counters
(:func:`allsmi.accounting.prometheus.source.prometheus_parts`) for the rest: its edges, when it does
not start or end where a roll-up does, and any hour that was not rolled up (the evaluator
was down). Both give :class:`~allsmi.accounting.report.Part` records per device (and holder)
that add up, so a month is a few queries over ~720 samples per device instead of an
``increase()`` over a month of raw samples.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from allsmi.accounting.prometheus import activity as promactivity
from allsmi.accounting.periods import Window
from allsmi.accounting.prometheus.client import PrometheusClient
from allsmi.accounting.prometheus.hours import MARKER, Hours, choose_hours, hourly_values, hours_notes
from allsmi.accounting.prometheus.series import (DEVICE_LABELS, GROUP_INFO, HOLDER_KEYS, WORKLOAD_KEYS,
                                          query_series)
from allsmi.accounting.prometheus.source import check_window, prometheus_parts
from allsmi.accounting.report import Part

#: The hourly roll-ups: what each records, by the accounting counter it rolls up.
ROLLUPS = {
    "observed": "instance_uuid:allsmi_device_observed_seconds:increase1h",
    "allocated": "instance_uuid:allsmi_device_allocated_seconds:increase1h",
    "busy": "instance_uuid:allsmi_device_busy_seconds:increase1h",
    "energy": "instance_uuid:allsmi_device_energy_joules:increase1h",
    "idle": "instance_uuid:allsmi_device_idle_allocated_seconds:increase1h",
    "billed": "instance_uuid:allsmi_device_billed_seconds:increase1h",
    "idle_billed": "instance_uuid:allsmi_device_idle_billed_seconds:increase1h",
    "active": "instance_uuid:allsmi_device_active_seconds:increase1h",
    "active_allocated": "instance_uuid:allsmi_device_active_allocated_seconds:increase1h",
}
#: The per-holder roll-ups (of ``allsmi_holder_*``), by the part of a holder each gives.
HOLDER_ROLLUPS = {
    "allocated": "instance_uuid_holder:allsmi_holder_allocated_seconds:increase1h",
    "used": "instance_uuid_holder:allsmi_holder_used_seconds:increase1h",
    "energy": "instance_uuid_holder:allsmi_holder_energy_joules:increase1h",
    "active": "instance_uuid_holder:allsmi_holder_active_seconds:increase1h",
}
MEMORY_AVG = "instance_uuid:allsmi_device_memory_used_bytes:avg1h"
MEMORY_MAX = "instance_uuid:allsmi_device_memory_used_bytes:max1h"
DEVICE_SAMPLES = "instance_uuid:allsmi_device_info:count1h"
WORKLOAD_SAMPLES = "instance_uuid_workload:allsmi_device_workload_info:count1h"
GROUP_INFO_ROLLUP = "instance:allsmi_resource_group_info:max1h"
_NOT_LABELS = {"__name__", "instance", "job", "resource_group"}
#: The most raw pieces (edges and hours not rolled up) one export asks for; beyond it the
#: whole window is billed from the raw counters (a store with that many holes).
MAX_RAW_PIECES = 48


@dataclass(frozen=True)
class Usage:
    """What a window is billed from: the parts, and in words which data gave them."""

    parts: list[Part]
    holders: list[Part] | None
    detail: str
    rollup_seconds: int = 0
    raw_seconds: int = 0
    #: What the export says on stderr about the data (copies of roll-ups, duplicate series).
    notes: tuple[str, ...] = ()


def _gaps(start: int, end: int, covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    gaps, at = [], start
    for lo, hi in covered:
        if lo > at:
            gaps.append((at, lo))
        at = max(at, hi)
    if at < end:
        gaps.append((at, end))
    return gaps


def _window(start: int, end: int, tz: Any) -> Window:
    return Window(dt.datetime.fromtimestamp(start, tz), dt.datetime.fromtimestamp(end, tz))


def _iso(t: int) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def prometheus_usage(client: PrometheusClient, window: Window, by_holder: bool = False,
                     rollups: bool = True) -> Usage:
    """The window's parts from the roll-ups where they exist (unless ``rollups`` is false),
    the raw counters elsewhere; each hour billed once however often it was rolled up, and no
    device billed more than the window (:func:`~allsmi.accounting.prometheus.source.check_window`)."""
    notes: list[str] = []
    if not rollups:
        parts, holders = prometheus_parts(client, window, by_holder, notes)
        parts, holders = check_window(client, window, parts, holders, notes)
        return Usage(parts, holders, "raw counters (--no-rollups)", 0, window.seconds,
                     notes=tuple(notes))
    hours = choose_hours(client, window.start_unix, window.end_unix)
    covered = hours.covered()
    gaps = _gaps(window.start_unix, window.end_unix, covered)
    if not covered or len(gaps) > MAX_RAW_PIECES:
        parts, holders = prometheus_parts(client, window, by_holder, notes)
        parts, holders = check_window(client, window, parts, holders, notes)
        why = "" if not covered else f" (the roll-ups have more than {MAX_RAW_PIECES} holes)"
        return Usage(parts, holders, f"raw counters{why}", 0, window.seconds, notes=tuple(notes))
    tz = window.start.tzinfo
    parts: list[Part] = []
    holders: list[Part] | None = [] if by_holder else None
    lo, hi = covered[0][0], covered[-1][1]
    rolled, rolled_holders = _rollup_parts(client, hours, lo, hi, by_holder)
    parts.extend(rolled)
    if holders is not None and rolled_holders is not None:
        holders.extend(rolled_holders)
    for a, b in gaps:
        raw, raw_holders = prometheus_parts(client, _window(a, b, tz), by_holder, notes)
        parts.extend(raw)
        if holders is not None and raw_holders is not None:
            holders.extend(raw_holders)
    parts, holders = check_window(client, window, parts, holders, notes)
    rollup_s = sum(b - a for a, b in covered)
    raw_s = sum(b - a for a, b in gaps)
    detail = (f"hourly roll-ups for {rollup_s / 3600:g} h ({_iso(lo)} to {_iso(hi)})"
              + (f", raw counters for {raw_s} s" if raw_s else ""))
    return Usage(parts, holders, detail, rollup_s, raw_s,
                 notes=tuple(hours_notes(hours) + notes))


def _rollup_parts(client: PrometheusClient, hours: Hours, lo: int, hi: int,
                  by_holder: bool) -> tuple[list[Part], list[Part] | None]:
    """Parts per device summed over the chosen roll-ups in ``(lo, hi]``, one per hour (gaps in
    them are the raw pieces' business: nothing is rolled up there)."""
    at, rng = hi, f"{max(hi - lo, 1)}s"
    values: dict[str, dict[tuple[str, ...], float]] = {}
    for name, metric in ROLLUPS.items():
        values[name] = {k: max(0.0, v) for k, v in hourly_values(
            client, metric, DEVICE_LABELS, hours, lo, hi).items()}
    pair = ("uuid", "instance")
    mem_avg = hourly_values(client, MEMORY_AVG, pair, hours, lo, hi, mean=True)
    # a maximum is not inflated by copies
    mem_max = query_series(client, f"max by (uuid, instance) (max_over_time({MEMORY_MAX}[{rng}]))",
                      at, pair)
    counts = hourly_values(client, DEVICE_SAMPLES, DEVICE_LABELS, hours, lo, hi)
    labels: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
    for sample in client.query(f"last_over_time({GROUP_INFO_ROLLUP}[{rng}])", at):
        metric = sample.get("metric", {})
        group_labels = tuple(sorted((k, v) for k, v in metric.items() if k not in _NOT_LABELS))
        labels[(metric.get("instance", ""), metric.get("resource_group", ""))] = group_labels
        labels.setdefault(("", metric.get("resource_group", "")), group_labels)
    if not labels:  # roll-ups older than the group-info roll-up: the raw info, if still there
        for sample in client.query(f"last_over_time({GROUP_INFO}[{rng}])", at):
            metric = sample.get("metric", {})
            group_labels = tuple(sorted((k, v) for k, v in metric.items()
                                        if k not in _NOT_LABELS))
            labels.setdefault((metric.get("instance", ""), metric.get("resource_group", "")),
                              group_labels)
            labels.setdefault(("", metric.get("resource_group", "")), group_labels)
    keys = set(values["observed"]) | set(counts)
    methods = promactivity.sources(client, at, rng)
    waited, waits = promactivity.split_reasons(hourly_values(
        client, promactivity.ROLLUP_HOLDER_WAITING, HOLDER_KEYS + ("reason",), hours, lo, hi))
    parts: list[Part] = []
    for key in sorted(keys):
        uuid, instance, group, vendor, model = key
        observed = values["observed"].get(key, 0.0)
        busy, energy = values["busy"].get(key), values["energy"].get(key)
        allocated, idle = values["allocated"].get(key), values["idle"].get(key)
        billed, idle_billed = values["billed"].get(key), values["idle_billed"].get(key)
        if idle is not None and allocated is not None:
            idle = min(idle, allocated)
        if idle_billed is not None and billed is not None:
            idle_billed = min(idle_billed, billed)
        mem = mem_avg.get((uuid, instance))
        parts.append(Part(
            resource_group=group, labels=labels.get((instance, group), labels.get(("", group), ())),
            vendor=vendor, model=model, host=instance, device=f"{instance}/{uuid}",
            observed_s=observed, allocated_s=allocated, busy_s=busy,
            busy_observed_s=observed if busy is not None else 0.0,
            energy_j=energy, mem_sum=mem, mem_samples=0 if mem is None else 1,
            mem_peak=mem_max.get((uuid, instance)),
            billed_s=billed if billed is not None or allocated is None else None,
            idle_s=idle, idle_billed_s=idle_billed,
            idle_energy_j=None if idle is None or energy is None or observed <= 0
            else energy * min(1.0, idle / observed)))
        parts[-1] = promactivity.device_activity(
            parts[-1], values["active"].get(key), methods.get((uuid, instance)),
            waits.get((uuid, instance, group)), values["active_allocated"].get(key))
    if not by_holder:
        return parts, None
    return parts, _rollup_holders(client, hours, lo, hi, parts, counts, waited)


def _rollup_holders(client: PrometheusClient, hours: Hours, lo: int, hi: int, parts: list[Part],
                    counts: dict[tuple[str, ...], float],
                    waited: dict[str, dict[tuple[str, ...], float]]) -> list[Part]:
    """As :func:`allsmi.accounting.prometheus.source.holder_parts`, from the roll-ups: the holders'
    hourly allocated and used seconds and joules where the exporters publish per-holder
    counters, the hourly sample counts of each workload elsewhere (each hour once)."""
    from allsmi.accounting.prometheus.holders import add_holder_counts, split_holders
    fair: dict[tuple[str, str, str], dict[tuple[str, ...], dict[str, Any]]] = {}
    for name, metric in HOLDER_ROLLUPS.items():
        add_holder_counts(fair, name, hourly_values(client, metric, HOLDER_KEYS, hours, lo, hi))
    for name, found in waited.items():
        add_holder_counts(fair, name, found)
    dev_keys = ("uuid", "instance", "resource_group")
    held = hourly_values(client, WORKLOAD_SAMPLES, dev_keys + WORKLOAD_KEYS, hours, lo, hi)
    samples: dict[tuple[str, ...], float] = {}
    for key, n in counts.items():
        samples[(key[0], key[1])] = max(samples.get((key[0], key[1]), 0.0), n)
    return split_holders(parts, held, samples, fair)


__all__ = ["HOLDER_ROLLUPS", "MARKER", "ROLLUPS", "Usage", "prometheus_usage"]

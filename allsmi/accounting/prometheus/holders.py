"""The holders' shares of each device's usage in a window, from Prometheus (see
:func:`holder_parts`): what each workload (namespace, pod, job id, user) was given of a device,
and the unattributed rest.

Where the exporters publish per-holder counters (``allsmi_holder_*``) each holder gets what
they counted; elsewhere a device's parts are split among the workloads of
``allsmi_device_workload_info`` by their samples. :mod:`allsmi.accounting.prometheus.rollup` splits the
hourly roll-ups' figures with the same :func:`split_holders`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from allsmi.accounting.prometheus import activity as promactivity
from allsmi.accounting.periods import Window
from allsmi.accounting.prometheus.client import PrometheusClient
from allsmi.accounting.prometheus.series import (DEVICE_INFO, HOLDER_COUNTERS, HOLDER_KEYS, WORKLOAD_INFO,
                                          WORKLOAD_KEYS, query_series)
from allsmi.accounting.report import Part
from allsmi.fairshare import merge_methods


def _fair_shares(client: PrometheusClient, window: Window
                 ) -> dict[tuple[str, str, str], dict[tuple[str, ...], dict[str, Any]]]:
    """Per device (uuid, instance, group), per holder (namespace, pod, job id, user): its
    allocated seconds, used seconds and joules from the per-holder counters, and the methods."""
    rng = f"{max(window.seconds, 1)}s"
    return holder_counts(client, window.end_unix, {
        name: f"increase({metric}[{rng}])" for name, metric in HOLDER_COUNTERS.items()})


def holder_counts(client: PrometheusClient, at: float, queries: dict[str, str]
                  ) -> dict[tuple[str, str, str], dict[tuple[str, ...], dict[str, Any]]]:
    """As :func:`_fair_shares`, from ``queries`` (part -> a PromQL range expression per holder
    series, summed here by :data:`HOLDER_KEYS`): the raw counters' ``increase()`` or the
    hourly roll-ups' ``sum_over_time()``."""
    out: dict[tuple[str, str, str], dict[tuple[str, ...], dict[str, Any]]] = {}
    for name, expr in queries.items():
        # max: copies of a holder's series (another job, a replica's label) count once
        add_holder_counts(out, name, query_series(
            client, f"max by ({', '.join(HOLDER_KEYS)}) ({expr})", at, HOLDER_KEYS))
    return out


def add_holder_counts(out: dict[tuple[str, str, str], dict[tuple[str, ...], dict[str, Any]]],
                      name: str, found: dict[tuple[str, ...], float]) -> None:
    """Add ``found`` (a part's values by :data:`HOLDER_KEYS`) to ``out`` as
    :func:`holder_counts` gives it."""
    for key, value in found.items():
        holder = out.setdefault(key[:3], {}).setdefault(key[3:7], {})
        holder[name] = holder.get(name, 0.0) + max(0.0, value)
        method = {"allocated": "allocation_method", "used": "usage_method"}.get(name)
        if method is not None:
            holder[method] = merge_methods((holder.get(method), key[7]))


def _from_counters(part: Part, holders: dict[tuple[str, ...], dict[str, Any]]) -> list[Part]:
    """The holders' parts of ``part`` from the per-holder counters (each counter scaled down
    to the device's where ``increase()`` extrapolated the holders' series past it)."""
    def scale(name: str, whole: float | None) -> float:
        total = sum(h.get(name, 0.0) for h in holders.values())
        return whole / total if whole is not None and total > whole and total > 0 else 1.0

    k_alloc = scale("allocated", part.allocated_s)
    k_used, k_energy = scale("used", part.busy_s), scale("energy", part.energy_j)
    k_active = scale("active", part.active_s)
    share = part.billed_s / part.allocated_s if part.billed_s is not None \
        and part.allocated_s else None
    used_share = part.used_billed_s / part.busy_s if part.used_billed_s is not None \
        and part.busy_s else share
    given = []
    for (namespace, pod, job, user), h in sorted(holders.items()):
        alloc = h.get("allocated", 0.0) * k_alloc if "allocated" in h else None
        used = h.get("used", 0.0) * k_used if "used" in h and part.busy_s is not None else None
        frac = alloc / part.allocated_s if alloc is not None and part.allocated_s else 0.0
        f = lambda v: None if v is None else v * frac  # noqa: E731
        given.append(replace(
            part, namespace=namespace or None, pod=pod or None, job=job or None,
            user=user or None, observed_s=part.observed_s * frac,
            busy_observed_s=part.busy_observed_s * frac, busy_s=used,
            energy_j=h["energy"] * k_energy if "energy" in h and part.energy_j is not None
            else None, mem_sum=None, mem_samples=0, mem_peak=None, allocated_s=alloc,
            billed_s=None if alloc is None or share is None else alloc * share,
            used_billed_s=None if used is None or used_share is None else used * used_share,
            idle_s=f(part.idle_s), idle_billed_s=f(part.idle_billed_s),
            idle_energy_j=f(part.idle_energy_j), allocation_method=h.get("allocation_method"),
            usage_method=h.get("usage_method"),
            **promactivity.holder_activity(part, h, k_active, alloc)))
    return promactivity.allocated_active(part, given)


def holder_parts(client: PrometheusClient, window: Window, parts: list[Part],
                 waited: dict[str, dict[tuple[str, ...], float]] | None = None) -> list[Part]:
    """The holders' shares of each device part, plus what no holder was given.

    Where the exporter publishes per-holder counters (``allsmi_holder_*``, exporters with fair
    shares), each holder gets what they counted: allocated time by declared share, used time
    and energy by measured activity (``docs/accounting.md``), with their methods; its idle time
    and idle energy in proportion to its allocated time. Otherwise each workload of ``allsmi_device_workload_info`` (per namespace, pod and job id) gets a
    device's allocated, billed, idle and active time (and idle energy) in proportion to the samples in
    which it held the device among all its workloads' samples, and its observed and used time
    and energy in proportion to its samples among the device's samples in the window (the rest:
    time no workload held it). Users are known where the exporters publish them (``user`` of
    both, from ``allsmi serve --processes``); elsewhere a holder's user is empty.
    """
    at, rng = window.end_unix, f"{max(window.seconds, 1)}s"
    fair = _fair_shares(client, window)
    for name, found in (waited or {}).items():
        add_holder_counts(fair, name, found)
    dev_keys = ("uuid", "instance", "resource_group")
    held = query_series(client, f"sum by ({', '.join(dev_keys + WORKLOAD_KEYS)}) "
                           f"(count_over_time({WORKLOAD_INFO}[{rng}]))", at, dev_keys + WORKLOAD_KEYS)
    samples = query_series(client, f"max by (uuid, instance) (count_over_time({DEVICE_INFO}[{rng}]))",
                      at, ("uuid", "instance"))
    return split_holders(parts, held, samples, fair)


def split_holders(parts: list[Part], held: dict[tuple[str, ...], float],
                  samples: dict[tuple[str, str], float],
                  fair: dict[tuple[str, str, str], dict[tuple[str, ...], dict[str, Any]]]
                  | None = None) -> list[Part]:
    """Each device part split among its holders: as the per-holder counters counted it where
    ``fair`` has the device (:func:`_fair_shares`), else among its workloads by ``held``
    (samples per uuid, instance, resource group and workload keys) out of ``samples`` (the
    device's samples)."""
    fair = fair or {}
    per_device: dict[tuple[str, ...], list[tuple[tuple[str, ...], float]]] = {}
    for key, count in held.items():
        if count > 0:
            per_device.setdefault(key[:3], []).append((key[3:], count))
    out: list[Part] = []
    for part in parts:
        instance, uuid = part.device.split("/", 1)
        counted = fair.get((uuid, instance, part.resource_group))
        if counted:
            given = _from_counters(part, counted)
            out.extend(given)
            out.append(_rest(part, given))
            continue
        works = sorted(per_device.get((uuid, instance, part.resource_group), []))
        total = sum(n for _, n in works)
        seen = max(total, samples.get((uuid, instance), 0.0))
        given: list[Part] = []
        for (namespace, pod, job, user), count in works:
            held_f, seen_f = count / total, count / seen
            f = lambda v, k=held_f: None if v is None else v * k  # noqa: E731
            g = lambda v, k=seen_f: None if v is None else v * k  # noqa: E731
            given.append(replace(
                part, namespace=namespace or None, pod=pod or None, job=job or None,
                user=user or None, observed_s=part.observed_s * seen_f, busy_s=g(part.busy_s),
                busy_observed_s=part.busy_observed_s * seen_f, energy_j=g(part.energy_j),
                mem_sum=None, mem_samples=0, mem_peak=None,
                allocated_s=f(part.allocated_s), billed_s=f(part.billed_s), idle_s=f(part.idle_s),
                idle_billed_s=f(part.idle_billed_s), idle_energy_j=f(part.idle_energy_j),
                active_s=f(part.active_s), active_allocated_s=f(part.active_allocated_s),
                waiting_s=None))
        out.extend(given)
        out.append(_rest(part, given))
    return out


#: What is left of a part once its holders' shares are taken, below which it is rounding (a
#: fraction of the whole): a device held all along leaves exactly nothing to the rest, so that
#: its unknown idle time (a held MIG slice's) makes no unattributed row unknown. Sums of hourly
#: roll-ups and one increase() over the window differ in the last bits.
REST_ROUNDING = 1e-9


def _rest(part: Part, given: list[Part]) -> Part:
    """``part`` less what ``given`` holds (never negative; rounding residue is 0): the
    unattributed share."""
    def left(name: str) -> float | None:
        whole = getattr(part, name)
        if whole is None:
            return None
        rest = whole - sum(getattr(p, name) or 0.0 for p in given)
        return rest if rest > REST_ROUNDING * max(1.0, abs(whole)) else 0.0
    names = ("observed_s", "allocated_s", "busy_s", "busy_observed_s", "energy_j", "billed_s",
             "idle_s", "idle_billed_s", "idle_energy_j", "used_billed_s", "active_s",
             "active_allocated_s")
    return replace(part, mem_sum=None, mem_samples=0, mem_peak=None, allocation_method=None,
                   usage_method=None, waiting_s=None,
                   **{n: left(n) for n in names})  # type: ignore[arg-type]

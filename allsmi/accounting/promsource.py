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

from collections import defaultdict
from dataclasses import replace
from typing import Any

from allsmi.accounting import promactivity
from allsmi.accounting.periods import Window
from allsmi.accounting.promclient import (MAX_RESPONSE_BYTES, MAX_SECRET_BYTES, Credentials,
                                          PrometheusClient, PrometheusError, access_settings,
                                          read_secret, redact_url, split_url)
from allsmi.accounting.promhours import sample_value
from allsmi.accounting.report import Part
from allsmi.fairshare import merge_methods

__all__ = ["COUNTERS", "Credentials", "MAX_RESPONSE_BYTES", "MAX_SECRET_BYTES", "PrometheusClient",
           "PrometheusError", "access_settings", "add_holder_counts", "check_window",
           "holder_counts", "holder_parts", "prometheus_parts", "read_secret", "redact_url",
           "split_holders", "split_url"]

COUNTERS = {
    "observed": "allsmi_device_observed_seconds_total",
    "allocated": "allsmi_device_allocated_seconds_total",
    "busy": "allsmi_device_busy_seconds_total",
    "energy": "allsmi_device_energy_joules_total",
    "idle": "allsmi_device_idle_allocated_seconds_total",
    "active": "allsmi_device_active_seconds_total",
    "active_allocated": "allsmi_device_active_allocated_seconds_total",
}
DEVICE_LABELS = ("uuid", "instance", "resource_group", "vendor", "model")
GROUP_INFO = "allsmi_resource_group_info"
DEVICE_INFO = "allsmi_device_info"
MEMORY = "allsmi_device_memory_used_bytes"
SHARE = "allsmi_device_partition_share_ratio"
WORKLOAD_INFO = "allsmi_device_workload_info"
#: What identifies a holder in ``allsmi_device_workload_info`` (besides the device).
WORKLOAD_KEYS = ("namespace", "pod", "job_id", "user")
_NOT_LABELS = {"__name__", "instance", "job", "resource_group"}
#: A device's counters may run past the window by this fraction (``increase()`` extrapolates
#: toward the window's edges, and counters move once a collection): such time is the window's.
#: Beyond it the answer is impossible (duplicate series, a broken store) and fails the export.
WINDOW_SLACK = 0.02
#: ... and by this many seconds whatever the window's length: ``increase()`` extrapolates a
#: counter that moves once a collection (up to a minute apart) toward both edges, which over a
#: short window (a few scrapes) is far more than 2 % of it. Time within the allowance is cut to
#: the window, so it never bills more than the window either way.
WINDOW_EDGE_SECONDS = 120.0
#: The most power one device can draw, for the bound on its energy in a window: 100 kW, about
#: fifty times today's largest accelerator boards.
MAX_DEVICE_WATTS = 100_000.0
#: The time fields of a part, each bounded by the window.
TIME_FIELDS = ("observed_s", "allocated_s", "busy_s", "busy_observed_s", "billed_s", "idle_s",
               "idle_billed_s", "used_billed_s")


def device_key(metric: dict[str, str]) -> tuple[str, ...]:
    """A device's identity in a query result: its :data:`DEVICE_LABELS` values, in order."""
    return tuple(metric.get(k, "") for k in DEVICE_LABELS)


def query_series(client: PrometheusClient, promql: str, at: float,
                 keys: tuple[str, ...],
                 notes: list[str] | None = None) -> dict[tuple[str, ...], float]:
    """``promql`` evaluated at ``at``: each series' value under its ``keys`` labels. A value
    that is not a finite number fails (:class:`PrometheusError` naming the series); two series
    under the same labels (an answer no store gives for a ``by`` aggregation: a proxy merging
    replicas) count once, the larger, and are noted in ``notes``."""
    out: dict[tuple[str, ...], float] = {}
    for sample in client.query(promql, at):
        metric = sample.get("metric") or {}
        raw = sample.get("value")
        if not isinstance(raw, (list, tuple)) or len(raw) != 2:
            raise PrometheusError(f"{client.url}: the answer to {promql!r} holds a malformed "
                                  f"sample {str(raw)[:60]!r}")
        value = sample_value(raw[1], metric, promql, client.url)
        key = tuple(metric.get(k, "") for k in keys)
        if key in out:
            if notes is not None:
                who = ",".join(f"{k}={v}" for k, v in zip(keys, key) if v)
                note = (f"the answer to {promql[:120]!r} holds {{{who}}} more than once "
                        "(replicas without deduplication?): counted once, the larger")
                if note not in notes:
                    notes.append(note)
            value = max(value, out[key])
        out[key] = value
    return out


def _duplicates(client: PrometheusClient, at: float, rng: str, notes: list[str]) -> None:
    """Note each device whose observed-time counter comes in more than one series (an HA pair
    of Prometheus servers queried without deduplication, two scrape jobs of one exporter): the
    counters are read once per device (``max by`` its identity) whatever the copies."""
    ident = ", ".join(DEVICE_LABELS + ("index",))
    found = client.query(f"count by ({ident}) (last_over_time({COUNTERS['observed']}[{rng}])) > 1",
                         at)
    if found:
        named = ", ".join(f"uuid={m.get('uuid', '')} instance={m.get('instance', '')}"
                          for m in (s.get("metric") or {} for s in found[:5]))
        notes.append(f"{len(found)} device(s) have their counters in more than one series (an HA "
                     f"pair without deduplication, or two scrape jobs of one exporter): {named}"
                     f"{' and more' if len(found) > 5 else ''}: each counted once")


def prometheus_parts(client: PrometheusClient, window: Window, by_holder: bool = False,
                     notes: list[str] | None = None) -> tuple[list[Part], list[Part] | None]:
    """One part per device series seen in the window (hosts named by ``instance``), and with
    ``by_holder`` the workloads' shares of them (see :func:`holder_parts`). Copies of a
    device's series (differing only in ``job`` or a replica's label) count once; ``notes``
    gets what was found."""
    notes = [] if notes is None else notes
    at, rng = window.end_unix, f"{max(window.seconds, 1)}s"
    by = ", ".join(DEVICE_LABELS)
    ident = ", ".join(DEVICE_LABELS + ("index",))
    _duplicates(client, at, rng, notes)
    values: dict[str, dict[tuple[str, ...], float]] = {}
    for name, metric in COUNTERS.items():
        values[name] = {k: max(0.0, v) for k, v in query_series(
            client, f"sum by ({by}) (max by ({ident}) (increase({metric}[{rng}])))", at,
            DEVICE_LABELS, notes).items()}
    pair = ("uuid", "instance")
    mem_avg = query_series(client, f"max by (uuid, instance) (avg_over_time({MEMORY}[{rng}]))", at, pair)
    mem_max = query_series(client, f"max by (uuid, instance) (max_over_time({MEMORY}[{rng}]))", at, pair)
    # Partitions and their parents: billed at their share (the average over the window).
    shares = query_series(client, f"max by (uuid, instance) (avg_over_time({SHARE}[{rng}]))", at, pair)
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
        keys.add(device_key(sample.get("metric", {})))
    methods = promactivity.sources(client, at, rng)
    waited, waits = promactivity.split_reasons(query_series(
        client, f"max by ({', '.join(HOLDER_KEYS)}, reason) "
        f"(increase({promactivity.HOLDER_WAITING}[{rng}]))", at, HOLDER_KEYS + ("reason",)))
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
            idle_s=idle, idle_billed_s=scale(idle), used_billed_s=scale(busy),
            # The energy of idle time: the device's energy in proportion to its idle time.
            idle_energy_j=None if idle is None or energy is None or observed <= 0
            else energy * min(1.0, idle / observed)))
        parts[-1] = promactivity.device_activity(
            parts[-1], values["active"].get(key), methods.get((uuid, instance)),
            waits.get((uuid, instance, group)), values["active_allocated"].get(key))
    if not by_holder:
        return parts, None
    return parts, holder_parts(client, window, parts, waited)


#: The exporter's per-holder counters (allsmi.exporter.holders): part -> metric.
HOLDER_COUNTERS = {"allocated": "allsmi_holder_allocated_seconds_total",
                   "used": "allsmi_holder_used_seconds_total",
                   "energy": "allsmi_holder_energy_joules_total",
                   "active": "allsmi_holder_active_seconds_total"}
HOLDER_KEYS = ("uuid", "instance", "resource_group", "namespace", "pod", "job_id", "user", "method")


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


def check_window(client: PrometheusClient, window: Window, parts: list[Part],
                 holders: list[Part] | None) -> tuple[list[Part], list[Part] | None]:
    """``parts`` (and ``holders``) with no device billed more than the window: a device's time
    over the window by up to :data:`WINDOW_SLACK` of it plus :data:`WINDOW_EDGE_SECONDS`
    (extrapolation) is cut to the window, each
    holder's in proportion; more, or energy above :data:`MAX_DEVICE_WATTS` over the window, is
    an impossible answer and fails naming the device."""
    seconds = max(window.seconds, 1)
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for part in parts:
        for name in TIME_FIELDS + ("energy_j",):
            value = getattr(part, name)
            if value is not None:
                totals[part.device][name] += value
    factors: dict[str, dict[str, float]] = {}
    for device, sums in totals.items():
        energy = sums.get("energy_j", 0.0)
        if energy > seconds * MAX_DEVICE_WATTS:
            raise PrometheusError(
                f"{client.url}: impossible answer: device {device} used {energy:.6g} J in a "
                f"window of {seconds} s, more than {MAX_DEVICE_WATTS:g} W: not billed")
        for name in TIME_FIELDS:
            total = sums.get(name, 0.0)
            if total > seconds * (1 + WINDOW_SLACK) + WINDOW_EDGE_SECONDS:
                raise PrometheusError(
                    f"{client.url}: impossible answer: device {device} has {total:.6g} s of "
                    f"{name.removesuffix('_s').replace('_', ' ')} time in a window of {seconds} s "
                    "(duplicate series, or a store answering wrongly?): not billed")
            if total > seconds:
                factors.setdefault(device, {})[name] = seconds / total
    if not factors:
        return parts, holders

    def cut(part: Part) -> Part:
        f = factors.get(part.device)
        if not f:
            return part
        changes = {n: getattr(part, n) * k for n, k in f.items() if getattr(part, n) is not None}
        if "allocated_s" in f:  # the active and classified time lie within the allocated
            changes.update(promactivity.scaled(part, f["allocated_s"]))
        return replace(part, **changes)
    return [cut(p) for p in parts], None if holders is None else [cut(h) for h in holders]

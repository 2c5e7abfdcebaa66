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

The series' names and the reading of one answer are in :mod:`allsmi.accounting.prometheus.series`;
the holders' shares of each device in :mod:`allsmi.accounting.prometheus.holders`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from allsmi.accounting.prometheus import activity as promactivity
from allsmi.accounting.periods import Window
from allsmi.accounting.prometheus.client import (MAX_RESPONSE_BYTES, MAX_SECRET_BYTES, Credentials,
                                          PrometheusClient, PrometheusError, access_settings,
                                          read_secret, redact_url, split_url)
from allsmi.accounting.prometheus.holders import (add_holder_counts, holder_counts, holder_parts,
                                           split_holders)
from allsmi.accounting.prometheus.series import (COUNTERS, DEVICE_INFO, DEVICE_LABELS, GROUP_INFO,
                                          HOLDER_KEYS, MEMORY, SHARE, device_key, query_series)
from allsmi.accounting.report import Part

__all__ = ["COUNTERS", "Credentials", "MAX_RESPONSE_BYTES", "MAX_SECRET_BYTES", "PrometheusClient",
           "PrometheusError", "access_settings", "add_holder_counts", "check_window",
           "holder_counts", "holder_parts", "prometheus_parts", "read_secret", "redact_url",
           "split_holders", "split_url"]

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
#: When the exporter started counting a device (the ``_created`` series of its observed-time
#: counter, which Prometheus and VictoriaMetrics store as a series of its own): the same value
#: under two ``instance`` labels is one exporter's counter scraped twice.
CREATED = COUNTERS["observed"].removesuffix("_total") + "_created"
#: Billed time is allocated time at a share of at most 1: above it by more than rounding (a
#: fraction, and seconds) is an impossible answer (a roll-up from a share above 1).
BILLED_ROUNDING = 1e-6
#: The time fields of a part, each bounded by the window.
TIME_FIELDS = ("observed_s", "allocated_s", "busy_s", "busy_observed_s", "billed_s", "idle_s",
               "idle_billed_s", "used_billed_s")


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
    shares = query_series(client, f"max by (uuid, instance) (avg_over_time({SHARE}[{rng}]))", at, pair,
                          bounds=(0.0, 1.0), what="a partition's share of its device")
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


def _scraped_twice(client: PrometheusClient, window: Window, parts: list[Part],
                   notes: list[str]) -> set[str]:
    """The devices (``instance/uuid``) that are another ``instance`` label's copy of one
    exporter's device: the same uuid and the same ``_created`` (:data:`CREATED`) under two
    instances (one exporter scraped by two jobs under different addresses, a pod IP and a node
    name) whose observed time together exceeds the window. The copy with the most observed
    time is kept. Devices of different hosts that share an id (a bus id where the vendor gives
    no uuid) started counting at different moments and are not copies; neither is a device
    whose instance label changed within the window (their times add up to at most the
    window)."""
    seconds = max(window.seconds, 1)
    created = query_series(client, f"max by (uuid, instance) (last_over_time({CREATED}"
                           f"[{seconds}s]))", window.end_unix, ("uuid", "instance"))
    same: dict[tuple[str, float], list[str]] = defaultdict(list)
    for (uuid, instance), value in created.items():
        same[(uuid, value)].append(f"{instance}/{uuid}")
    observed: dict[str, float] = defaultdict(float)
    for part in parts:
        observed[part.device] += part.observed_s or 0.0
    drop: set[str] = set()
    for devices in same.values():
        devices = sorted(d for d in devices if d in observed)
        if len(devices) < 2 or \
                sum(observed[d] for d in devices) <= seconds * (1 + WINDOW_SLACK) + WINDOW_EDGE_SECONDS:
            continue
        keep = max(devices, key=lambda d: observed[d])
        drop.update(d for d in devices if d != keep)
        notes.append(f"device {keep} is also scraped as {', '.join(d for d in devices if d != keep)} "
                     "(one exporter under more than one instance label: two scrape jobs?): "
                     f"counted once, as {keep}")
    return drop


def check_window(client: PrometheusClient, window: Window, parts: list[Part],
                 holders: list[Part] | None,
                 notes: list[str] | None = None) -> tuple[list[Part], list[Part] | None]:
    """``parts`` (and ``holders``) with no device billed more than the window: one exporter's
    device under several instance labels counted once (:func:`_scraped_twice`, said in
    ``notes``); a device's time over the window by up to :data:`WINDOW_SLACK` of it plus
    :data:`WINDOW_EDGE_SECONDS` (extrapolation) is cut to the window, each
    holder's in proportion; more, or energy above :data:`MAX_DEVICE_WATTS` over the window, is
    an impossible answer and fails naming the device."""
    seconds = max(window.seconds, 1)
    copies = _scraped_twice(client, window, parts, [] if notes is None else notes) if parts \
        else set()
    if copies:
        parts = [p for p in parts if p.device not in copies]
        holders = None if holders is None else [h for h in holders if h.device not in copies]
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for part in parts:
        for name in TIME_FIELDS + ("energy_j",):
            value = getattr(part, name)
            if value is not None:
                totals[part.device][name] += value
    factors: dict[str, dict[str, float]] = {}
    for device, sums in totals.items():
        billed, allocated = sums.get("billed_s", 0.0), sums.get("allocated_s", 0.0)
        if billed < 0 or billed > allocated * (1 + BILLED_ROUNDING) + BILLED_ROUNDING:
            raise PrometheusError(
                f"{client.url}: impossible answer: device {device} has {billed:.6g} s of billed "
                f"time for {allocated:.6g} s allocated (billed time is the allocated time at a "
                "partition share between 0 and 1): not billed")
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

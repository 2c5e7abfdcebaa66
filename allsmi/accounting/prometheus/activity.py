"""Activity and waiting reasons from Prometheus: what the exporters' activity counters give a bill.

The exporter publishes ``allsmi_device_active_seconds_total`` (allocated time weighted by compute
activity), ``allsmi_holder_active_seconds_total`` and ``allsmi_holder_waiting_seconds_total{reason}``
(each holder's allocated time by what it was doing), and the gauge
``allsmi_device_compute_active_ratio{source}`` naming what the activity measures. The hourly
roll-ups of ``deploy/prometheus/allsmi-rules.yml`` keep the same per hour. This module turns them
into the activity fields of :class:`~allsmi.accounting.report.Part` (``active_s``,
``active_allocated_s``, ``activity_method``, ``waiting_s``), as the ledger gives them: a device's
waiting seconds are the sum of its holders'.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from allsmi.accounting.report import Part
from allsmi.fairshare import merge_methods
from allsmi.schema import WAITING_REASONS

DEVICE_ACTIVE = "allsmi_device_active_seconds_total"
HOLDER_ACTIVE = "allsmi_holder_active_seconds_total"
HOLDER_WAITING = "allsmi_holder_waiting_seconds_total"
SOURCE_GAUGE = "allsmi_device_compute_active_ratio"
ROLLUP_DEVICE_ACTIVE = "instance_uuid:allsmi_device_active_seconds:increase1h"
ROLLUP_HOLDER_ACTIVE = "instance_uuid_holder:allsmi_holder_active_seconds:increase1h"
ROLLUP_HOLDER_WAITING = "instance_uuid_holder_reason:allsmi_holder_waiting_seconds:increase1h"
#: The holder-count names of the waiting reasons (see source.add_holder_counts).
WAIT_NAMES: tuple[str, ...] = tuple(f"wait_{reason}" for reason in WAITING_REASONS)

Waits = dict[tuple[str, str, str], list[float]]
"""Per device (uuid, instance, resource group): allocated seconds per waiting reason."""


def sources(client: Any, at: float, rng: str) -> dict[tuple[str, str], str]:
    """Per device (uuid, instance): what its activity measured in the window (``mixed`` when it
    changed)."""
    out: dict[tuple[str, str], str] = {}
    for sample in client.query(f"max by (uuid, instance, source) "
                               f"(last_over_time({SOURCE_GAUGE}[{rng}]))", at):
        metric = sample.get("metric", {})
        key = (metric.get("uuid", ""), metric.get("instance", ""))
        source = metric.get("source") or None
        if source and source != "unknown":
            out[key] = merge_methods((out.get(key), source)) or source
    return out


def split_reasons(found: dict[tuple[str, ...], float]
                  ) -> tuple[dict[str, dict[tuple[str, ...], float]], Waits]:
    """Holder waiting seconds keyed by the holder keys and a last ``reason``: per reason name
    (``wait_<reason>``) the values by holder keys, and the sums per device."""
    by_name: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in WAIT_NAMES}
    devices: Waits = {}
    index = {reason: i for i, reason in enumerate(WAITING_REASONS)}
    for key, value in found.items():
        *holder, reason = key
        i = index.get(reason)
        if i is None or not value > 0:
            continue
        by_name[WAIT_NAMES[i]][tuple(holder)] = value
        waits = devices.setdefault((holder[0], holder[1], holder[2]), [0.0] * len(WAIT_NAMES))
        waits[i] += value
    return by_name, devices


def within(waits: Sequence[float] | None, allocated: float | None) -> tuple[float, ...] | None:
    """Seconds per waiting reason, scaled down where their sum is above the ``allocated``
    seconds (``increase()`` extrapolates each counter on its own): never more time classified
    than was allocated."""
    if waits is None:
        return None
    total = sum(waits)
    k = allocated / total if allocated is not None and total > allocated and total > 0 else 1.0
    return tuple(w * k for w in waits)


def scaled(part: Part, k: float) -> dict[str, Any]:
    """The activity fields of ``part`` scaled by ``k`` (its allocated time cut to a window),
    for :func:`dataclasses.replace`."""
    f = lambda v: None if v is None else v * k  # noqa: E731
    return {"active_s": f(part.active_s), "active_allocated_s": f(part.active_allocated_s),
            "waiting_s": None if part.waiting_s is None else tuple(w * k for w in part.waiting_s)}


def device_activity(part: Part, active: float | None, method: str | None,
                    waits: list[float] | None, active_allocated: float | None = None) -> Part:
    """``part`` with its activity: active seconds (never above the allocated ones), the
    allocated seconds they cover (``allsmi_device_active_allocated_seconds_total``: the time
    whose activity was known; from an exporter without it, all of the allocated time), the
    method, and its holders' seconds per waiting reason (their sum never above the allocated
    seconds)."""
    covered = part.allocated_s
    if active_allocated is not None and covered is not None:
        covered = min(active_allocated, covered)  # increase() extrapolates each on its own
    if active is not None and covered is not None:
        active = min(active, covered)
    return replace(part, active_s=active,
                   active_allocated_s=None if active is None else covered,
                   activity_method=method if active is not None else None,
                   waiting_s=within(waits, part.allocated_s))


def holder_activity(part: Part, counts: dict[str, Any], k_active: float,
                    allocated: float | None) -> dict[str, Any]:
    """The activity fields of one holder's share of ``part`` from its counts (``active`` and
    the ``wait_<reason>`` names), for :func:`dataclasses.replace`; its active time as the
    exporter counted it, which :func:`allocated_active` then makes the holder's part of the
    device's by allocation."""
    active = counts["active"] * k_active if "active" in counts and part.active_s is not None \
        else None
    waits = None
    if any(name in counts for name in WAIT_NAMES):
        waits = within([counts.get(name, 0.0) for name in WAIT_NAMES], allocated)
    return {"active_s": active,
            "active_allocated_s": None if active is None else allocated,
            "activity_method": part.activity_method if active is not None else None,
            "waiting_s": waits}


def allocated_active(part: Part, given: list[Part]) -> list[Part]:
    """The holders ``given`` of ``part`` with their active time as the ledger books it: each
    holder's allocated time x the device's compute activity over it.

    The exporters' ``allsmi_holder_active_seconds_total`` splits a device's active time like
    allocated time, which is this; exporters before that split it like busy time (by the
    holders' own processes' activity): exactly this wherever one holder held the device at a
    time. Where a holder's counter exceeds its allocated time (holders shared
    the device at once, or one was declared a part of it), or leaves more to the time no holder
    was given than that time, the device's active time is split in proportion to allocated
    time instead (exact for holders that shared it alike all along)."""
    if part.active_s is None:
        return given
    allocated = [h.allocated_s or 0.0 for h in given]
    counted = [h.active_s for h in given]
    unallocated = max(0.0, (part.allocated_s or 0.0) - sum(allocated))
    slack = 1e-6 * max(1.0, part.active_s)
    if None in counted and any(allocated) \
            or any((c or 0.0) > a + slack for c, a in zip(counted, allocated)) \
            or part.active_s - sum(c or 0.0 for c in counted) > unallocated + slack:
        k = part.active_s / part.allocated_s if part.allocated_s else 0.0
        active = [a * k for a in allocated]
    else:
        active = [min(c or 0.0, a) for c, a in zip(counted, allocated)]
    # the part of each holder's allocated time whose activity was known: the device's
    known = 1.0 if not part.allocated_s or part.active_allocated_s is None \
        else min(1.0, part.active_allocated_s / part.allocated_s)
    return [replace(h, active_s=x, active_allocated_s=h.allocated_s * known,
                    activity_method=part.activity_method) if h.allocated_s is not None
            else replace(h, active_s=None, active_allocated_s=None, activity_method=None)
            for h, x in zip(given, active)]

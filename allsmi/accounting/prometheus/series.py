"""The exporter's series as the fleet path asks Prometheus for them: the names of the
accounting counters and info series, the labels that identify a device and a holder, and one
query's answer by those labels (:func:`query_series`).

:mod:`allsmi.accounting.prometheus.source` (each device's parts of a window),
:mod:`allsmi.accounting.prometheus.holders` (their holders' shares), :mod:`allsmi.accounting.prometheus.rollup`
and :mod:`allsmi.accounting.prometheus.conflicts` read them.
"""

from __future__ import annotations

from allsmi.accounting.prometheus.client import PrometheusClient, PrometheusError
from allsmi.accounting.prometheus.hours import sample_value

#: The accounting counters, by the part of a device each gives.
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
#: The exporter's per-holder counters (allsmi.exporter.holders): part -> metric.
HOLDER_COUNTERS = {"allocated": "allsmi_holder_allocated_seconds_total",
                   "used": "allsmi_holder_used_seconds_total",
                   "energy": "allsmi_holder_energy_joules_total",
                   "active": "allsmi_holder_active_seconds_total"}
#: What the per-holder series are summed by: the device, the holder and how it was counted.
HOLDER_KEYS = ("uuid", "instance", "resource_group", "namespace", "pod", "job_id", "user", "method")


def device_key(metric: dict[str, str]) -> tuple[str, ...]:
    """A device's identity in a query result: its :data:`DEVICE_LABELS` values, in order."""
    return tuple(metric.get(k, "") for k in DEVICE_LABELS)


def query_series(client: PrometheusClient, promql: str, at: float,
                 keys: tuple[str, ...], notes: list[str] | None = None,
                 bounds: tuple[float, float] | None = None,
                 what: str = "") -> dict[tuple[str, ...], float]:
    """``promql`` evaluated at ``at``: each series' value under its ``keys`` labels. A value
    that is not a finite number fails (:class:`PrometheusError` naming the series); two series
    under the same labels (an answer no store gives for a ``by`` aggregation: a proxy merging
    replicas) count once, the larger, and are noted in ``notes``. A value outside ``bounds``
    (``what`` the series are) fails too."""
    out: dict[tuple[str, ...], float] = {}
    for sample in client.query(promql, at):
        metric = sample.get("metric") or {}
        raw = sample.get("value")
        if not isinstance(raw, (list, tuple)) or len(raw) != 2:
            raise PrometheusError(f"{client.url}: the answer to {promql!r} holds a malformed "
                                  f"sample {str(raw)[:60]!r}")
        value = sample_value(raw[1], metric, promql, client.url, bounds, what)
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

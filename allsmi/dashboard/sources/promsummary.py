"""Fleet totals computed by Prometheus: what the cluster overview shows, without every device.

At a thousand hosts (tens of thousands of devices), fetching every device
series on every refresh means hundreds of megabytes of JSON. The overview
(the hosts table, the group and vendor tables, the summary line) needs only
totals, so Prometheus computes them: a handful of ``count``/``sum by`` queries
per grouping, each answering one number per host, group or vendor.

The totals follow the same rules as :func:`allsmi.dashboard.state.totals.totals_by`
over devices: a physical device counts once and carries its memory;
partitions are counted apart; utilization is averaged over every device that
reports one; power is summed as reported (only board owners carry it), and power limits only
over the devices that report both, against those devices' power.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from allsmi.snapshot_parse import MAX_INT

from allsmi.dashboard.state.totals import Totals

Query = Callable[[str, float], tuple[float, list[dict[str, Any]]]]

_INFO = "allsmi_device_info"


def _select(metric: str, *matchers: str) -> str:
    """``metric{m1,m2}`` from the non-empty matchers (``metric`` alone when none)."""
    inner = ",".join(m for m in matchers if m)
    return f"{metric}{{{inner}}}" if inner else metric


def summary_queries(by: str, selector: str = "") -> dict[str, str]:
    """:class:`Totals` attribute -> PromQL grouped by the label ``by``; ``selector`` narrows the series."""
    physical = _select(_INFO, 'parent_uuid=""')
    # One series per device: a device in two series (two scrape jobs, HA replicas the store
    # does not deduplicate) counts once, as in the device table (labels beyond these dropped).
    labels = ", ".join(dict.fromkeys(["instance", "uuid", *by.split(", ")]))

    def of(metric: str, *matchers: str, per: str = "") -> str:
        return f"max by ({labels}{per}) ({_select(metric, *matchers, selector)})"

    whole = of(_INFO, 'parent_uuid=""')
    power, limit = of("allsmi_device_power_watts"), of("allsmi_device_power_limit_watts")
    parts = of(_INFO, 'parent_uuid!=""')
    used, total = of("allsmi_device_memory_used_bytes"), of("allsmi_device_memory_total_bytes")
    with_total = f"({total} and on (instance, uuid) {physical})"
    with_used = f"({used} and on (instance, uuid) {physical})"

    queries = {
        "devices": f"count by ({by}) ({whole})",
        "partitions": f"count by ({by}) ({parts})",
        "lost": f"count by ({by}) ({of('allsmi_device_up')} == 0)",
        "utilization_sum": f"sum by ({by}) ({of('allsmi_device_utilization_ratio')}) * 100",
        "utilization_count": f"count by ({by}) ({of('allsmi_device_utilization_ratio')})",
        # like with like: the memory in use and the total of the devices that report both
        "memory_used_bytes": f"sum by ({by}) ({used} and on (instance, uuid) {with_total})",
        "memory_total_bytes": f"sum by ({by}) ({total} and on (instance, uuid) {with_used})",
        "memory_count": f"count by ({by}) ({used} and on (instance, uuid) {with_total})",
        "memory_reported": (f"count by ({by}) (({used} or on (instance, uuid) {total}) "
                            f"and on (instance, uuid) {physical})"),
        "power_watts": f"sum by ({by}) ({power})",
        "power_count": f"count by ({by}) ({power})",
        "power_limited_watts": f"sum by ({by}) ({power} and on (instance, uuid) {limit})",
        "power_limit_watts": f"sum by ({by}) ({limit} and on (instance, uuid) {power})",
        "power_limited_count": f"count by ({by}) ({power} and on (instance, uuid) {limit})",
        "processes": f"count by ({by}) ({of('allsmi_process_memory_bytes', per=', pid')})",
    }
    if "instance" not in by.split(", "):  # which hosts each group or vendor spans (one per pair)
        queries["hosts"] = f"count by ({by}, instance) ({_select(_INFO, selector)})"
    return queries


#: Largest plausible value of a total (counts of devices and processes, sums of readings);
#: everything else at most the snapshot parser's :data:`~allsmi.snapshot_parse.MAX_INT`.
_LARGEST = {"utilization_sum": 100.0 * 2**31, "power_watts": 5000.0 * 2**31,
            "power_limit_watts": 5000.0 * 2**31, **{n: float(2**31) for n in (
                "devices", "partitions", "lost", "utilization_count", "processes", "memory_count",
                "memory_reported")}}

_INTEGERS = {"devices", "partitions", "lost", "utilization_count", "processes",
             "memory_used_bytes", "memory_total_bytes", "memory_count", "memory_reported",
             "power_count", "power_limited_count"}


#: A sum -> what becomes unknown with it: the sum, and the count its mean or share divides by.
_UNKNOWN_WITH: dict[str, tuple[tuple[str, Any], ...]] = {
    "utilization_sum": (("utilization_sum", 0.0), ("utilization_count", 0)),
    **{n: (("memory_used_bytes", None), ("memory_total_bytes", None), ("memory_count", 0))
       for n in ("memory_used_bytes", "memory_total_bytes")},
    "power_watts": (("power_watts", None), ("power_count", 0)),
    **{n: (("power_limited_watts", None), ("power_limit_watts", None), ("power_limited_count", 0))
       for n in ("power_limited_watts", "power_limit_watts")},
}


def combined_query(by: str, selector: str = "") -> str:
    """Every summary of :func:`summary_queries` in one query, each series tagged ``allsmi_total``
    with the attribute it holds: one round trip and one evaluation instead of ten."""
    parts = [f'label_replace({promql}, "allsmi_total", "{name}", "", "")'
             for name, promql in summary_queries(by, selector).items()]
    return " or ".join(parts)


def _number(sample: dict[str, Any]) -> float | None:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


GROUPINGS = ("instance", "resource_group", "vendor")
#: The recording rule that keeps the totals of each grouping precomputed
#: (``level:metric:operations``); shipped in ``deploy/prometheus/allsmi-rules.yml``.
RECORDED = {by: f"{by}:allsmi_devices:totals" for by in GROUPINGS}
#: The finest level, from which the three above are summed: every device series is read once
#: an evaluation (not once per grouping), so the rules cost a third of three live queries.
FINE_BY = "instance, resource_group, vendor"
FINE = "instance_resource_group_vendor:allsmi_devices:totals"


def derived_query(by: str) -> str:
    """The totals by ``by`` summed from the :data:`FINE` level: the same numbers as
    :func:`combined_query` (a count or sum over a partition of the devices, summed again), and
    for groups and vendors the hosts each spans (the instances with a device or a partition)."""
    promql = f"sum by ({by}, allsmi_total) ({FINE})"
    if by != "instance":
        hosts = f'count by ({by}, instance) ({FINE}{{allsmi_total=~"devices|partitions"}})'
        promql += f' or label_replace({hosts}, "allsmi_total", "hosts", "", "")'
    return promql


def recording_rules() -> list[dict[str, str]]:
    """The rules that make the overview cheap at a thousand hosts: the fine level, then one
    per grouping summed from it (Prometheus evaluates a group's rules in order, at one instant)."""
    return [{"record": FINE, "expr": combined_query(FINE_BY)},
            *({"record": RECORDED[by], "expr": derived_query(by)} for by in GROUPINGS)]


def fleet_totals(query: Query, by: str, timeout: float, *, selector: str = "") -> dict[str, Totals]:
    """:class:`Totals` per value of the label ``by`` (``instance``, ``resource_group``, ``vendor``),
    from one query; a failing query raises its PrometheusError."""
    _, series = query(combined_query(by, selector), timeout)
    return totals_from(series, by)


def recorded_totals(query: Query, timeout: float) -> dict[str, dict[str, Totals]]:
    """The totals of every grouping whose recording rule is loaded, in one query."""
    names = "|".join(RECORDED.values())
    _, series = query('{__name__=~"' + names + '"}', timeout)
    out: dict[str, dict[str, Totals]] = {}
    for by, name in RECORDED.items():
        mine = [s for s in series if isinstance(s, dict) and isinstance(s.get("metric"), dict)
                and s["metric"].get("__name__") == name]
        if mine:
            out[by] = totals_from(mine, by)
    return out


def totals_from(series: list[dict[str, Any]], by: str) -> dict[str, Totals]:
    """:class:`Totals` from the answer to :func:`combined_query` (pure; tested on its own)."""
    known = set(summary_queries(by))
    out: dict[str, Totals] = {}
    rejected: set[tuple[str, str]] = set()
    for sample in series:
        if not isinstance(sample, dict) or not isinstance(sample.get("metric"), dict):
            continue
        name = sample["metric"].get("allsmi_total")
        if name in known:
            key = str(sample["metric"].get(by, ""))
            value = _number(sample)
            if value is None or not 0 <= value <= _LARGEST.get(name, MAX_INT):
                rejected.add((key, name))  # not a plausible total: unknown, never a huge or negative number
                continue
            totals = out.setdefault(key, Totals(key))
            if name == "hosts":
                totals.hosts.add(str(sample["metric"].get("instance", "")))
            else:
                setattr(totals, name, int(round(value)) if name in _INTEGERS else value)
    for key, name in rejected:  # a sum that is unknown (a NaN or +Inf reading in it) is no mean
        for field, empty in _UNKNOWN_WITH.get(name, ()) if key in out else ():
            setattr(out[key], field, empty)
    for totals in out.values():  # a mean above 100 % is no reading
        if totals.utilization_count and totals.utilization_sum > 100.0 * totals.utilization_count:
            totals.utilization_sum, totals.utilization_count = 0.0, 0
    if by == "instance":
        for key, totals in out.items():
            totals.hosts = {key}
    return out

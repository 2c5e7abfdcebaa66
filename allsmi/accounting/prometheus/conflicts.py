"""Devices claimed at once by holders of attribution sources that say nothing of each other, as
the store tells it (issue 32, item 9): the fleet path's counterpart of the ledger's
:meth:`~allsmi.accounting.ledger.read.LedgerReader.conflicts`.

Each exporter counts, per device, the collection cycles in which a pod (from the kubelet) and a
job (from the job-mapping directory) held it at once, each billed a part
(``allsmi_device_claim_conflicts_total``). A device whose counter rose in the window is named
in the export's warnings, with the holders its ``allsmi_device_workload_info`` series show in
the window. Both are raw series, read while the store keeps them (the hourly roll-ups do not
carry them).
"""

from __future__ import annotations

from allsmi.accounting.periods import Window
from allsmi.accounting.prometheus.client import PrometheusClient
from allsmi.accounting.prometheus.series import WORKLOAD_INFO, query_series

CONFLICTS = "allsmi_device_claim_conflicts_total"
_DEVICE = ("uuid", "instance")


def _claimant(metric: dict[str, str]) -> str:
    """A holder in words, as the attribution sources' statuses put it."""
    source = metric.get("source", "") or "?"
    if metric.get("pod"):
        return f"{source} pod {metric.get('namespace', '')}/{metric['pod']}"
    if metric.get("job_id"):
        return f"{source} job {metric['job_id']}"
    return f"{source} user {metric.get('user') or '?'}"


def prometheus_conflicts(client: PrometheusClient, window: Window, most: int = 5) -> list[str]:
    """One warning naming the devices (``instance/uuid``, the first ``most``) whose claims
    conflicted in ``window``, in about how many collection cycles, and the holders seen on
    each in the window; empty when none did. Raises ``PrometheusError``."""
    at, rng = window.end_unix, f"{max(window.seconds, 1)}s"
    rose = f"max by (uuid, instance) (increase({CONFLICTS}[{rng}])) > 0"
    cycles = query_series(client, rose, at, _DEVICE)
    if not cycles:
        return []
    holders: dict[tuple[str, ...], set[str]] = {}
    for sample in client.query(
            f"max by (uuid, instance, source, namespace, pod, job_id, user) "
            f"(max_over_time({WORKLOAD_INFO}[{rng}]) and on (uuid, instance) ({rose}))", at):
        metric = sample.get("metric") or {}
        holders.setdefault(tuple(metric.get(k, "") for k in _DEVICE), set()).add(
            _claimant(metric))
    shown = []
    for key in sorted(cycles)[:most]:
        uuid, instance = key
        who = ", ".join(sorted(holders.get(key, ()))) or "holders not in the store"
        shown.append(f"{instance}/{uuid} in about {max(1, round(cycles[key]))} collection "
                     f"cycle(s) (holders seen on it: {who})")
    more = f"; and {len(cycles) - most} more" if len(cycles) > most else ""
    return [f"{len(cycles)} device(s) claimed at once by holders of attribution sources that say "
            f"nothing of each other (a pod and a job file), each billed a part: "
            f"{'; '.join(shown)}{more}"]

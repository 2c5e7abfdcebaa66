"""The scrape job the Prometheus Operator generates from the kit's monitors, for a real Prometheus.

The operator's own target labels come first (namespace, pod, container; service and job from
the Service for a ``ServiceMonitor``, job ``NAMESPACE/NAME`` for a ``PodMonitor``; endpoint),
then the monitor's relabelings, then its scheme, TLS and basic auth with each Secret key read
from a directory per Secret (``secrets[NAME] / KEY``), as the operator mounts them.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import yaml

from ..conftest import require_tool
from ..prometheus_server import free_port, running_server


def _snake(key: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), key)


def endpoint(monitor: dict[str, Any]) -> dict[str, Any]:
    (found,) = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
    return found


def relabelings(monitor: dict[str, Any]) -> list[dict[str, Any]]:
    """The operator's target labels, then the monitor's relabelings, in Prometheus' spelling."""
    first: list[dict[str, Any]] = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"}]
    if monitor["kind"] == "ServiceMonitor":
        first += [{"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
                  {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"}]
    else:
        name = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
        first += [{"target_label": "job", "replacement": name}]
    first += [{"target_label": "endpoint", "replacement": endpoint(monitor)["port"]}]
    return first + [{_snake(k): v for k, v in r.items()} for r in endpoint(monitor).get("relabelings", [])]


_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def seconds(duration: str) -> float:
    """A Prometheus duration (``15s``, ``1m30s``, ``500ms``) in seconds."""
    parts = _DURATION.findall(duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * _SECONDS[u] for n, u in parts)


def timeout_error(ep: dict[str, Any], global_interval: str = "30s") -> str | None:
    """Why the Prometheus Operator rejects the monitor of endpoint ``ep`` for its scrape timeout
    (its ``validateScrapeIntervalAndTimeout``: a ``scrapeTimeout`` above the endpoint's interval,
    or the Prometheus' own where the endpoint has none), or None."""
    if not ep.get("scrapeTimeout"):
        return None
    interval = ep.get("interval") or global_interval
    if seconds(ep["scrapeTimeout"]) > seconds(interval):
        return f"scrapeTimeout {ep['scrapeTimeout']} greater than scrapeInterval {interval}"
    return None


def _secret_file(ref: dict[str, Any], secrets: dict[str, Path]) -> str:
    return str(secrets[ref["name"]] / ref["key"])


def scrape_job(monitor: dict[str, Any], name: str, targets_file: Path,
               secrets: dict[str, Path] | None = None) -> dict[str, Any]:
    """The Prometheus scrape job of ``monitor`` over the file-discovered targets of ``targets_file``."""
    ep = endpoint(monitor)
    job: dict[str, Any] = {"job_name": name, "honor_labels": ep.get("honorLabels", False),
                           "metrics_path": ep.get("path", "/metrics"), "scheme": ep.get("scheme", "http"),
                           "file_sd_configs": [{"files": [str(targets_file)]}],
                           "relabel_configs": relabelings(monitor)}
    if "tlsConfig" in ep:
        tls = ep["tlsConfig"]
        job["tls_config"] = {"ca_file": _secret_file(tls["ca"]["secret"], secrets or {}),
                             "server_name": tls["serverName"]}
    if "basicAuth" in ep:
        auth = ep["basicAuth"]
        job["basic_auth"] = {"username": (secrets or {})[auth["username"]["name"]].joinpath(
            auth["username"]["key"]).read_text().strip(),
            "password_file": _secret_file(auth["password"], secrets or {})}
    return job


def pod_target(address: str, pod: str, daemonset: str, node: str) -> dict[str, Any]:
    """A file_sd target group with the meta labels Kubernetes discovery gives a DaemonSet pod."""
    return {"targets": [address], "labels": {
        "__meta_kubernetes_namespace": "allsmi", "__meta_kubernetes_service_name": "allsmi",
        "__meta_kubernetes_pod_name": pod, "__meta_kubernetes_pod_container_name": "allsmi",
        "__meta_kubernetes_pod_node_name": node, "__meta_kubernetes_pod_controller_kind": "DaemonSet",
        "__meta_kubernetes_pod_controller_name": daemonset}}


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback only
        return json.load(resp)["data"]["result"]


def wait_for(base: str, promql: str, wanted: Any, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Until ``promql`` answers, as sorted ``(job, instance, value)``, ``wanted``."""
    deadline = time.monotonic() + timeout
    while True:
        result = query(base, promql)
        got = sorted((r["metric"].get("job"), r["metric"].get("instance"), r["value"][1]) for r in result)
        if got == wanted:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{promql}: {got}, wanted {wanted}")
        time.sleep(0.2)


@contextlib.contextmanager
def prometheus(workdir: Path, jobs: list[dict[str, Any]]) -> Iterator[str]:
    """A real Prometheus scraping ``jobs`` every second; yields its base URL."""
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(
        {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": jobs}))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [require_tool("prometheus", "prometheus"), f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]
    with running_server(argv, workdir / "prometheus.log", f"{base}/-/ready", "prometheus"):
        yield base

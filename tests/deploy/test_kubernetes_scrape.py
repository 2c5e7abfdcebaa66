"""deploy/kubernetes/: two exporters on one node are two targets, on a real Prometheus.

A node with an AMD and an NVIDIA card runs two allsmi pods. The rendered ``ServiceMonitor``
and ``PodMonitor`` are turned into the scrape job the Prometheus Operator generates from them
(its own target labels first, then the monitor's relabelings, as the operator orders them),
with the two pods as file-discovered targets carrying the Kubernetes meta labels
service discovery gives them. Two real ``allsmi serve`` play the pods; one is killed: its
``up`` is 0 while the other's is 1, and ``AllsmiExporterStale`` (as shipped) fires for it alone
in a promtool test fed with the label sets Prometheus stored.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import require_tool
from ..exporter.server import run_serve
from ..prometheus_server import free_port, running_server
from .kube import one, render
from .support import RULES

pytestmark = [pytest.mark.integration]

NODE = "gpu-node-7"
PODS = {"allsmi-nvidia": "allsmi-nvidia-x7k2p", "allsmi-amd": "allsmi-amd-q9d4m"}


def _snake(key: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), key)


def _relabelings(monitor: dict[str, Any]) -> list[dict[str, Any]]:
    """The operator's target labels, then the monitor's relabelings, in Prometheus' spelling."""
    kind, name = monitor["kind"], monitor["metadata"]["name"]
    first = [{"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
             {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
             {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"}]
    if kind == "ServiceMonitor":
        (endpoint,) = monitor["spec"]["endpoints"]
        first += [{"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
                  {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"}]
    else:
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        first += [{"target_label": "job", "replacement": f"{monitor['metadata']['namespace']}/{name}"}]
    first += [{"target_label": "endpoint", "replacement": endpoint["port"]}]
    own = [{_snake(k): v for k, v in r.items()} for r in endpoint.get("relabelings", [])]
    return first + own, endpoint


def _query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback only
        return json.load(resp)["data"]["result"]


def _wait(base: str, promql: str, wanted: Any, timeout: float = 30.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        result = _query(base, promql)
        got = sorted((r["metric"].get("job"), r["metric"].get("instance"), r["value"][1]) for r in result)
        if got == wanted:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{promql}: {got}, wanted {wanted}")
        time.sleep(0.2)


def _stale_alert_test(tmp: Path, alive: dict[str, str], dead: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """promtool: the shipped AllsmiExporterStale rule (expression, for, labels; annotations left
    out, which the rules' own unit tests check) over the two stored label sets."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (rule,) = [dict(r) for g in groups for r in g["rules"] if r.get("alert") == "AllsmiExporterStale"]
    rule.pop("annotations", None)
    (tmp / "stale.yml").write_text(yaml.safe_dump({"groups": [{"name": "stale", "rules": [rule]}]}))

    def series(labels: dict[str, str]) -> str:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return f"allsmi_last_collect_timestamp_seconds{{{inner}}}"
    tests = {"rule_files": ["stale.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "15s",
        "input_series": [
            {"series": series(alive), "values": "0+15x40"},   # collects every 15 s for 10 minutes
            {"series": series(dead), "values": "0+15x4 _x36"},  # killed after a minute
        ],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "AllsmiExporterStale", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "AllsmiExporterStale", "exp_alerts": [
                {"exp_labels": {**{k: v for k, v in dead.items() if k != "__name__"}, **rule["labels"]}}]},
        ]}]}
    (tmp / "stale.test.yml").write_text(yaml.safe_dump(tests))
    return subprocess.run([require_tool("promtool", "prometheus"), "test", "rules", "stale.test.yml"],
                          capture_output=True, text=True, timeout=60, cwd=tmp)


@pytest.mark.parametrize("overlay,kind", [("fleet", "ServiceMonitor"), ("fleet-podmonitor", "PodMonitor")])
def test_two_exporters_on_one_node_are_two_targets(tmp_path: Path, overlay: str, kind: str) -> None:
    relabel, endpoint = _relabelings(one(render(overlay), kind))
    # The same scrape without the monitors' job relabeling (the kit before issue 34): the two
    # pods collide into one target label set.
    without_job = [r for r in relabel if r.get("target_label") != "job" or "replacement" in r
                   or r["source_labels"] != ["__meta_kubernetes_pod_controller_name"]]
    assert len(without_job) == len(relabel) - 1
    servers = {job: run_serve(["--simulate", "mixed", "--interval", "0.5"], tmp=tmp_path,
                              env={"ALLSMI_HOSTNAME": NODE}) for job in PODS}
    try:
        for server in servers.values():
            server.wait_ready()
        targets = [{"targets": [f"127.0.0.1:{servers[job].port}"], "labels": {
            "__meta_kubernetes_namespace": "allsmi", "__meta_kubernetes_service_name": "allsmi",
            "__meta_kubernetes_pod_name": pod, "__meta_kubernetes_pod_container_name": "allsmi",
            "__meta_kubernetes_pod_node_name": NODE, "__meta_kubernetes_pod_controller_kind": "DaemonSet",
            "__meta_kubernetes_pod_controller_name": job}} for job, pod in PODS.items()]
        (tmp_path / "targets.json").write_text(json.dumps(targets))
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": [{"job_name": name, "honor_labels": endpoint["honorLabels"],
                                      "metrics_path": endpoint["path"],
                                      "file_sd_configs": [{"files": [str(tmp_path / "targets.json")]}],
                                      "relabel_configs": rules}
                                     for name, rules in (("kit", relabel), ("without-job", without_job))]}
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        argv = [require_tool("prometheus", "prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]
        with running_server(argv, tmp_path / "prometheus.log", f"{base}/-/ready", "prometheus"):
            both = [("allsmi-amd", NODE, "1"), ("allsmi-nvidia", NODE, "1")]
            (up,) = {tuple(sorted(r["metric"])) for r in _wait(base, 'up{job=~"allsmi-.*"}', both)}
            collided = _query(base, 'up{job!~"allsmi-.*"}')
            assert len(collided) == 1 and collided[0]["metric"]["instance"] == NODE, collided
            # Nothing of the exporter pod's own identity is left on its series.
            assert not {"pod", "namespace", "container", "service", "endpoint"} & set(up)
            _wait(base, 'count by (job, instance) (allsmi_last_collect_timestamp_seconds{job=~"allsmi-.*"})',
                  [("allsmi-amd", NODE, "1"), ("allsmi-nvidia", NODE, "1")])
            stored = {r["metric"]["job"]: r["metric"] for r in
                      _query(base, 'allsmi_last_collect_timestamp_seconds{job=~"allsmi-.*"}')}

            servers["allsmi-amd"].stop(signal.SIGKILL)
            _wait(base, 'up{job=~"allsmi-.*"}', [("allsmi-amd", NODE, "0"), ("allsmi-nvidia", NODE, "1")])
    finally:
        for server in servers.values():
            server.stop()
    result = _stale_alert_test(tmp_path, stored["allsmi-nvidia"], stored["allsmi-amd"])
    assert result.returncode == 0, result.stdout + result.stderr


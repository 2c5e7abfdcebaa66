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
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from ..conftest import require_tool
from ..exporter.server import run_serve
from .kube import one, render
from .operator import pod_target, prometheus, query, relabelings, scrape_job, wait_for
from .support import RULES

pytestmark = [pytest.mark.integration]

NODE = "gpu-node-7"
PODS = {"allsmi-nvidia": "allsmi-nvidia-x7k2p", "allsmi-amd": "allsmi-amd-q9d4m"}


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
    monitor = one(render(overlay), kind)
    relabel = relabelings(monitor)
    # The same scrape without the monitors' job relabeling (the kit before issue 34): the two
    # pods collide into one target label set.
    without_job = [r for r in relabel if r.get("source_labels") != ["__meta_kubernetes_pod_controller_name"]]
    assert len(without_job) == len(relabel) - 1
    servers = {job: run_serve(["--simulate", "mixed", "--interval", "0.5"], tmp=tmp_path,
                              env={"ALLSMI_HOSTNAME": NODE}) for job in PODS}
    try:
        for server in servers.values():
            server.wait_ready()
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps([pod_target(f"127.0.0.1:{servers[job].port}", pod, job, NODE)
                                       for job, pod in PODS.items()]))
        jobs = [scrape_job(monitor, "kit", targets), {**scrape_job(monitor, "without-job", targets),
                                                      "relabel_configs": without_job}]
        with prometheus(tmp_path, jobs) as base:
            both = [("allsmi-amd", NODE, "1"), ("allsmi-nvidia", NODE, "1")]
            (up,) = {tuple(sorted(r["metric"])) for r in wait_for(base, 'up{job=~"allsmi-.*"}', both)}
            # One target (both pods' label sets are the same), once it has been scraped; its job
            # is what the operator would name it (the Service's, or namespace/PodMonitor).
            job = "allsmi" if kind == "ServiceMonitor" else "allsmi/allsmi"
            wait_for(base, 'up{job!~"allsmi-.*"}', [(job, NODE, "1")])
            # Nothing of the exporter pod's own identity is left on its series.
            assert not {"pod", "namespace", "container", "service", "endpoint"} & set(up)
            wait_for(base, 'count by (job, instance) (allsmi_last_collect_timestamp_seconds{job=~"allsmi-.*"})',
                  [("allsmi-amd", NODE, "1"), ("allsmi-nvidia", NODE, "1")])
            stored = {r["metric"]["job"]: r["metric"] for r in
                      query(base, 'allsmi_last_collect_timestamp_seconds{job=~"allsmi-.*"}')}

            servers["allsmi-amd"].stop(signal.SIGKILL)
            wait_for(base, 'up{job=~"allsmi-.*"}', [("allsmi-amd", NODE, "0"), ("allsmi-nvidia", NODE, "1")])
    finally:
        for server in servers.values():
            server.stop()
    result = _stale_alert_test(tmp_path, stored["allsmi-nvidia"], stored["allsmi-amd"])
    assert result.returncode == 0, result.stdout + result.stderr


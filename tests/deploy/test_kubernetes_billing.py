"""deploy/kubernetes/components/billing-export: the CronJob's command bills from a real Prometheus,
and its status reaches the metric AllsmiBillingExportFailed reads.

The CronJob's container command runs as rendered (its paths mapped into a temporary directory,
the image's allsmi being this checkout's) against a real Prometheus scraping
``allsmi serve --simulate mixed``. The status Deployment's node_exporter arguments serve the
textfile it wrote, scraped as the Prometheus Operator configures the rendered status monitor;
the shipped alert's expression is then asked on that Prometheus.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ..conftest import require_tool
from ..exporter.server import run_serve
from ..prometheus_server import free_port, running_server
from .kube import KIT, config_toml, one, render
from .operator import prometheus, query, scrape_job
from .support import all_rules

pytestmark = [pytest.mark.integration]

CONTAINER = "export"


def _run_cronjob(job: dict[str, Any], billing: Path, config: Path, prometheus_url: str,
                 replace: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    variables = {e["name"]: e["value"] for e in c["env"]}
    assert variables["BILLING_DIR"] in mounts and not mounts[variables["BILLING_DIR"]].get("readOnly")
    assert pod["volumes"][[v["name"] for v in pod["volumes"]].index(mounts[variables["BILLING_DIR"]]["name"])][
        "persistentVolumeClaim"]["claimName"] == "allsmi-billing"
    script = c["args"][0]
    allsmi = Path(sys.executable).parent / "allsmi"
    assert "/opt/allsmi/bin/allsmi export" in script and "/etc/allsmi/config.toml" in script
    script = script.replace("/opt/allsmi/bin/allsmi", str(allsmi)).replace("/etc/allsmi/config.toml", str(config))
    for old, new in (replace or {}).items():
        assert old in script
        script = script.replace(old, new)
    environ = {**os.environ, **variables, "BILLING_DIR": str(billing), "PROMETHEUS_URL": prometheus_url,
               "HOME": str(billing.parent)}
    return subprocess.run([*c["command"], script], env=environ, capture_output=True, text=True, timeout=120)


def _alert_expr() -> str:
    (rule,) = [r for r in all_rules() if r.get("alert") == "AllsmiBillingExportFailed"]
    return rule["expr"]


@pytest.mark.long(17)
def test_cronjob_bills_and_its_status_reaches_the_alert(tmp_path: Path) -> None:
    objects = render("fleet-billing")
    job = one(objects, "CronJob", "allsmi-export")
    assert job["spec"]["timeZone"] == "Etc/UTC" and job["spec"]["concurrencyPolicy"] == "Forbid"
    status = one(objects, "Deployment", "allsmi-billing-status")
    monitor = one(objects, "ServiceMonitor", "allsmi-billing-status")
    # `kubectl cp` from the status pod (README.md, "Billing") reads the 0600 exports: it runs as
    # the CronJob's writer.
    writer = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["securityContext"]
    reader = status["spec"]["template"]["spec"]["securityContext"]
    assert (reader["runAsUser"], reader["runAsGroup"]) == (writer["runAsUser"], writer["runAsGroup"]) == (10001, 10001)
    assert "kubectl -n allsmi cp allsmi-billing-status-POD:" in (KIT / "README.md").read_text()
    config = tmp_path / "config.toml"
    # [export] tz far from UTC: the CronJob still bills the UTC day its file is named after
    config.write_text(config_toml(objects) + '\n[export]\ntz = "Pacific/Kiritimati"\n')
    billing = tmp_path / "billing"
    billing.mkdir()

    (exporter_c,) = status["spec"]["template"]["spec"]["containers"]
    args = exporter_c["args"]
    textfile_dir = next(a.split("=", 1)[1] for a in args if a.startswith("--collector.textfile.directory="))
    (mount,) = exporter_c["volumeMounts"]
    assert mount["readOnly"] is True
    local_dir = billing / Path(textfile_dir).relative_to(mount["mountPath"])
    status_port = free_port()
    node_exporter = [require_tool("prometheus-node-exporter", "prometheus-node-exporter")] + [
        f"--collector.textfile.directory={local_dir}" if a.startswith("--collector.textfile.directory=")
        else f"--web.listen-address=127.0.0.1:{status_port}" if a.startswith("--web.listen-address=") else a
        for a in args]

    serve = run_serve(["--simulate", "mixed", "--interval", "0.5"], tmp=tmp_path)
    try:
        serve.wait_ready()
        targets = tmp_path / "status-targets.json"
        targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{status_port}"], "labels": {
            "__meta_kubernetes_namespace": "allsmi", "__meta_kubernetes_service_name": "allsmi-billing-status",
            "__meta_kubernetes_pod_name": "allsmi-billing-status-5d9f-x2", "__meta_kubernetes_pod_container_name": "node-exporter"}}]))
        jobs = [{"job_name": "allsmi", "static_configs": [{"targets": [f"127.0.0.1:{serve.port}"]}]},
                scrape_job(monitor, "billing-status", targets)]
        with prometheus(tmp_path, jobs) as base:
            start = time.time()
            deadline = time.monotonic() + 30
            while not query(base, "allsmi_device_info"):
                assert time.monotonic() < deadline
                time.sleep(0.2)
            # Yesterday, as scheduled: Prometheus has nothing of it, so the file is written with
            # coverage 0, exit status 3, which ends the Job successfully; the status says 0.
            first = _run_cronjob(job, billing, config, base)
            assert first.returncode == 0, first.stderr
            (csv,) = billing.glob("gpu-*.csv")
            yesterday = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))
            assert csv.name == f"gpu-{yesterday}.csv"
            first_status = (local_dir / "allsmi_export.prom").read_text()
            assert "allsmi_export_success 0" in first_status
            midnight = int(time.time()) // 86400 * 86400
            assert f"allsmi_export_period_end_timestamp_seconds {midnight}\n" in first_status, first_status
            with running_server(node_exporter, tmp_path / "node-exporter.log",
                                f"http://127.0.0.1:{status_port}/metrics", "node_exporter"):
                deadline = time.monotonic() + 30
                while True:
                    firing = query(base, _alert_expr())
                    if firing or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                assert [(r["metric"]["job"], r["metric"]["instance"]) for r in firing] == [
                    ("allsmi-export", "allsmi/allsmi-export")]

                # A window Prometheus covers: success 1, and the alert no longer answers (a window of
                # seconds loses a quarter of its device time to the scrapes at its edges: a lower
                # coverage threshold than a day's 0.95).
                time.sleep(max(0.0, start + 14 - time.time()))
                since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 3))
                until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 13))
                second = _run_cronjob(job, billing, config, base, {
                    "--period yesterday": f"--since {since} --until {until} --coverage-threshold 0.5"})
                assert second.returncode == 0, second.stderr
                assert "allsmi_export_success 1" in (local_dir / "allsmi_export.prom").read_text(), second.stderr
                deadline = time.monotonic() + 30
                while query(base, _alert_expr()):
                    assert time.monotonic() < deadline, "AllsmiBillingExportFailed still answers"
                    time.sleep(0.2)

            # Prometheus unreachable: the Job fails, and the status says so.
            third = _run_cronjob(job, billing, config, "http://127.0.0.1:1")
            assert third.returncode not in (0, 3), third.stderr
            assert "allsmi_export_success 0" in (local_dir / "allsmi_export.prom").read_text()
    finally:
        serve.stop()

"""deploy/victoriametrics: the long-term store's files, run as written with the Debian binaries.

VictoriaMetrics starts with the ``ARGS`` of ``victoria-metrics.default`` and scrapes the shipped
``scrape.yml``; vmalert starts with ``vmalert.service``'s ``ExecStart=``, evaluating
deploy/prometheus/allsmi-rules.yml and writing the results back. Only addresses and paths are
moved to loopback ports and a temporary directory (and the scrape interval shortened).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from ..conftest import require_tool
from ..prometheus_server import free_port, running_server
from .support import DEPLOY, RULES
from .test_systemd import verify

VM_DIR = DEPLOY / "victoriametrics"

pytestmark = [pytest.mark.integration]


def default_args() -> list[str]:
    for line in (VM_DIR / "victoria-metrics.default").read_text().splitlines():
        if line.startswith("ARGS="):
            return shlex.split(shlex.split(line.partition("=")[2])[0])
    raise AssertionError("no ARGS= in victoria-metrics.default")


def exec_start() -> list[str]:
    for line in (VM_DIR / "vmalert.service").read_text().splitlines():
        if line.startswith("ExecStart="):
            return shlex.split(line.partition("=")[2])
    raise AssertionError("no ExecStart= in vmalert.service")


def flags(argv: list[str]) -> dict[str, str]:
    return dict(a.lstrip("-").split("=", 1) for a in argv if a.startswith("-") and "=" in a)


def test_the_documented_settings() -> None:
    vm = flags(default_args())
    assert vm["retentionPeriod"] == "13"  # months
    assert vm["promscrape.config"] == "/etc/victoria-metrics/scrape.yml"
    assert "dedup.minScrapeInterval" in vm
    alert = flags(exec_start()[1:])
    assert alert["rule"] == "/etc/victoria-metrics/rules/allsmi-rules.yml"
    assert alert["datasource.url"] == alert["remoteWrite.url"]  # results written back
    # evaluated as of VictoriaMetrics' default -search.latencyOffset (30 s) ago, so that an
    # evaluation just after an hour is not moved back by the store (the hour shifted)
    assert "search.latencyOffset" not in vm and alert["datasource.lookback"] == "30s"
    assert alert["datasource.url"].endswith(":" + vm["httpListenAddr"].rsplit(":", 1)[1])
    readme = (DEPLOY / "README.md").read_text()
    for name in ("victoria-metrics.default", "scrape.yml", "vmalert.service",
                 "prometheus-remote-write.yml"):
        assert f"deploy/victoriametrics/{name}" in readme, name
    assert "-replay.timeFrom" in readme and "-datasource.queryStep=1h" in readme


def test_vmalert_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    require_tool("vmalert", "victoria-metrics")
    (tmp_path / "vmalert.service").write_text((VM_DIR / "vmalert.service").read_text())
    result = verify(tmp_path, "vmalert.service")
    complaints = [line for line in (result.stdout + result.stderr).splitlines()
                  if "vmalert.service" in line]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr


def _query(base: str, promql: str) -> list[dict]:  # type: ignore[type-arg]
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback only
        return json.load(resp)["data"]["result"]  # type: ignore[no-any-return]


def test_the_shipped_layout_scrapes_stores_and_writes_back(tmp_path: Path) -> None:
    vm_bin = require_tool("victoria-metrics", "victoria-metrics")
    vmalert_bin = require_tool("vmalert", "victoria-metrics")
    serve_port, vm_port, alert_port = free_port(), free_port(), free_port()
    scrape = yaml.safe_load((VM_DIR / "scrape.yml").read_text())
    scrape["global"]["scrape_interval"] = "1s"
    jobs = [j for j in scrape["scrape_configs"] if j["job_name"] == "allsmi"]
    jobs[0].update(scrape_interval="1s", scrape_timeout="1s",
                   static_configs=[{"targets": [f"127.0.0.1:{serve_port}"]}])
    scrape["scrape_configs"] = jobs
    (tmp_path / "scrape.yml").write_text(yaml.safe_dump(scrape))
    moved = {"storageDataPath": str(tmp_path / "vmdata"),
             "httpListenAddr": f"127.0.0.1:{vm_port}",
             "promscrape.config": str(tmp_path / "scrape.yml")}
    vm_argv = [vm_bin] + [f"-{k}={moved.get(k, v)}" for k, v in flags(default_args()).items()]
    vm_argv.append("-search.latencyOffset=0s")  # queryable at once, for the test
    store = f"http://127.0.0.1:{vm_port}"
    alert_argv = [vmalert_bin]
    for arg in exec_start()[1:]:
        arg = arg.replace("/etc/victoria-metrics/rules/allsmi-rules.yml", str(RULES))
        arg = arg.replace("http://127.0.0.1:8428", store)
        arg = arg.replace("127.0.0.1:8880", f"127.0.0.1:{alert_port}")
        arg = arg.replace("http://127.0.0.1:9093", f"http://127.0.0.1:{free_port()}")
        alert_argv.append(arg)
    assert str(RULES) in " ".join(alert_argv) and store in " ".join(alert_argv)
    log = open(tmp_path / "serve.log", "wb")
    serve = subprocess.Popen([sys.executable, "-m", "allsmi", "serve", "--simulate", "mixed",
                              "--listen", f"127.0.0.1:{serve_port}"],
                             cwd=tmp_path, env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)},
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        with running_server(vm_argv, tmp_path / "vm.log", f"{store}/health", "victoria-metrics"):
            deadline = time.monotonic() + 30
            while not _query(store, "allsmi_device_info"):
                assert time.monotonic() < deadline, (tmp_path / "vm.log").read_text()
                time.sleep(0.5)
            with running_server(alert_argv, tmp_path / "vmalert.log",
                          f"http://127.0.0.1:{alert_port}/metrics", "vmalert"):
                deadline = time.monotonic() + 120
                # the fleet view's rule, evaluated every 15 s as of 30 s ago, written back and
                # queryable (its newest sample 30 to 45 s old)
                while not _query(store, "last_over_time(instance:allsmi_devices:totals[5m])"):
                    assert time.monotonic() < deadline, (tmp_path / "vmalert.log").read_text()
                    time.sleep(1)
                # (the hourly roll-ups start at an offset within the hour: see
                # tests/accounting/test_longterm_store.py for them)
    finally:
        serve.terminate()
        serve.wait(15)
        log.close()

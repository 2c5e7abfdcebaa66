"""Conflicting claims and bad job-file shares counted on /metrics and said by the Prometheus
export (issue 32, item 9), end to end: ``allsmi serve`` against the real gRPC kubelet and a
job-mapping directory, scraped over HTTP by a real Prometheus, ``allsmi export --prometheus``
as a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from ..accounting.fleet import iso
from ..exporter.server import run_serve
from ..prometheus_server import running_prometheus, wait_scraped
from .helpers import PodResourcesServer, find, mixed_devices, pod

DEVICES = mixed_devices()
CONFLICTS = "allsmi_device_claim_conflicts_total"
BAD_SHARES = "allsmi_attribution_bad_shares_total"


@pytest.fixture
def kubelet() -> Iterator[PodResourcesServer]:
    srv = PodResourcesServer()
    yield srv
    srv.stop()


def _values(text: str, family: str) -> dict[str, float]:
    """The series of ``family`` in an exposition, by their first label's value (and the
    second's, after a comma, when the family has a ``reason``)."""
    return {m.group(1) + (f",{m.group(2)}" if m.group(2) else ""): float(m.group(3))
            for m in re.finditer(rf'^{family}\{{\w+="([^"]*)"(?:,reason="([^"]*)")?[^}}]*\}} '
                                 r'(\S+)$', text, re.M)}


def test_conflicts_and_bad_shares_are_counted_and_the_export_names_them(
        kubelet: PodResourcesServer, tmp_path: Path) -> None:
    """The kubelet gives GPU 1 to pod ml/trainer while job file ``nvidia1`` gives it to job 77:
    its counter counts the cycles, GPU 2 (jobs alone, two bad shares in its file and the good
    ones adding up to 1.25) stays at 0 and the hpc-job source's bad-share counters grow by 2
    (not a share) and 1 (above the device) a cycle; Prometheus stores them and
    the export warns naming the device and both claimants."""
    contested, alone = find(DEVICES, "nvidia", 1), find(DEVICES, "nvidia", 2)
    kubelet.pods = [pod("ml", "trainer", {"c": [("nvidia.com/gpu", [contested.id])]})]
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "nvidia1").write_text("77\n")
    (jobs / "nvidia2").write_text("78 NaN\n79 2\n80 0.5\n81 75%\n")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5"], tmp=tmp_path,
                       env={"ALLSMI_KUBELET_SOCKET": str(kubelet.socket),
                            "ALLSMI_HPC_JOB_DIR": str(jobs)})
    try:
        server.wait_ready()
        deadline = time.monotonic() + 30
        while True:
            text = server.get("/metrics").text
            counted = _values(text, CONFLICTS)
            if counted.get(contested.id, 0) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert counted.get(contested.id, 0) >= 2, text
        assert counted[alone.id] == 0.0  # a job alone on it: no conflict (but counted: 0)
        ignored = _values(text, BAD_SHARES)
        assert set(ignored) == {"hpc-job,not_a_share", "hpc-job,above_device"}, ignored
        assert ignored["hpc-job,above_device"] >= 1, ignored
        assert ignored["hpc-job,not_a_share"] == 2 * ignored["hpc-job,above_device"], ignored
        # the jobs of the bad shares are kept (the share ignored, not the job)
        held = set(re.findall(rf'allsmi_device_workload_info\{{uuid="{alone.id}"[^}}]*'
                              r'job_id="(\w+)"', text))
        assert held == {"78", "79", "80", "81"}, held

        with running_prometheus(tmp_path, [f"127.0.0.1:{server.port}"]) as prom:
            wait_scraped(prom)
            start = int(time.time())
            wait_scraped(prom, start + 4)
            end = int(time.time()) - 1
            out = subprocess.run(
                [sys.executable, "-m", "allsmi", "export", "--prometheus", prom, "--since",
                 iso(start), "--until", iso(end), "--format", "json", "--group-by", "pod,job"],
                cwd=tmp_path, capture_output=True, text=True, timeout=60,
                env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_LEDGER": ""})
    finally:
        server.stop()
    assert out.returncode in (0, 3), out.stderr  # 3: the window's coverage may be short
    warning = [line for line in out.stderr.splitlines() if "claimed at once" in line]
    assert len(warning) == 1, out.stderr
    assert "1 device(s) claimed at once" in warning[0]
    assert f"127.0.0.1:{server.port}/{contested.id} in about " in warning[0]
    assert "(holders seen on it: hpc-job job 77, kubernetes pod ml/trainer)" in warning[0]
    assert alone.id not in warning[0]

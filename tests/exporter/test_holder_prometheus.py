"""A real Prometheus scraping ``allsmi serve`` on the simulated ``mixed`` node with an MI300X
split into eight CPX partitions and a Slurm job sharing a GPU with a pod: on every device the
per-holder counters add up to the device counters, and the holders of the MIG-partitioned GPU
and of the CPX partitions together bill no more than the physical device (issue 21,
done-when)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from ..prometheus_server import running_prometheus
from .server import fetch, run_serve

pytestmark = [pytest.mark.integration]

PAIRS = {"allsmi_holder_allocated_seconds_total": "allsmi_device_allocated_seconds_total",
         "allsmi_holder_used_seconds_total": "allsmi_device_busy_seconds_total",
         "allsmi_holder_energy_joules_total": "allsmi_device_energy_joules_total"}
WINDOW = 6


def query(base: str, promql: str, key: str = "uuid", at: float | None = None) -> dict[str, float]:
    params = {"query": promql} if at is None else {"query": promql, "time": f"{at:.3f}"}
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode(params)
    resp = fetch(url)
    assert resp.status == 200, resp.text
    data = json.loads(resp.body)
    assert data["status"] == "success", data
    return {item["metric"].get(key, ""): float(item["value"][1]) for item in data["data"]["result"]}


CPX = ", ".join(['{ profile = "CPX", memory_total_bytes = 25769803776 }'] * 8)
SCENARIO = f"""include = "mixed"
name = "mixed-cpx"

[[partitions]]
device = "amd:2"
instances = [ {CPX} ]
"""


def _pod_gpu(scenario: Path, tmp_path: Path) -> dict:  # type: ignore[type-arg]
    """A whole NVIDIA GPU of the scenario that a simulated pod holds."""
    out = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", str(scenario),
                          "--format", "json"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return next(d for d in json.loads(out.stdout)["devices"]
                if d["backend"] == "nvidia" and d["parent"] is None
                and any(w["pod"] for w in d["workloads"] or ()))


@pytest.mark.long(20)
def test_holder_counters_add_up_to_devices_in_prometheus(tmp_path: Path) -> None:
    scenario = tmp_path / "cpx.toml"
    scenario.write_text(SCENARIO)
    shared = _pod_gpu(scenario, tmp_path)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / f"nvidia{shared['index']}").write_text("9001\n")  # a Slurm job beside the pod
    exporter = run_serve(["--simulate", str(scenario), "--interval", "0.5", "--processes"],
                         tmp=tmp_path, env={"ALLSMI_HPC_JOB_DIR": str(jobs)})
    try:
        exporter.wait_ready()
        with running_prometheus(tmp_path, [f"127.0.0.1:{exporter.port}"]) as base:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(query(
                    base, "count_over_time(allsmi_device_info[1m])", "uuid")) == 0:
                time.sleep(0.5)
            time.sleep(WINDOW + 2)
            start = time.time() - 1  # the holders' sources have all answered by now
            time.sleep(4)
            at = time.time() - 1
            # Devices held by known holders all through [start, at] (allocated grew as observed):
            # their holders' counters grew exactly as the device's; on the others (a job
            # ended, leaving idle power to nobody) never more. (Over a window, not since the
            # start: in the first cycles a holder's source may still be on its way, and that
            # time then went to nobody.)
            gap = "allsmi_device_allocated_seconds_total - on (uuid) allsmi_device_observed_seconds_total"
            gap_then, gap_now = query(base, gap, at=start), query(base, gap, at=at)
            always = {u for u, v in gap_now.items()
                      if u in gap_then and abs(v - gap_then[u]) < 1e-6}
            for holder, device in PAIRS.items():
                # One evaluation time per query: both sides of one scrape.
                parts = {t: query(base, f"sum by (uuid) ({holder}) and on (uuid) {device}", at=t)
                         for t in (start, at)}
                whole = {t: query(base, f"{device} and on (uuid) {holder}", at=t)
                         for t in (start, at)}
                assert parts[at] and set(parts[at]) == set(whole[at]), holder
                for uuid, value in parts[at].items():
                    assert value <= whole[at][uuid] * (1 + 1e-6) + 1e-6, (holder, uuid)
                    if uuid in always and uuid in parts[start]:
                        grew = value - parts[start][uuid]
                        assert grew == pytest.approx(whole[at][uuid] - whole[start][uuid],
                                                     rel=1e-6, abs=1e-6), (holder, uuid)
                assert set(parts[at]) & set(parts[start]) & always, holder
            methods = query(base, "count by (method) (allsmi_holder_allocated_seconds_total)",
                            "method")
            assert {"partition", "exclusive"} <= set(methods)
            # Partitions (MIG instances, AMD compute partitions): their holders' allocated time at
            # the partitions' shares never bills more than the physical device's time.
            billed = query(base, (
                f"sum by (parent_uuid) (sum by (uuid) (increase("
                f"allsmi_holder_allocated_seconds_total[{WINDOW}s])) * on (uuid) group_left "
                f"(parent_uuid) (allsmi_device_partition_share_ratio * on (uuid) group_left "
                f'(parent_uuid) allsmi_device_info{{parent_uuid!=""}}))'), "parent_uuid")
            assert len(billed) >= 2  # the MIG GPU and the CPX-partitioned MI300X
            for parent, seconds in billed.items():
                assert 0 < seconds <= WINDOW * 1.15, (parent, seconds)  # increase() extrapolates
            assert time.time() > at
            # The GPU shared by the pod and the job: both hold it, each its equal part.
            held = query(base, "sum by (pod, job_id) (allsmi_holder_allocated_seconds_total"
                               f'{{uuid="{shared["id"]}"}})', "job_id")
            assert "9001" in held and "" in held, held
            assert held["9001"] == pytest.approx(held[""], rel=0.05)
    finally:
        exporter.stop()

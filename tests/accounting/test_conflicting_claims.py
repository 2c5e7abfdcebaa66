"""A device that a pod and a Slurm job held at once (the kubelet and the job-mapping directory
disagree): both are billed a part, and ``allsmi export`` says so, naming the device, the
interval and the claimants (issue 32, item 9). A device held by a pod, then by a job, is no
conflict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from allsmi.schema import Workload

from .helpers import T0, config, device, record, snap
from .test_export_cli import run

POD = Workload("kubernetes", namespace="ml", pod="trainer")
JOB = Workload("hpc-job", job_id="77")


def _held(dev_id: str, *works: Workload):  # type: ignore[no-untyped-def]
    return replace(device(dev_id, power=100.0, util=50.0), processes=None, workloads=works)


def test_a_device_claimed_by_a_pod_and_a_job_is_said(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    snaps = [snap(T0 + t, _held("GPU-both", POD, JOB),
                  # a pod for the first half hour, a job for the second: no conflict
                  _held("GPU-turns", POD if t < 1800 else JOB))
             for t in range(0, 3601, 10)]
    record(db, snaps, config())
    out = run("--ledger", str(db), "--since", "2026-03-02T00:00:00Z", "--until",
              "2026-03-02T01:00:00Z", "--format", "json", "--group-by", "pod,job", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "interval(s) of a device claimed by a pod and a job at once" in out.stderr, out.stderr
    assert "node1/GPU-both from 2026-03-02T00:00:00Z (job 77, pod ml/trainer)" in out.stderr
    assert "GPU-turns" not in out.stderr

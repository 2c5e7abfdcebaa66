"""contrib/slurm: the prolog and epilog, run as slurmd runs them, read by the hpc-job source."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from allsmi.attribution import Attributor, HpcJobSource

from .helpers import find, mixed_devices

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "slurm"
DEVICES = mixed_devices()

pytestmark = pytest.mark.skipif(not shutil.which("flock"), reason="flock (util-linux) not installed")


def _run(script: str, job: str, jobdir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": job, "ALLSMI_HPC_JOB_DIR": str(jobdir), **env}
    return subprocess.run(["sh", str(CONTRIB / script)], env=full, capture_output=True, text=True,
                          timeout=30, check=True)


def _jobs(jobdir: Path) -> dict[str, list[str]]:
    result = Attributor([HpcJobSource(jobdir)], 5).resolve(DEVICES)
    return {d.id: [w.job_id for w in result.device_workloads(d.id) or ()] for d in DEVICES
            if result.device_workloads(d.id)}


def test_prolog_and_epilog_on_two_vendors(tmp_path: Path) -> None:
    jobdir = tmp_path / "hpc-jobs"
    h0, h2 = find(DEVICES, "nvidia", 0).id, find(DEVICES, "nvidia", 2).id
    amd1 = find(DEVICES, "amd", 1).id
    _run("allsmi-prolog.sh", "100", jobdir, SLURM_JOB_GPUS="0,2")
    _run("allsmi-prolog.sh", "101", jobdir, SLURM_JOB_GPUS="2")           # shares GPU 2
    _run("allsmi-prolog.sh", "102", jobdir, SLURM_JOB_GPUS="1", ALLSMI_HPC_VENDOR="amd")
    _run("allsmi-prolog.sh", "102", jobdir, SLURM_JOB_GPUS="1", ALLSMI_HPC_VENDOR="amd")  # requeue
    assert sorted(p.name for p in jobdir.iterdir() if not p.name.startswith(".")) == ["0", "2", "amd1"]
    assert _jobs(jobdir) == {h0: ["100"], h2: ["100", "101"], amd1: ["102"]}
    assert oct((jobdir / "0").stat().st_mode & 0o777) == "0o644"  # readable by an unprivileged allsmi
    _run("allsmi-epilog.sh", "100", jobdir)
    assert _jobs(jobdir) == {h2: ["101"], amd1: ["102"]}
    assert not (jobdir / "0").exists()
    _run("allsmi-epilog.sh", "101", jobdir)
    _run("allsmi-epilog.sh", "102", jobdir)
    assert _jobs(jobdir) == {}
    assert [p.name for p in jobdir.iterdir() if not p.name.startswith(".")] == []


def test_never_fails_the_job(tmp_path: Path) -> None:
    jobdir = tmp_path / "hpc-jobs"
    out = _run("allsmi-prolog.sh", "not-a-job; rm -rf /", jobdir, SLURM_JOB_GPUS="0")
    assert "no usable SLURM_JOB_ID" in out.stderr and not jobdir.exists()
    out = _run("allsmi-prolog.sh", "5", jobdir, SLURM_JOB_GPUS="0,../../etc/x,GPU-abc")
    assert [p.name for p in jobdir.iterdir() if not p.name.startswith(".")] == ["0"]
    _run("allsmi-prolog.sh", "6", jobdir, SLURM_JOB_GPUS="0", ALLSMI_HPC_VENDOR="matrox")
    _run("allsmi-epilog.sh", "7", tmp_path / "missing")  # nothing to do, still exit 0
    (jobdir / "0").chmod(0o644)
    assert (jobdir / "0").read_text() == "5\n"

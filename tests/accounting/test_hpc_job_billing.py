"""Job-mapping files (dcgm-exporter's HPC layout) name jobs on devices of two vendors; the
recorder stores them and ``allsmi export --group-by job`` bills them (issue 11, done-when)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .test_record_gap import env, iso, query, record_for


def _snapshot(tmp_path: Path, jobs: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", "mixed",
                          "--format", "json"], env=env(tmp_path, ALLSMI_HPC_JOB_DIR=str(jobs)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_job_files_on_two_vendors_are_billed_per_job(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "nvidia6").write_text("5001\n")        # <vendor><index>, as the Slurm prolog writes
    (jobs / "amd7").write_text("5002\n5003\n")     # two jobs sharing one device

    doc = _snapshot(tmp_path, jobs)
    held = {(d["backend"], d["index"]): sorted(w["job_id"] for w in d["workloads"] or ()
                                               if w["source"] == "hpc-job")
            for d in doc["devices"] if d["parent"] is None}
    assert held[("nvidia", 6)] == ["5001"] and held[("amd", 7)] == ["5002", "5003"]
    assert {s["name"]: s["status"] for s in doc["attribution"]}["hpc-job"] == "ok"

    db = tmp_path / "ledger.db"
    record_for(tmp_path, db, 3, "--interval", "0.5", ALLSMI_SIMULATE_SPEED="60",
               ALLSMI_HPC_JOB_DIR=str(jobs))
    lo, hi = query(db, "SELECT MIN(start), MAX(start) FROM intervals")[0]
    out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--ledger", str(db),
                          "--since", iso(lo), "--until", iso(hi + 60), "--format", "json",
                          "--group-by", "vendor,job"],
                         env=env(tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 3), out.stderr
    rows = {(r["vendor"], r["job"]): r for r in json.loads(out.stdout)["rows"]}
    assert {("nvidia", "5001"), ("amd", "5002"), ("amd", "5003")} <= set(rows)
    one = rows[("nvidia", "5001")]["allocated_device_hours"]
    assert one > 0
    # the shared MI300X is split between its two jobs: nothing is counted twice
    assert rows[("amd", "5002")]["allocated_device_hours"] == \
        rows[("amd", "5003")]["allocated_device_hours"]
    assert rows[("amd", "5002")]["allocated_device_hours"] + \
        rows[("amd", "5003")]["allocated_device_hours"] <= one * 1.05 + 1e-6
    for row in rows.values():
        idle = row["idle_allocated_device_hours"]
        assert idle is None or idle <= row["allocated_device_hours"] + 1e-9

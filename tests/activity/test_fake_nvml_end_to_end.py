"""Issue "honest activity", done when: on the test suite's fake NVML, a GPU pinned at 100 %
utilization and 20 % SM active shows both figures in JSON, /metrics, the ledger and the export,
its active device-hours are 20 % of its allocated ones within 1 %, and a MIG slice reports its
own activity, so its idle time is known, not blank. Everything runs as a user runs it: allsmi
as a subprocess over the fake libnvidia-ml (tests/backends/fake_gpm_allsmi.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import run_allsmi

ROOT = Path(__file__).resolve().parents[2]


def fake(*args: str, pid: int) -> list[str]:
    return [sys.executable, "-m", "tests.backends.fake_gpm_allsmi", str(pid), "--", *args]


@pytest.mark.long(13)
def test_busy_looking_gpu_and_mig_slice_end_to_end(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        snap = subprocess.run(fake("snapshot", "--format", "json", pid=sleeper.pid),
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert snap.returncode == 0, snap.stderr
        devices = json.loads(snap.stdout)["devices"]
        busy = devices[0]
        assert busy["utilization_percent"] == 100.0
        assert busy["compute_active_percent"] == pytest.approx(20.0)
        assert busy["compute_active_source"] == "sm_active"
        slices = [d for d in devices if d["parent"] is not None]
        assert slices and slices[0]["compute_active_percent"] == pytest.approx(75.0)
        assert slices[0]["utilization_percent"] is None  # MIG: no headline figure
        config = tmp_path / "config.toml"
        config.write_text(
            f'[[rules]]\nresource_group = "busy"\nuuid = "{busy["uuid"]}"\n'
            f'[[rules]]\nresource_group = "slice"\nuuid = "{slices[0]["uuid"]}"\n')

        ledger = tmp_path / "ledger.db"
        start = time.time()
        recorder = subprocess.Popen(
            fake("record", "--ledger", str(ledger), "--config", str(config), "--interval", "1",
                 pid=sleeper.pid), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=ROOT)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not ledger.exists():
                time.sleep(0.2)
            time.sleep(12)  # a dozen intervals of 1 s
        finally:
            recorder.send_signal(signal.SIGTERM)
            _, err = recorder.communicate(timeout=60)
        assert recorder.returncode in (0, 143), err
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start - 120))
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        out = run_allsmi("export", "--ledger", str(ledger), "--config", str(config), "--since",
                         since, "--until", until, "--format", "json", "--coverage-threshold", "0")
        assert out.returncode in (0, 3), out.stderr
        rows = {r["resource_group"]: r for r in json.loads(out.stdout)["rows"]}
        row = rows["busy"]
        assert row["allocated_device_hours"] > 0
        assert row["used_device_hours"] == pytest.approx(row["allocated_device_hours"], rel=0.01)
        assert row["active_device_hours"] == pytest.approx(0.2 * row["allocated_device_hours"],
                                                           rel=0.01)
        assert row["efficiency_ratio"] == pytest.approx(0.2, rel=0.01)
        assert row["activity_method"] == "sm_active"
        mig = rows["slice"]
        assert mig["allocated_device_hours"] > 0
        assert mig["idle_allocated_device_hours"] == 0.0  # known: 75 % active, not idle
        assert mig["efficiency_ratio"] == pytest.approx(0.75, rel=0.01)
    finally:
        sleeper.kill()
        sleeper.wait()

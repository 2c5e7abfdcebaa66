"""Two processes of different users on one GPU (the fake NVML library, processes at 75% and
25% of the device's SM activity), recorded by ``allsmi record``: ``allsmi export --group-by
user`` gives used device-hours 3:1, allocated device-hours 1:1 with method ``equal``, and
each column adds up to the device (issue 21, done-when)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_record_gap import query

ROOT = Path(__file__).resolve().parents[2]


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.long(17)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user")
def test_fake_nvml_activity_bills_used_time_three_to_one(tmp_path: Path) -> None:
    ann = subprocess.Popen(["sleep", "300"])                    # root's
    bob = subprocess.Popen(["sleep", "300"], user=65534, group=65534)  # nobody's
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_LEDGER": "",
           "ALLSMI_CONFIG": "", "PYTHONPATH": str(ROOT)}
    config = tmp_path / "config.toml"
    config.write_text("[ledger]\ninterval_seconds = 5\n")
    db = tmp_path / "ledger.db"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.exporter.fake_nvml_allsmi", f"{ann.pid}:75,{bob.pid}:25",
             "--", "record", "--ledger", str(db), "--config", str(config), "--interval", "0.5"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    lo, hi = query(db, "SELECT MIN(start), MAX(start) FROM intervals")[0]
                except Exception:  # noqa: BLE001 - not created yet
                    lo = hi = None
                if lo is not None and hi - lo >= 15:
                    break
                time.sleep(0.2)
            assert proc.poll() is None, proc.communicate()[1]
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        for p in (ann, bob):
            p.kill()
            p.wait()
    lo, hi = query(db, "SELECT MIN(start), MAX(start) FROM intervals")[0]
    out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--ledger", str(db),
                          "--config", str(config), "--since", _iso(lo), "--until", _iso(hi + 5),
                          "--group-by", "user", "--format", "json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 3), out.stderr
    rows = {r["user"]: r for r in json.loads(out.stdout)["rows"]}
    assert {"root", "nobody"} <= set(rows)
    ann_row, bob_row = rows["root"], rows["nobody"]
    assert ann_row["used_device_hours"] == pytest.approx(3 * bob_row["used_device_hours"], rel=0.05)
    assert ann_row["allocated_device_hours"] == pytest.approx(bob_row["allocated_device_hours"],
                                                              rel=0.01)
    assert (ann_row["allocation_method"], ann_row["usage_method"]) == ("equal", "activity")
    # each column adds up to the device's (the GPU that ran them)
    dev = query(db, "SELECT SUM(allocated_ms), SUM(busy_ms) FROM intervals i JOIN devices d "
                    "ON d.dev = i.dev WHERE allocated_ms > 0")[0]
    for column, whole_ms in (("allocated_device_hours", dev[0]), ("used_device_hours", dev[1])):
        total = ann_row[column] + bob_row[column]
        assert total == pytest.approx(whole_ms / 3.6e6, rel=0.01), column

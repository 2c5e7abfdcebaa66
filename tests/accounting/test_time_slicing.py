"""Four pods on the time-slicing replicas ``<uuid>::0..3`` of one GPU (a real pod-resources
gRPC server): each is billed a quarter of the device's allocated hours, method ``declared``,
and together exactly the device (issue 21, done-when)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grpc")

from allsmi.attribution._podresources import api_pb2  # noqa: E402

from ..attribution.helpers import PodResourcesServer, find, mixed_devices, pod  # noqa: E402
from .test_record_gap import env, iso, query, record_for  # noqa: E402


def test_four_replicas_bill_a_quarter_each(tmp_path: Path) -> None:
    gpu = find(mixed_devices(), "nvidia", 1)
    assert gpu.uuid
    replicas = [f"{gpu.uuid}::{n}" for n in range(4)]
    kubelet = PodResourcesServer()
    try:
        kubelet.pods = [pod("infer", f"llm-{n}", {"srv": [("nvidia.com/gpu", [rid])]})
                        for n, rid in enumerate(replicas)]
        kubelet.allocatable = [api_pb2.ContainerDevices(resource_name="nvidia.com/gpu",
                                                        device_ids=replicas)]
        db = tmp_path / "ledger.db"
        record_for(tmp_path, db, 3, "--interval", "0.5", ALLSMI_SIMULATE_SPEED="60",
                   ALLSMI_KUBELET_SOCKET=str(kubelet.socket))
    finally:
        kubelet.stop()
    lo, hi = query(db, "SELECT MIN(start), MAX(start) FROM intervals")[0]
    out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--ledger", str(db),
                          "--since", iso(lo), "--until", iso(hi + 60), "--format", "json",
                          "--group-by", "pod"],
                         env=env(tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 3), out.stderr
    rows = {r["pod"]: r for r in json.loads(out.stdout)["rows"] if r["pod"]}
    assert set(rows) == {f"llm-{n}" for n in range(4)}
    (device_ms,) = query(db, "SELECT SUM(i.allocated_ms) FROM intervals i JOIN devices d "
                             f"ON d.dev = i.dev WHERE d.device_id = '{gpu.id}'")[0]
    device_hours = device_ms / 3.6e6
    assert device_hours > 0
    for row in rows.values():
        assert row["allocation_method"] == "declared"
        assert row["allocated_device_hours"] == pytest.approx(device_hours / 4, rel=0.01)
    total = sum(r["allocated_device_hours"] for r in rows.values())
    assert total == pytest.approx(device_hours, rel=0.001)
    # held the whole time: one device-hour per hour, together
    (observed_ms,) = query(db, "SELECT SUM(i.observed_ms) FROM intervals i JOIN devices d "
                               f"ON d.dev = i.dev WHERE d.device_id = '{gpu.id}'")[0]
    assert total == pytest.approx(observed_ms / 3.6e6, rel=0.01)

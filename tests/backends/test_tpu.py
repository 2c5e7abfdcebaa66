"""The TPU backend against a real gRPC server on loopback that hangs, fails or answers garbage:
the collector reports a timeout or an error with the reason, never a made-up 0, within its time
limit; and nothing of grpc is imported while no TPU chip is present."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from allsmi.backends.tpu import TpuBackend
from allsmi.collector import Collector
from tests.contract.tpu_server import TpuMetricsServer

TPU = Path(__file__).resolve().parents[2] / "fixtures" / "tpu"


def _collect(server: TpuMetricsServer, timeout: float = 1.0) -> tuple[object, float]:
    backend = TpuBackend(timeout_seconds=timeout * 0.8,
                         options={"sysfs_root": str(TPU / "v5e-4" / "sys"), "metrics_address": server.address})
    collector = Collector([backend], timeout_seconds=timeout * 2)
    started = time.monotonic()
    try:
        snap = collector.collect_once()
    finally:
        collector.close_within(2.0)
    return snap, time.monotonic() - started


@pytest.mark.parametrize(("mode", "status", "text"), [
    ("hang", "timeout", "gave no answer"),
    ("error", "error", "INTERNAL: TPU runtime is shutting down"),
    ("garbage", "error", "libtpu runtime metrics at 127.0.0.1:"),
])
def test_a_failing_metrics_service_is_reported_not_zero(mode: str, status: str, text: str) -> None:
    server = TpuMetricsServer(TPU / "metrics-v5e-4-training.json", mode)
    try:
        snap, took = _collect(server)
    finally:
        server.close()
    (state,) = snap.backends
    assert state.status == status and text in state.message, state
    assert not snap.devices, "a failing service reports no devices (no invented values)"
    assert took < 6.0


def test_a_healthy_service_answers_each_metric_once_per_sample() -> None:
    server = TpuMetricsServer(TPU / "metrics-v5e-4-training.json")
    try:
        snap, _ = _collect(server, timeout=3.0)
    finally:
        server.close()
    assert [d.utilization_percent for d in snap.devices] == [91.5, 88.25, 3.0, 0.0]
    assert sorted(set(server.calls)) == sorted(json.loads((TPU / "metrics-v5e-4-training.json").read_text()))


def test_no_grpc_is_imported_where_no_tpu_is_present() -> None:
    code = ("import sys, json\nfrom allsmi.backends.tpu import TpuBackend\n"
            f"b = TpuBackend(options={{'sysfs_root': {str(TPU / 'none' / 'sys')!r}}})\n"
            "assert b.quick_probe() is not None and not b.probe().available\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('grpc', 'google')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []

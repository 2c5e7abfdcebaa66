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


def test_a_metric_the_service_refuses_is_unknown_and_the_others_are_kept() -> None:
    """An older libtpu without the duty-cycle metric: HBM is still reported, the duty cycle is
    unknown (never 0) and the status says why."""
    server = TpuMetricsServer(TPU / "metrics-v5e-4-training.json",
                              refuse=("tpu.runtime.tensorcore.dutycycle.percent",))
    try:
        snap, _ = _collect(server, timeout=3.0)
    finally:
        server.close()
    (state,) = snap.backends
    assert state.status == "ok" and "NOT_FOUND" in state.message and "dutycycle" in state.message, state
    assert len(snap.devices) == 4
    assert all(d.utilization_percent is None and d.compute_active_percent is None for d in snap.devices)
    assert [d.memory_total_bytes for d in snap.devices] == [17179869184] * 4


def test_a_slow_service_costs_one_timeout_per_sample_not_one_per_metric() -> None:
    """Each answer takes 0.35 s and the backend's timeout is 0.8 s: the three calls share one
    deadline, so the sample ends within it with what came in time (the rest unknown, said)."""
    server = TpuMetricsServer(TPU / "metrics-v5e-4-training.json", delay=0.35)
    backend = TpuBackend(timeout_seconds=0.8, options={"sysfs_root": str(TPU / "v5e-4" / "sys"),
                                                      "metrics_address": server.address})
    try:
        backend.open()
        started = time.monotonic()
        devices = backend.sample()
        took = time.monotonic() - started
    finally:
        backend.close()
        server.close()
    assert took < 1.0, took
    assert [d.memory_total_bytes for d in devices] == [17179869184] * 4
    assert all(d.utilization_percent is None for d in devices)
    assert any("gave no answer" in w or "no time left" in w for w in backend.warnings), backend.warnings

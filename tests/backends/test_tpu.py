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
from allsmi.collection.collector import Collector
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


def _serve(tmp_path: Path, name: str, values: dict) -> TpuMetricsServer:
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return TpuMetricsServer(path)


def _sample(tree: Path, server: TpuMetricsServer | None) -> tuple[list, str]:
    """The devices and the backend's status message of one collection of ``tree``."""
    backend = TpuBackend(timeout_seconds=3.0, options={
        "sysfs_root": str(tree), "metrics_address": server.address if server else "127.0.0.1:1"})
    collector = Collector([backend], timeout_seconds=6.0)
    try:
        snap = collector.collect_once()
    finally:
        collector.close_within(2.0)
        if server is not None:
            server.close()
    (state,) = snap.backends
    ids = [d.id for d in snap.devices]
    assert len(ids) == len(set(ids)), f"device ids must be unique: {ids}"
    return list(snap.devices), state.message or ""


def _pci(tmp_path: Path, functions: dict[str, str]) -> Path:
    """A sysfs tree of Google PCI functions (address -> device id)."""
    for address, device in functions.items():
        path = tmp_path / "sys" / "bus" / "pci" / "devices" / address
        path.mkdir(parents=True)
        (path / "vendor").write_text("0x1ae0\n")
        (path / "device").write_text(device + "\n")
        (path / "subsystem_device").write_text("0x0000\n")
    return tmp_path / "sys"


GIB = 1 << 30


def test_7x_tensorcores_of_one_slot_are_one_chip_never_two() -> None:
    """A 7x chip is one PCI function per TensorCore (04.0 and 04.1, as tpu-info groups them):
    four chips, not eight, each with its two libtpu devices (2k, 2k+1), summed and averaged."""
    devices, message = _sample(TPU / "7x-4" / "sys", TpuMetricsServer(TPU / "metrics-7x-4-per-core.json"))
    assert [d.id for d in devices] == [f"tpu:0000:00:0{s}.0" for s in range(4, 8)]
    assert [d.index for d in devices] == [0, 1, 2, 3] and {d.name for d in devices} == {"Google TPU7x"}
    assert [d.memory_total_bytes for d in devices] == [192 * GIB] * 4
    assert [d.memory_used_bytes for d in devices] == [162 * GIB, 121 * GIB, 9 * GIB, 0]
    assert [d.utilization_percent for d in devices] == [92.0, 58.0, 1.0, 0.0]
    assert devices[1].details["pci_functions"] == ("0000:00:05.0", "0000:00:05.1")
    assert [d.details["device_node"] for d in devices] == ["/dev/vfio/0", "/dev/vfio/2", "/dev/vfio/4", "/dev/vfio/6"]
    assert all(d.health == "ok" for d in devices) and "ambiguous" not in message


def test_7x_duty_cycle_of_half_the_cores_is_per_core_never_read_per_chip(tmp_path: Path) -> None:
    """7x gives its duty cycle per TensorCore. An answer for devices 0-3 only (a workload on two
    of four chips) has as many values as chips, but is chips 0 and 1's cores: never chip 2's or
    chip 3's duty cycle."""
    values = json.loads((TPU / "metrics-7x-4-per-core.json").read_text())
    values[DUTY] = values[DUTY][:4]
    devices, _ = _sample(TPU / "7x-4" / "sys", _serve(tmp_path, "half.json", values))
    assert [d.utilization_percent for d in devices] == [92.0, 58.0, None, None]


def test_an_ambiguous_7x_layout_is_said_and_never_merged_or_guessed() -> None:
    """Slot 05 has one function where 04 and 06 have two: one chip per slot (never merged
    further, never split into cores), but which libtpu devices are whose is unknown, so no chip
    gets a value, and the status says why."""
    server = TpuMetricsServer(TPU / "metrics-7x-4-per-core.json")
    devices, message = _sample(TPU / "7x-mixed" / "sys", server)
    assert [d.id for d in devices] == ["tpu:0000:00:04.0", "tpu:0000:00:05.0", "tpu:0000:00:06.0"]
    assert all(d.memory_used_bytes is None and d.memory_total_bytes is None and d.utilization_percent is None
               and d.health == "unknown" for d in devices)
    assert "TPU layout ambiguous" in message and "0000:00:05: 1" in message, message


def test_chips_of_several_generations_or_an_overfull_slot_are_ambiguous(tmp_path: Path) -> None:
    from allsmi.backends.tpu.chips import find_chips
    mixed = find_chips(str(_pci(tmp_path / "a", {"0000:00:04.0": "0x0063", "0000:00:05.0": "0x005e"})
                           / "bus" / "pci" / "devices"))
    assert [c.devices for c in mixed.chips] == [None, None] and "several generations" in (mixed.problem or "")
    # a 7x chip has two TensorCores: three functions in one slot cannot be one chip; listed alone
    full = find_chips(str(_pci(tmp_path / "c", {f"0000:00:04.{f}": "0x0076" for f in range(3)})
                          / "bus" / "pci" / "devices"))
    assert [c.bus_id for c in full.chips] == ["0000:00:04.0", "0000:00:04.1", "0000:00:04.2"]
    assert all(c.devices is None for c in full.chips) and "more PCI functions" in (full.problem or "")
    # one-device generations: each function is a chip, as before
    v5e = find_chips(str(_pci(tmp_path / "d", {"0000:00:04.0": "0x0063", "0000:00:04.1": "0x0063"})
                         / "bus" / "pci" / "devices"))
    assert [(c.bus_id, c.devices) for c in v5e.chips] == [("0000:00:04.0", (0,)), ("0000:00:04.1", (1,))]
    assert v5e.problem is None


def test_a_pci_address_listed_twice_is_one_chip(tmp_path: Path) -> None:
    """Two sysfs names that differ only in case are one address: one device, said, never two
    devices under one id."""
    tree = _pci(tmp_path, {"0000:00:0A.0": "0x0063", "0000:00:0a.0": "0x0063", "0000:00:0b.0": "0x0063"})
    devices, message = _sample(tree, None)
    assert [d.id for d in devices] == ["tpu:0000:00:0a.0", "tpu:0000:00:0b.0"]
    assert "listed twice" in message, message


def test_a_libtpu_device_given_twice_or_negative_has_no_value(tmp_path: Path) -> None:
    values = json.loads((TPU / "metrics-v5e-4-training.json").read_text())
    values[USAGE] = values[USAGE] + [{"device_id": 1, "as_int": 5}, {"device_id": -2, "as_int": 7}]
    devices, message = _sample(TPU / "v5e-4" / "sys", _serve(tmp_path, "twice.json", values))
    assert devices[1].memory_used_bytes is None and devices[1].memory_total_bytes is not None
    assert all(d.memory_used_bytes is not None for d in devices if d.index != 1)
    assert "device 1 is given more than once" in message and "device id -2 is negative" in message, message


def test_metric_ids_that_no_chip_has_make_the_metric_unknown(tmp_path: Path) -> None:
    """v3 gives its duty cycle per chip (ids 0-3 for four chips): an answer for ids 0-7 is
    another layout, so no chip takes a value meant for another; HBM stays, the status says."""
    values = json.loads((TPU / "metrics-v3-4-per-core-memory.json").read_text())
    values[DUTY] = [{"device_id": d, "as_double": 10.0 * d} for d in range(8)]
    devices, message = _sample(TPU / "v3-4" / "sys", _serve(tmp_path, "per-core-duty.json", values))
    assert all(d.utilization_percent is None and d.memory_used_bytes is not None for d in devices)
    assert "[4, 5, 6, 7] that no chip has" in message, message


DUTY, USAGE = "tpu.runtime.tensorcore.dutycycle.percent", "tpu.runtime.hbm.memory.usage.bytes"


def test_refused_values_are_said_once_while_open_and_stay_unknown(tmp_path: Path) -> None:
    values = json.loads((TPU / "metrics-v5e-4-odd-values.json").read_text())
    values[USAGE] = values[USAGE] + [{"device_id": -2, "as_int": 7}]
    server = _serve(tmp_path, "odd.json", values)
    backend = TpuBackend(timeout_seconds=3.0, options={"sysfs_root": str(TPU / "v5e-4" / "sys"),
                                                      "metrics_address": server.address})
    try:
        backend.open()
        first = backend.sample()
        said = list(backend.warnings)
        second = backend.sample()
        again = list(backend.warnings)
        backend.open()
        backend.sample()
        reopened = list(backend.warnings)
    finally:
        backend.close()
        server.close()
    assert any("device id -2 is negative" in w for w in said) and any("unusable" in w for w in said), said
    assert again == [], again
    assert [d.memory_used_bytes for d in second] == [d.memory_used_bytes for d in first]
    assert first[0].memory_used_bytes is None and first[0].utilization_percent is None
    assert sorted(reopened) == sorted(said)

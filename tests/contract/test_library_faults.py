"""The fault-and-drift matrix for the library backends (AMD amdsmi, NVIDIA NVML).

Every cell runs the real ``allsmi snapshot --format json`` (and ``doctor --json`` for
a representative subset) as a subprocess over the real bindings (amdsmi, pynvml) and
fake C libraries (``tests/backends/fake_cli.py``): one backend gets the fault, the other
is healthy. Each cell asserts: exit 0 and stdout one complete JSON document; the other
backend's values exact; the failing backend's status and reason, in the snapshot and
in ``doctor``; a bounded time; nothing left running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest

from tests.backends.amd_fake import FIXTURE_DIR

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 2.0
#: Start-up, the closing grace (2 x 1 s) and a loaded two-core machine.
SLACK = 25.0

HEALTHY_NVML = {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2}]}
HEALTHY_AMD = {"fixture": "mi300x_spx"}


def _amd_machine(name: str, **top: Any) -> dict[str, Any]:
    machine = json.loads((FIXTURE_DIR / f"{name}.json").read_text())
    machine.update(top)
    return {"machine": machine}


@dataclass
class Cell:
    """One fault: the failing backend's fake, what its status must be, and extra checks."""

    name: str
    amd: dict[str, Any] | None
    nvml: dict[str, Any] | None
    status: str
    reason: str = ""
    """A text the status message must contain (lower case)."""
    devices: int | None = None
    check: Callable[[list[dict[str, Any]], dict[str, Any]], None] | None = None
    doctor: bool = False


def _amd_sentinels(devices: list[dict[str, Any]], _: dict[str, Any]) -> None:
    (dev,) = devices
    assert dev["power_watts"] is None and dev["energy_joules"] is None
    assert dev["utilization_percent"] is None and dev["clock_mhz"] is None


def _amd_oldest(devices: list[dict[str, Any]], doctor: dict[str, Any]) -> None:
    assert all("memory_partition" not in d["details"] for d in devices)
    assert [d["power_watts"] for d in devices] == [612.0, 141.0]
    if doctor:
        details = doctor["probe"]["details"]
        assert "amdsmi_get_gpu_memory_partition" in details["missing_functions"]
        assert "details.memory_partition" in details["missing_fields"]


def _amd_partitions(devices: list[dict[str, Any]], _: dict[str, Any]) -> None:
    boards = [d for d in devices if d["parent"] is None]
    assert len(boards) == 2
    assert sum(d["power_watts"] or 0 for d in devices) == 688.0 + 402.0
    assert all(d["partition_share"] == 0.125 for d in devices if d["parent"])


def _nvidia_partitions(devices: list[dict[str, Any]], _: dict[str, Any]) -> None:
    shares = [d["partition_share"] for d in devices if d["parent"]]
    assert shares == [3 / 7, 2 / 7, 1 / 7]
    assert sum(d["power_watts"] or 0 for d in devices) == pytest.approx(98.765)


def _nvidia_na(devices: list[dict[str, Any]], _: dict[str, Any]) -> None:
    assert all(d["fan_percent"] is None and d["temperature_celsius"] is None for d in devices)


def _nvidia_garbage(devices: list[dict[str, Any]], _: dict[str, Any]) -> None:
    assert all(d["utilization_percent"] is None for d in devices)


NA_SYMBOLS = ["nvmlDeviceGetFanSpeed", "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"]

CELLS: dict[str, list[Cell]] = {
    "amd": [
        Cell("missing", None, HEALTHY_NVML, "unavailable", "libamd_smi.so"),
        Cell("init-failure", _amd_machine("mi300x_spx", amdsmi_init="AMDSMI_STATUS_NO_PERM"),
             HEALTHY_NVML, "error", "permission denied", doctor=True),
        Cell("every-call-slow", {"fixture": "mi300x_spx", "latency_s": 1.0}, HEALTHY_NVML,
             "timeout", "no answer within 2 s"),
        Cell("one-call-hangs", {"fixture": "mi300x_spx", "hang": ["amdsmi_get_gpu_activity"]},
             HEALTHY_NVML, "timeout", "sample()", doctor=True),
        Cell("garbage-and-sentinels", {"fixture": "sentinels"}, HEALTHY_NVML, "ok", devices=1,
             check=_amd_sentinels),
        Cell("faulty-devices", {"fixture": "faulty"}, HEALTHY_NVML, "ok", "not answering", devices=3),
        Cell("oldest-amdsmi", {"fixture": "mi300x_spx", "missing": [
            "amdsmi_get_gpu_memory_partition", "amdsmi_get_gpu_kfd_info"]}, HEALTHY_NVML, "ok",
             "lacks", devices=2, check=_amd_oldest, doctor=True),
        Cell("newest-amdsmi", HEALTHY_AMD, HEALTHY_NVML, "ok", devices=2),
        Cell("64-devices", {"fixture": "mi300x_spx", "replicate": 64}, HEALTHY_NVML, "ok", devices=64),
        Cell("partitions-cpx", {"fixture": "mi300x_cpx"}, HEALTHY_NVML, "ok", devices=18,
             check=_amd_partitions),
    ],
    "nvidia": [
        Cell("missing", HEALTHY_AMD, {"library_missing": True}, "unavailable", "libnvidia-ml"),
        Cell("init-failure", HEALTHY_AMD, {"gpus": [], "init_error": 4}, "error", "permission",
             doctor=True),
        Cell("every-call-slow", HEALTHY_AMD,
             {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2}], "latency_s": 1.0},
             "timeout", "no answer within 2 s"),
        Cell("one-gpu-hangs", HEALTHY_AMD,
             {"gpus": [{"profile": "h100-sxm5-80gb", "count": 1, "stall_s": 3600}]},
             "timeout", "no answer", doctor=True),
        Cell("garbage", HEALTHY_AMD, {"gpus": [{"profile": "rtx-6000-ada", "count": 2, "util_gpu": 400}]},
             "ok", devices=2, check=_nvidia_garbage),
        Cell("na-fields", HEALTHY_AMD,
             {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2, "not_supported": NA_SYMBOLS}]},
             "ok", devices=2, check=_nvidia_na),
        Cell("oldest-driver-r440", HEALTHY_AMD,
             {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2}], "driver": "r440"}, "ok", devices=2),
        Cell("newest-driver", HEALTHY_AMD, HEALTHY_NVML, "ok", devices=2),
        Cell("64-devices", HEALTHY_AMD, {"gpus": [{"profile": "rtx-6000-ada", "count": 64}]},
             "ok", devices=64),
        Cell("partitions-mig", HEALTHY_AMD,
             {"gpus": [{"profile": "a100-sxm4-40gb-mig", "count": 1}]}, "ok", devices=4,
             check=_nvidia_partitions),
    ],
}


def _run(command: str, cell: Cell, tmp_path: Path) -> tuple[dict[str, Any], float, str]:
    config = tmp_path / "config.toml"
    config.write_text('[backends]\nenabled = ["amd", "nvidia"]\n')
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_AMDSMI", "FAKE_NVML")}
    env["ALLSMI_MATRIX_CELL"] = token
    if cell.amd is not None:
        env["FAKE_AMDSMI"] = json.dumps(cell.amd)
    if cell.nvml is not None:
        env["FAKE_NVML"] = json.dumps(cell.nvml)
    args = ["snapshot", "--format", "json"] if command == "snapshot" else ["doctor", "--json"]
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "tests.backends.fake_cli", *args,
                             "--config", str(config), "--timeout", str(TIMEOUT)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # one complete document, and nothing else
    assert took < TIMEOUT + SLACK, took
    # nothing left running: no process carries this cell's token any more
    for proc in psutil.process_iter():
        try:
            assert proc.environ().get("ALLSMI_MATRIX_CELL") != token, proc
        except (psutil.Error, OSError):
            continue
    return document, took, result.stderr


def _healthy_values(backend: str, devices: list[dict[str, Any]]) -> None:
    if backend == "nvidia":
        assert [d["uuid"] for d in devices] == ["GPU-00000000-1111-4222-8333-0000face0000",
                                                "GPU-00000001-1111-4222-8333-0000face0001"]
        assert [d["memory_total_bytes"] for d in devices] == [85520809984] * 2
    else:
        assert [d["bus_id"] for d in devices] == ["0000:0c:00.0", "0000:22:00.0"]
        assert [d["power_watts"] for d in devices] == [612.0, 141.0]
        assert [d["energy_joules"] for d in devices][0] == 1572864.0


@pytest.mark.parametrize("failing, cell", [(backend, cell) for backend, cells in CELLS.items()
                                           for cell in cells],
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_library_fault_matrix(failing: str, cell: Cell, tmp_path: Path) -> None:
    other = "nvidia" if failing == "amd" else "amd"
    document, _, _ = _run("snapshot", cell, tmp_path)
    status = {b["name"]: b for b in document["backends"]}
    by_backend: dict[str, list[dict[str, Any]]] = {"amd": [], "nvidia": []}
    for dev in document["devices"]:
        by_backend[dev["backend"]].append(dev)

    assert status[other]["status"] == "ok", status[other]
    _healthy_values(other, by_backend[other])

    assert status[failing]["status"] == cell.status, status[failing]
    assert cell.reason.lower() in status[failing]["message"].lower(), status[failing]
    if cell.status != "ok":
        assert status[failing]["message"] and by_backend[failing] == []
    if cell.devices is not None:
        assert len(by_backend[failing]) == cell.devices
    report: dict[str, Any] = {}
    if cell.doctor:
        doctor, _, _ = _run("doctor", cell, tmp_path)
        report = {b["name"]: b for b in doctor["backends"]}[failing]
        assert report["status"] == cell.status
        assert cell.reason.lower() in report["message"].lower()
    if cell.check is not None:
        cell.check(by_backend[failing], report)

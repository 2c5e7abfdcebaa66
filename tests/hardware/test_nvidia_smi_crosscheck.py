"""Cross-check the NVIDIA backend against ``nvidia-smi`` on a machine with a GPU.

Runs our backend and ``nvidia-smi --query-gpu`` at the same moment and
compares field by field: static fields exactly, readings within tolerances
that allow for the two tools sampling a few milliseconds apart. Skipped
where ``nvidia-smi`` is not on PATH or lists no GPU. Run with::

    .venv/bin/pytest -m hardware tests/hardware/test_nvidia_smi_crosscheck.py -v
"""

from __future__ import annotations

import csv
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from allsmi.backends._common.runner import ToolError, run_tool
from allsmi.backends.nvidia import NvidiaBackend
from allsmi.schema import DeviceSample
from allsmi.schema.units import MIB, is_missing, to_float

pytestmark = pytest.mark.hardware

QUERY_FIELDS = ("index", "uuid", "name", "pci.bus_id", "driver_version", "utilization.gpu",
                "memory.used", "memory.total", "temperature.gpu", "power.draw", "power.limit",
                "clocks.sm", "fan.speed")
ARGV_TAIL = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits")


def _cell(text: str) -> str | None:
    text = text.strip()
    # "[N/A]", "[Not Supported]", "[Unknown Error]", "[GPU requires reset]"...
    if is_missing(text) or (text.startswith("[") and text.endswith("]")):
        return None
    return text


def parse_query_gpu(output: str) -> list[dict[str, str | None]]:
    """Rows of ``nvidia-smi --query-gpu=QUERY_FIELDS --format=csv,noheader,nounits``."""
    rows = []
    for record in csv.reader(output.splitlines(), skipinitialspace=True):
        if not record:
            continue
        if len(record) != len(QUERY_FIELDS):
            raise ValueError(f"expected {len(QUERY_FIELDS)} columns, got {record!r}")
        rows.append({name: _cell(value) for name, value in zip(QUERY_FIELDS, record)})
    return rows


def _run_smi(executable: str) -> list[dict[str, str | None]]:
    result = run_tool([executable, *ARGV_TAIL], timeout=30.0)
    if result.returncode != 0:
        raise ToolError(f"nvidia-smi exited {result.returncode}: {result.stderr.strip()}")
    return parse_query_gpu(result.stdout)


def _sample_both(executable: str) -> tuple[list[DeviceSample], list[dict[str, str | None]]]:
    backend = NvidiaBackend()
    backend.open()
    try:
        backend.sample()  # first cycle learns what the driver does not support
        with ThreadPoolExecutor(max_workers=2) as pool:
            ours = pool.submit(backend.sample)
            theirs = pool.submit(_run_smi, executable)
            return list(ours.result()), theirs.result()
    finally:
        backend.close()


def _close(ours: float | None, theirs: str | None, tolerance: float, what: str,
           problems: list[str]) -> None:
    value = to_float(theirs)
    if ours is None or value is None:
        if (ours is None) != (value is None):
            problems.append(f"{what}: allsmi {ours!r}, nvidia-smi {theirs!r}")
        return
    if abs(ours - value) > tolerance:
        problems.append(f"{what}: allsmi {ours:g}, nvidia-smi {value:g} (tolerance {tolerance:g})")


def _compare(dev: DeviceSample, row: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    exact = {"index": str(dev.index), "uuid": dev.uuid, "name": dev.name,
             "driver_version": dev.driver_version}
    for key, ours in exact.items():
        if ours != row[key]:
            problems.append(f"{key}: allsmi {ours!r}, nvidia-smi {row[key]!r}")
    if (dev.bus_id or "").upper() != (row["pci.bus_id"] or "").upper():
        problems.append(f"pci.bus_id: allsmi {dev.bus_id!r}, nvidia-smi {row['pci.bus_id']!r}")
    used_mib = None if dev.memory_used_bytes is None else dev.memory_used_bytes / MIB
    total_mib = None if dev.memory_total_bytes is None else dev.memory_total_bytes / MIB
    _close(total_mib, row["memory.total"], 1.0, "memory.total MiB", problems)
    _close(used_mib, row["memory.used"], 8.0, "memory.used MiB", problems)
    # readings taken milliseconds apart: allow for what moves in that time
    _close(dev.utilization_percent, row["utilization.gpu"], 15.0, "utilization.gpu %", problems)
    _close(dev.temperature_celsius, row["temperature.gpu"], 3.0, "temperature.gpu C", problems)
    power = to_float(row["power.draw"]) or 0.0
    _close(dev.power_watts, row["power.draw"], max(5.0, 0.05 * power), "power.draw W", problems)
    _close(dev.power_limit_watts, row["power.limit"], 1.0, "power.limit W", problems)
    clock = to_float(row["clocks.sm"]) or 0.0
    _close(dev.clock_mhz, row["clocks.sm"], max(50.0, 0.1 * clock), "clocks.sm MHz", problems)
    _close(dev.fan_percent, row["fan.speed"], 5.0, "fan.speed %", problems)
    return problems


def test_parse_query_gpu_matches_the_column_list() -> None:
    """Runs without hardware too: the parser the cross-check relies on."""
    [row] = parse_query_gpu("0, GPU-1, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 550.54.15, "
                            "7, 1, 81559, 31, 70.12, 700.00, 1980, [N/A]\n")
    assert row["name"] == "NVIDIA H100 80GB HBM3" and row["fan.speed"] is None
    with pytest.raises(ValueError):
        parse_query_gpu("0, GPU-1, truncated\n")


def test_backend_matches_nvidia_smi() -> None:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        pytest.skip("nvidia-smi is not on PATH: no NVIDIA driver on this machine")
    try:
        listed = _run_smi(executable)
    except ToolError as exc:
        pytest.skip(f"nvidia-smi lists no GPU here: {exc}")
    if not listed:
        pytest.skip("nvidia-smi lists no GPU here")
    ours, theirs = _sample_both(executable)
    gpus = {dev.uuid: dev for dev in ours if dev.parent is None}
    assert set(gpus) == {row["uuid"] for row in theirs}, "the two tools see different GPUs"
    problems = []
    for row in theirs:
        problems.extend(f"GPU {row['index']} {p}" for p in _compare(gpus[row["uuid"]], row))
    assert not problems, "\n".join(problems)

"""The hardware cross-check's parser and comparison, exercised without hardware.

A stand-in ``nvidia-smi`` (a script in ``tmp_path`` on PATH) prints what the
fake NVML holds, so the cross-check must pass; printed with a unit bug, it
must fail and name the field.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.hardware import test_nvidia_smi_crosscheck as crosscheck

from .nvml_fake import FakeGpu, FakeNvml

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia" / "nvidia-smi-query-gpu.csv"


def test_fixture_parses_with_bracketed_cells_as_unknown():
    rows = crosscheck.parse_query_gpu(FIXTURE.read_text())
    assert [r["index"] for r in rows] == ["0", "1", "2", "3"]
    assert rows[0]["fan.speed"] is None and rows[0]["power.draw"] == "512.34"
    assert rows[1]["utilization.gpu"] is None
    assert rows[3]["utilization.gpu"] is None  # [Not Supported]
    assert rows[3]["memory.used"] is None      # [Unknown Error]
    assert rows[3]["power.draw"] is None       # [GPU requires reset]
    assert rows[2]["pci.bus_id"] == "00000000:28:00.0"


def _csv_row(gpu: FakeGpu, power_scale: float) -> str:
    power = (gpu.power_average_mw or gpu.power_instant_mw or 0) / 1000 * power_scale
    fan = "[N/A]" if gpu.fan is None else str(gpu.fan)
    util = "[N/A]" if gpu.util_gpu is None else str(gpu.util_gpu)
    return (f"{gpu.index}, {gpu.uuid}, {gpu.name}, {gpu.bus_id}, 550.54.15, {util}, "
            f"{gpu.memory_used // 2**20}, {gpu.memory_total // 2**20}, {gpu.temperature}, "
            f"{power:.2f}, {gpu.power_limit_mw / 1000:.2f}, {gpu.clocks['sm']}, {fan}")


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu],
              power_scale: float = 1.0) -> None:
    output = tmp_path / "query.csv"
    output.write_text("\n".join(_csv_row(g, power_scale) for g in gpus) + "\n")
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"assert sys.argv[1:] == {list(crosscheck.ARGV_TAIL)!r}, sys.argv\n"
                      f"sys.stdout.write(open({str(output)!r}).read())\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")


def _gpus() -> list[FakeGpu]:
    return [FakeGpu.from_profile("h100-sxm5-80gb", 0),
            FakeGpu.from_profile("a100-sxm4-40gb-mig", 1),
            FakeGpu.from_profile("rtx-6000-ada", 2)]


def test_crosscheck_passes_when_the_tools_agree(tmp_path, monkeypatch):
    gpus = _gpus()
    FakeNvml(gpus).install(monkeypatch)
    _stand_in(tmp_path, monkeypatch, gpus)
    crosscheck.test_backend_matches_nvidia_smi()


def test_crosscheck_catches_a_unit_bug(tmp_path, monkeypatch):
    gpus = _gpus()
    FakeNvml(gpus).install(monkeypatch)
    _stand_in(tmp_path, monkeypatch, gpus, power_scale=1000.0)
    with pytest.raises(AssertionError, match="power.draw W"):
        crosscheck.test_backend_matches_nvidia_smi()


def test_crosscheck_skips_without_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match="not on PATH"):
        crosscheck.test_backend_matches_nvidia_smi()

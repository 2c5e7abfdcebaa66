"""The fake H100 the NVIDIA tests run on, held against a real one.

``fixtures/nvidia/captures/h100-80gb-hbm3-580.159.04/`` was captured on an NVIDIA H100 80GB HBM3
with driver 580.159.04 by ``benchmarks/nvidia_hardware.py`` (see docs/hardware-validation.md):
``nvidia-smi -q -x``, and allsmi's own snapshot and exposition taken under load. The static facts
of ``profiles/h100-sxm5-80gb.json`` must be the real card's, and what allsmi printed on the real
card must still parse as today's schema with the units the fake tests assume.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from allsmi.backends.nvidia import NvidiaBackend
from allsmi.snapshot_parse import parse_snapshot
from tests.backends.nvml_fake import FakeGpu, FakeNvml

CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia" / "captures" / "h100-80gb-hbm3-580.159.04"
MIB = 2**20


def _value(root: ET.Element, path: str) -> float:
    """``"81559 MiB"``, ``"700.00 W"``, ``"1980 MHz"`` at ``path`` under the first GPU."""
    text = root.findtext(f"gpu/{path}")
    assert text is not None, path
    return float(text.split()[0])


@pytest.fixture(scope="module")
def smi() -> ET.Element:
    return ET.parse(CAPTURE / "nvidia-smi-q.xml").getroot()


def test_profile_static_facts_are_the_real_cards(smi: ET.Element, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", 0)]).install(monkeypatch)
    backend = NvidiaBackend()
    backend.open()
    try:
        [dev] = backend.sample()
    finally:
        backend.close()
    assert fake.total_calls() > 0
    assert dev.name == smi.findtext("gpu/product_name")
    assert dev.memory_total_bytes == _value(smi, "fb_memory_usage/total") * MIB
    assert dev.details["memory_reserved_bytes"] == _value(smi, "fb_memory_usage/reserved") * MIB
    assert dev.power_limit_watts == _value(smi, "gpu_power_readings/current_power_limit")
    profile = json.loads((CAPTURE.parents[1] / "profiles" / "h100-sxm5-80gb.json").read_text())
    assert profile["clocks"]["sm"] == _value(smi, "max_clocks/sm_clock")
    assert profile["clocks"]["memory"] == _value(smi, "max_clocks/mem_clock")
    assert profile["fan"] is None and smi.findtext("gpu/fan_speed") == "N/A"


def test_the_real_cards_snapshot_parses_with_the_units_the_fakes_assume(smi: ET.Element) -> None:
    snap = parse_snapshot(json.loads((CAPTURE / "snapshot-load.json").read_text()))
    [dev] = snap.devices
    assert dev.uuid == smi.findtext("gpu/uuid")
    assert dev.memory_total_bytes == _value(smi, "fb_memory_usage/total") * MIB
    assert 0 < dev.power_watts <= dev.power_limit_watts == 700.0
    assert dev.clock_mhz is not None and 200 <= dev.clock_mhz <= _value(smi, "max_clocks/sm_clock")
    # the busy process and the one at a tenth of its duty: both listed with their memory
    assert [p.memory_bytes for p in dev.processes] == [1281359872, 1281359872]
    assert dev.processes[0].utilization_percent == 97.0

"""rbln-smi's integer-kind cells (memory bytes, PCIe link width, NUMA node, location, the rblnN
index, npu, pid): a value that cannot be right is unknown with a warning said once per device,
field and value while the backend is open, never rounded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from allsmi.backends.rebellions.parse import build_samples
from allsmi.schema import DeviceSample
from tests.contract.scenario import ScenarioEnv
from tests.contract.scenarios_rebellions import backend_for

TOTAL = "16877879296"


def _row(pci: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "npu": 0, "name": "RBLN-CA22", "sid": "0000000022510001",
        "uuid": "00000000-0000-4000-8000-000000000001", "device": "rbln0", "status": "normal",
        "fw_ver": "3.0.0", "pci": {"dev": "0x1220", "bus_id": "0000:03:00.0", "numa_node": "0",
                                   "link_speed": "32.0GT/s", "link_width": "16", **(pci or {})},
        "temperature": "31C", "card_power": "17521800uW", "pstate": "P14",
        "memory": {"used": "0", "total": TOTAL}, "util": "0.0", "location": 5}
    row.update(overrides)
    return row


def _build(*rows: dict[str, Any]) -> tuple[list[DeviceSample], list[str]]:
    warnings: list[str] = []
    samples = build_samples({"KMD_version": "3.0.0", "devices": list(rows), "contexts": []},
                            backend="rebellions", vendor="rebellions", kind="npu",
                            lookup_user=lambda pid: None, lookup_nodes=lambda pid: None, warnings=warnings)
    return samples, warnings


@pytest.mark.parametrize(("memory", "used", "total"), [
    ({"used": "75497472", "total": TOTAL}, 75497472, 16877879296),
    ({"used": 75497472, "total": int(TOTAL)}, 75497472, 16877879296),     # the numeric variant
    ({"used": "2GiB", "total": TOTAL}, 2 << 30, 16877879296),             # a size with its unit
    ({"used": "75497472.6", "total": TOTAL}, None, 16877879296),          # old: 75497473
    ({"used": 75497471.5, "total": TOTAL}, None, 16877879296),            # old: 75497472
    ({"used": "0", "total": "1.6877879296e10"}, 0, None),                # old: 16877879296
])
def test_memory_bytes_are_whole(memory: dict[str, Any], used: int | None, total: int | None) -> None:
    (device,), warnings = _build(_row(memory=memory))
    assert (device.memory_used_bytes, device.memory_total_bytes) == (used, total)
    refused = [w for w in warnings if "is not a whole number of 0 or more" in w]
    assert len(refused) == (used is None) + (total is None)


@pytest.mark.parametrize(("pci", "location", "details"), [
    ({}, 5, {"pci_link_width": 16, "numa_node": 0, "location": 5}),
    ({"link_width": "3"}, 5, {"numa_node": 0, "location": 5}),              # old: width 3
    ({"link_width": 16.0, "numa_node": 1.0}, 5, {"location": 5}),          # old: None, None already
    ({"link_width": -16, "numa_node": -2}, -1, {}),                         # old: -16, -2, -1
    ({"numa_node": "-1"}, "٥", {"pci_link_width": 16}),                     # "-1": no node; old: location 5
])
def test_link_width_numa_node_and_location(pci: dict[str, Any], location: object,
                                           details: dict[str, int]) -> None:
    (device,), warnings = _build(_row(pci, location=location))
    assert {k: device.details[k] for k in ("pci_link_width", "numa_node", "location")
            if k in device.details} == details
    refused = 3 - len(details) - (pci.get("numa_node") == "-1")
    assert sum("reported as unknown" in w for w in warnings) == refused


def test_index_and_npu_are_ascii_digits() -> None:
    devices, _ = _build(_row(device="rbln٣", npu=-1),
                        _row(uuid="u2", sid="0000000022510002", device="rbln2", npu="２"))
    # old: index 3 from "rbln٣", npu -1, and "２" read as npu 2
    assert {d.uuid: (d.index, d.details.get("npu")) for d in devices} == {
        "00000000-0000-4000-8000-000000000001": (None, None), "u2": (2, "２")}


def test_backend_says_each_refusal_once_while_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps({"KMD_version": "3.0.0", "contexts": [],
                       "devices": [_row({"link_width": "12"}, memory={"used": "-1", "total": TOTAL})]})
    backend = backend_for(ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch), text=text)
    backend.open()

    def refused() -> list[str]:
        return [w for w in backend.warnings if "reported as unknown" in w]

    (device,) = backend.sample()
    assert device.memory_used_bytes is None and "pci_link_width" not in device.details
    assert len(refused()) == 2
    backend.sample()
    assert refused() == []
    backend.close()
    backend.open()
    backend.sample()
    assert len(refused()) == 2

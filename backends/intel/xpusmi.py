"""``xpu-smi discovery -j``: Intel XPU Manager's device list, for what sysfs lacks.

``{"device_list": [{"device_id": 0, "device_name": "Intel(R) Data Center GPU Flex Series 170",
"pci_bdf_address": "0000:4d:00.0", "pci_device_id": "56c0", "uuid": "...",
"memory_physical_size_byte": "17102532608", "memory_free_size_byte": "...", ...}]}``; the sizes
are strings on some builds and numbers on others. Keyed by PCI address; virtual functions are
left out (they are not the physical GPUs sysfs lists).
"""

from __future__ import annotations

from dataclasses import dataclass

from allsmi.backends._common.cells import int_cell, shorten, text_of
from allsmi.backends._common.jsonout import read_json


@dataclass(frozen=True)
class XpuDevice:
    name: str | None
    uuid: str | None
    memory_total_bytes: int | None
    memory_free_bytes: int | None


def parse_discovery(text: str, tool: str, warnings: list[str]) -> dict[str, XpuDevice]:
    data, notes = read_json(text, tool, find=lambda v: isinstance(v, dict) and "device_list" in v)
    warnings.extend(notes)
    if not isinstance(data, dict) or not isinstance(data.get("device_list"), list):
        raise ValueError(f"{tool} printed no device_list: {shorten(text)!r}")
    out = {}
    for row in data["device_list"]:
        if not isinstance(row, dict):
            warnings.append(f"{tool}: a device row that is not an object: {shorten(row)!r}; skipped")
            continue
        if text_of(row.get("device_function_type")) == "virtual":
            continue
        bus = (text_of(row.get("pci_bdf_address")) or "").lower()
        if not bus:
            warnings.append(f"{tool}: a device without pci_bdf_address: {shorten(row)!r}; skipped")
            continue
        total, free = int_cell(row.get("memory_physical_size_byte")), int_cell(row.get("memory_free_size_byte"))
        out[bus] = XpuDevice(name=text_of(row.get("device_name")) or None,
                             uuid=text_of(row.get("uuid")) or None,
                             memory_total_bytes=total if total and total > 0 else None,
                             memory_free_bytes=free if free is not None and free >= 0 else None)
    return out

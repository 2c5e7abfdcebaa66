"""Intel XPU Manager's ``xpu-smi``, for what sysfs lacks: three calls and their outputs.

* ``xpu-smi discovery -j``, the device list: ``{"device_list": [{"device_id": 0,
  "device_name": "Intel(R) Data Center GPU Flex Series 170", "device_type": "GPU",
  "device_function_type": "physical", "pci_bdf_address": "0000:4d:00.0", "pci_device_id":
  "0x56c0", "uuid": "...", "vendor_name": "...", "drm_device": "/dev/dri/card0"}]}``: names,
  uuids and xpu-smi's device ids, keyed by PCI address. No memory figure (those are in the
  per-device properties). Virtual functions are left out (they are not the physical GPUs sysfs
  lists).
* ``xpu-smi discovery -d <bdf> -j``, one device's properties: ``memory_physical_size_byte``
  among them, a string of bytes (``"17179869184"``). A size, so read once per GPU.
* ``xpu-smi dump -d -1 -m 18 -i 1``, metric 18 of every device, as CSV: its header once, then
  a row per device every second for as long as it runs (read line by line as it comes:
  :mod:`allsmi.backends.intel.dumpstream`)::

      Timestamp, DeviceId, GPU Memory Used (MiB)
      06:14:46.000,    0, 2332.47

  MiB with two decimals (``N/A`` where unknown); the ``DeviceId`` is the list's ``device_id``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from allsmi.schema import units
from allsmi.backends._common.cells import index_key, int_cell, shorten, text_of
from allsmi.backends._common.jsonout import read_json

#: The dump's column of metric 18, with its unit (the header says MiB: converted here).
MEMORY_USED_COLUMN = "GPU Memory Used (MiB)"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class XpuDevice:
    device_id: int | str | None
    """xpu-smi's own device number (the dump's ``DeviceId``)."""
    name: str | None
    uuid: str | None


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
        out[bus] = XpuDevice(device_id=index_key(row.get("device_id")),
                             name=text_of(row.get("device_name")) or None,
                             uuid=text_of(row.get("uuid")) or None)
    return out


def parse_properties(text: str, tool: str) -> int | None:
    """``memory_physical_size_byte`` of one device's properties, in bytes (``None`` where the
    build prints none, or 0)."""
    data, _ = read_json(text, tool, find=lambda v: isinstance(v, dict) and (
        "memory_physical_size_byte" in v or "device_id" in v))
    if not isinstance(data, dict):
        raise ValueError(f"{tool} printed no device properties: {shorten(text)!r}")
    if "error" in data:
        raise ValueError(f"{tool} said: {shorten(data['error'])}")
    size = int_cell(data.get("memory_physical_size_byte"))
    return size if size else None


def clean_line(line: str) -> str:
    """A dump line without terminal colour codes and surrounding blanks."""
    return _ANSI.sub("", line).strip()


def dump_header(line: str) -> tuple[int, int, int] | None:
    """The dump's header line as ``(columns, DeviceId's column, GPU Memory Used (MiB)'s
    column)``; ``None`` for any other line (a header naming another unit among them)."""
    cells = [cell.strip() for cell in clean_line(line).split(",")]
    if "DeviceId" not in cells or MEMORY_USED_COLUMN not in cells:
        return None
    return len(cells), cells.index("DeviceId"), cells.index(MEMORY_USED_COLUMN)


def dump_row(line: str, header: tuple[int, int, int]) -> tuple[int, int | None]:
    """One row under ``header``: (xpu-smi's device id, bytes in use, ``None`` for ``N/A``).
    ``ValueError`` for a line that is no such row (an ``Error: ...`` line, a cut or garbled one)."""
    cells = [cell.strip() for cell in clean_line(line).split(",")]
    columns, device_at, used_at = header
    if len(cells) != columns:
        raise ValueError("not a row of its table")
    device, raw = units.to_int(cells[device_at]), cells[used_at]
    mib = units.to_float(raw)
    if device is None or (mib is None and not units.is_missing(raw)) or (mib is not None and mib < 0):
        raise ValueError("no device id and memory in use")
    return device, units.mib_to_bytes(mib) if mib is not None else None

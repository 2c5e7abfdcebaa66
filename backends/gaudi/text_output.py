"""hl-smi's text reports: the ``-L`` device listing and the default table view.

``-Q`` has no field for firmware versions or processes; the listing carries
``Firmware [SPI] Version`` per device and the table view ends with a
"Compute Processes" section. Both parsers are tolerant: lines they do not
understand are ignored, since these reports are for humans and change between
releases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from allsmi.schema import units
from allsmi.backends._common.cells import shorten
from allsmi.schema import ProcessSample

_BLOCK = re.compile(r"^\[([0-9]+)\]\s+AIP\b.*?\s((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*$")
_KEY_VALUE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")
_PREBOOT = re.compile(r"^(?:Preboot version\s+)?(\S+)")


@dataclass(frozen=True)
class ListedDevice:
    """What ``hl-smi -L`` says about one device."""

    index: int
    bus_id: str
    uuid: str | None = None
    firmware_spi: str | None = None
    firmware_os: str | None = None


def _firmware_version(text: str) -> str | None:
    """``hl-gaudi2-1.12.1-fw-46.0.5-sec-6`` from ``Preboot version hl-gaudi2-... (Oct 12 2023 - ...)``."""
    if units.is_missing(text):
        return None
    match = _PREBOOT.match(text.strip())
    return match.group(1) if match else None


def parse_listing(text: str) -> list[ListedDevice]:
    """Devices in the output of ``hl-smi -L``, in the order printed."""
    devices: list[ListedDevice] = []
    current: dict[str, str | int | None] | None = None

    def flush() -> None:
        if current is not None:
            devices.append(ListedDevice(**current))  # type: ignore[arg-type]

    for line in text.splitlines():
        header = _BLOCK.match(line.strip())
        if header:
            flush()
            current = {"index": int(header.group(1)), "bus_id": header.group(2),
                       "uuid": None, "firmware_spi": None, "firmware_os": None}
            continue
        if current is None:
            continue
        pair = _KEY_VALUE.match(line)
        if not pair:
            continue
        key, value = pair.group(1), pair.group(2)
        if key == "AIP UUID" and not units.is_missing(value):
            current["uuid"] = value
        elif key == "Firmware [SPI] Version":
            current["firmware_spi"] = _firmware_version(value)
        elif key == "Firmware [OS] Version":
            current["firmware_os"] = value or None
    flush()
    return devices


_UNIT_TOKENS = {"b", "kb", "kib", "mb", "mib", "gb", "gib"}


#: A cell that reads as a number (so a refused AIP or PID is said, not taken for a header).
_NUMBER = re.compile(r"[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?")


def _refused(aip: str, pid: str) -> str | None:
    """Why a process row's AIP index or PID cannot be right (a number, but not a whole one of
    0 or more, or a PID of 0); ``None`` when the cells are no numbers at all (a header, N/A)."""
    if _NUMBER.fullmatch(aip) and units.to_int(aip) is None:
        return f"AIP {shorten(repr(aip), 40)}, not a whole number of 0 or more"
    if _NUMBER.fullmatch(pid) and not units.to_int(pid):
        return f"PID {shorten(repr(pid), 40)}, not a whole number of 1 or more"
    return None


def parse_processes(text: str, warnings: list[str] | None = None) -> dict[int, list[ProcessSample]]:
    """Processes per AIP index from the "Compute Processes" section of the table view.

    Rows read ``| AIP PID Type Process-name Usage |``; idle devices print
    ``N/A`` in every column and yield nothing. Memory is in MiB unless the
    cell names its unit. A pid listed twice on one device is kept once (the
    larger memory wins). An AIP index or PID that is a number but not a whole one of at
    least 0 (at least 1 for a PID), or a negative memory figure, cannot be right: that row
    (or its memory) is skipped with a line in ``warnings``, never rounded.
    """
    found: dict[int, dict[int, ProcessSample]] = {}
    in_section = False
    for line in text.splitlines():
        stripped = line.strip()
        if "Compute Processes" in stripped:
            in_section = True
            continue
        if not in_section or not stripped.startswith("|"):
            continue
        tokens = stripped.strip("|").split()
        if len(tokens) < 4:
            continue
        aip, pid = units.to_int(tokens[0]), units.to_int(tokens[1])
        if aip is None or not pid:
            refused = _refused(tokens[0], tokens[1])
            if refused and warnings is not None:
                warnings.append(f"process row with {refused}: {shorten(stripped)!r}; skipped")
            continue
        rest = tokens[3:]
        if len(rest) >= 2 and rest[-1].lower() in _UNIT_TOKENS:
            usage, name_tokens = rest[-2] + rest[-1], rest[:-2]
        else:
            usage, name_tokens = rest[-1], rest[:-1]
        memory = units.parse_size_bytes(usage, default_unit="mib")
        if memory is not None and memory < 0:
            if warnings is not None:
                warnings.append(f"AIP {aip} pid {pid}: negative memory {shorten(repr(usage), 40)}; "
                                "reported as unknown")
            memory = None
        elif memory is None and not units.is_missing(usage) and warnings is not None:
            # present but no size ("12 parsecs", "1e999"): unknown, and said, not silently dropped
            warnings.append(f"AIP {aip} pid {pid}: unreadable memory {shorten(repr(usage), 40)}; "
                            "reported as unknown")
        command = " ".join(name_tokens) or None
        if command is not None and units.is_missing(command):
            command = None
        sample = ProcessSample(pid=pid, command=command, memory_bytes=memory)
        per_device = found.setdefault(aip, {})
        previous = per_device.get(pid)
        if previous is None or (memory or 0) > (previous.memory_bytes or 0):
            per_device[pid] = sample
    return {aip: list(procs.values()) for aip, procs in found.items()}

"""Parsers for ``furiosa-smi info|status|ps --format json`` output.

The parsers are pure: they take decoded JSON and return :class:`FuriosaReading`
records (or process rows) plus human-readable warnings for rows they had to
skip. Values arrive as strings with units ("38.00 W", "41.33°C") and are
converted with :mod:`allsmi.schema.units`; anything unparseable becomes ``None``.
Integer-kind values (a PE core number, DRAM bytes, a PID) are whole numbers or
nothing: ``-1`` or ``3.7`` is refused with a warning said once per device, field
and value while the backend is open (``said``), never rounded.

Rows are joined by the ``npuN`` label, which is consistent within one sample
but re-enumerates across boots, so it is never used as a device id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from allsmi.schema import units
from allsmi.backends._common.cells import CellReader, SaidOnce, shorten, whole_cell
from allsmi.backends._common.jsonout import read_json

_NPU_LABEL = re.compile(r"npu[0-9]+")  # not \d: it takes digits of other scripts too


@dataclass
class FuriosaReading:
    """Everything read about one RNGD device in one sample, in schema units."""

    dev_name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    arch: str | None = None
    product_name: str | None = None
    bus_id: str | None = None
    firmware: str | None = None
    pert: str | None = None
    governor: str | None = None
    temperature_celsius: float | None = None
    ambient_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    clock_mhz: float | None = None
    alive: bool | None = None
    unread: bool = False
    """Listed by ``info`` but without a row in this sample's ``status`` (reported degraded)."""
    core_utilization: tuple[float | None, ...] | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    throttle_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StatusRow:
    """One element of ``status --format json``: liveness, PE utilization, DRAM."""

    alive: bool | None
    core_utilization: tuple[float | None, ...] | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


@dataclass(frozen=True)
class ProcessRow:
    """One process from ``ps --format json``, already split per device label."""

    pid: int
    command: str | None
    memory_bytes: int | None


#: Keys under which some builds wrap the row list (see :func:`_rows`).
_WRAPPERS = ("devices", "device_info", "info", "status", "ps")


def _is_document(value: Any) -> bool:
    """What ``info``/``status``/``ps`` print: a list of rows, or an object wrapping one."""
    return isinstance(value, list) or (
        isinstance(value, dict) and any(isinstance(value.get(k), list) for k in _WRAPPERS))


def load_json(text: str, tool: str = "furiosa-smi", notes: list[str] | None = None) -> Any:
    """Decode ``tool``'s stdout as JSON; :class:`ValueError` says what was wrong (nothing,
    truncated, not JSON), naming ``tool``. A line the tool prints around its document (a
    ``WARN:`` banner, a log line) is ignored, with a note appended to ``notes``."""
    data, said = read_json(text, tool, find=_is_document)
    if notes is not None:
        notes.extend(said)
    return data


def text_or_none(value: object) -> str | None:
    """A stripped string, or ``None`` for missing spellings and non-strings."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or units.is_missing(value):
        return None
    return value.strip()


def _rows(data: Any, what: str) -> list[Any]:
    # Some builds wrap the list in {"devices": [...]}; accept both shapes.
    if isinstance(data, dict):
        for key in (*_WRAPPERS[:2], what):
            if isinstance(data.get(key), list):
                return list(data[key])
    if isinstance(data, list):
        return data
    raise ValueError(f"expected a JSON list from furiosa-smi {what}, got {type(data).__name__}")


def parse_info(data: Any) -> tuple[list[FuriosaReading], list[str]]:
    """Readings from ``info --format json``; rows without any identity are skipped."""
    readings: list[FuriosaReading] = []
    warnings: list[str] = []
    for position, row in enumerate(_rows(data, "info")):
        if not isinstance(row, dict):
            warnings.append(f"furiosa-smi info row {position} is not an object; skipped")
            continue
        reading = FuriosaReading(
            dev_name=text_or_none(row.get("dev_name") or row.get("device")),
            uuid=text_or_none(row.get("device_uuid") or row.get("uuid")),
            serial=text_or_none(row.get("device_sn") or row.get("serial")),
            arch=text_or_none(row.get("arch")),
            bus_id=text_or_none(row.get("pci_bdf") or row.get("bdf")),
            firmware=text_or_none(row.get("firmware")),
            pert=text_or_none(row.get("pert")),
            governor=text_or_none(row.get("governor")),
            temperature_celsius=units.parse_temperature_celsius(row.get("temperature")),
            power_watts=units.parse_power_watts(row.get("power")),
            power_limit_watts=units.parse_power_watts(row.get("power_limit")),
            clock_mhz=units.parse_clock_mhz(row.get("core_clock")),
        )
        pci_dev = text_or_none(row.get("pci_dev"))
        if pci_dev:
            reading.extra["pci_dev"] = pci_dev
        if not (reading.uuid or reading.serial or reading.bus_id):
            warnings.append(f"furiosa-smi info row {position} ({reading.dev_name or 'unnamed'}) "
                            "has no device_uuid, device_sn or pci_bdf; skipped")
            continue
        # present but unreadable: a warning (the range is checked on every source's readings)
        cells = CellReader(str(reading.dev_name or position), warnings)
        for label, raw, value in (("temperature", row.get("temperature"), reading.temperature_celsius),
                                  ("power", row.get("power"), reading.power_watts),
                                  ("core_clock", row.get("core_clock"), reading.clock_mhz)):
            cells.measure(raw, value, label)
        readings.append(reading)
    return readings, warnings


def _liveness(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    text = text_or_none(value)
    if text is None:
        return None
    return text.lower() in ("alive", "true", "ok", "up")


def _core_index(entry: dict[str, Any], fallback: int, label: str, warnings: list[str],
                said: SaidOnce | None) -> int:
    """The PE's core number (0 or more), else its place in the list."""
    for key in ("pe_core", "core", "idx"):
        number = whole_cell(entry.get(key), label, f"PE {fallback} {key}", warnings, said)
        if number is not None:
            return number
    return fallback


def parse_status(data: Any, said: SaidOnce | None = None) -> tuple[dict[str, StatusRow], list[str]]:
    """Per ``npuN`` label: liveness, per-PE utilization (percent) and DRAM bytes."""
    found: dict[str, StatusRow] = {}
    warnings: list[str] = []
    for position, row in enumerate(_rows(data, "status")):
        if not isinstance(row, dict):
            warnings.append(f"furiosa-smi status row {position} is not an object; skipped")
            continue
        label = text_or_none(row.get("device") or row.get("dev_name"))
        if label is None:
            warnings.append(f"furiosa-smi status row {position} has no device label; skipped")
            continue
        cores: tuple[float | None, ...] | None = None
        entries = row.get("pe_utilizations")
        if isinstance(entries, list):
            indexed: list[tuple[int, float | None]] = []
            for n, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    warnings.append(f"{label}: PE entry {n} is not an object; ignored")
                    continue
                # RNGD spells it pe_utilization, Warboy-era tools utilization.
                raw = entry.get("pe_utilization", entry.get("utilization"))
                value = units.parse_percent(raw)
                if value is None and not units.is_missing(raw):
                    warnings.append(f"{label}: PE {n} utilization {raw!r} is not a percentage")
                indexed.append((_core_index(entry, n, label, warnings, said), value))
            cores = tuple(v for _, v in sorted(indexed, key=lambda item: item[0]))
        used = total = None
        memory = row.get("memory")
        dram = memory.get("DRAM", memory.get("dram")) if isinstance(memory, dict) else None
        if isinstance(dram, dict):
            used = whole_cell(dram.get("used_size"), label, "DRAM used_size", warnings, said)
            total = whole_cell(dram.get("total_size"), label, "DRAM total_size", warnings, said)
            if used is not None and total is not None and (used < 0 or total <= 0 or used > total):
                warnings.append(f"{label}: implausible DRAM usage {used}/{total} bytes; ignored")
                used = total = None
        found[label] = StatusRow(alive=_liveness(row.get("liveness")), core_utilization=cores,
                                 memory_used_bytes=used, memory_total_bytes=total)
    return found, warnings


def device_labels(text: object) -> list[str]:
    """``npuN`` labels in a ps cell: "npu4:[0, 7], npu5:[0, 7]", "npu0pe0-1" or "npu0"."""
    if not isinstance(text, str):
        return []
    labels: list[str] = []
    for label in _NPU_LABEL.findall(text):
        if label not in labels:
            labels.append(label)
    return labels


def parse_ps(data: Any, said: SaidOnce | None = None) -> tuple[dict[str, list[ProcessRow]], list[str]]:
    """Processes per ``npuN`` label; a process spanning devices appears under each. A row
    without a PID of 1 or more or a device label is skipped with a warning (said once per
    printed pid and device cell through ``said``)."""
    found: dict[str, list[ProcessRow]] = {}
    warnings: list[str] = []
    for position, row in enumerate(_rows(data, "ps")):
        if not isinstance(row, dict):
            warnings.append(f"furiosa-smi ps row {position} is not an object; skipped")
            continue
        raw_pid, cell = row.get("pid"), row.get("dev_name", row.get("npu"))
        pid = units.to_int(raw_pid, minimum=1)
        labels = device_labels(cell)
        if pid is None or not labels:
            warning = (f"furiosa-smi ps row {position} has no usable pid/device "
                       f"(pid {shorten(repr(raw_pid), 40)}, device {shorten(repr(cell), 40)}); skipped")
            (said or SaidOnce()).say(warnings, ("furiosa-smi ps", repr(raw_pid), repr(cell)), warning)
            continue
        command = text_or_none(row.get("cmdline", row.get("cmd")))
        # Warboy-era rows carry memory; RNGD rows do not (None, never 0).
        raw_memory = row.get("memory")
        memory = units.parse_size_bytes(raw_memory)
        if memory is not None and memory < 0:  # a size is never negative: unknown, not -512 MiB
            (said or SaidOnce()).say(warnings, ("furiosa-smi ps", repr(raw_pid), repr(raw_memory)),
                                     f"furiosa-smi ps pid {pid}: memory {shorten(repr(raw_memory), 40)} "
                                     "is negative; reported as unknown")
            memory = None
        elif memory is None and not units.is_missing(raw_memory) and raw_memory is not None:
            # present but no size ("1e999", "12 parsecs"): unknown, and said, not silently dropped
            (said or SaidOnce()).say(warnings, ("furiosa-smi ps", repr(raw_pid), repr(raw_memory)),
                                     f"furiosa-smi ps pid {pid}: unreadable memory "
                                     f"{shorten(repr(raw_memory), 40)}; reported as unknown")
        for label in labels:
            found.setdefault(label, []).append(ProcessRow(pid=pid, command=command, memory_bytes=memory))
    return found, warnings


def apply_status(reading: FuriosaReading, status: StatusRow | None) -> None:
    """Merge a status row into a reading from ``info``."""
    if status is None:
        return
    reading.alive = status.alive
    reading.core_utilization = status.core_utilization
    reading.memory_used_bytes = status.memory_used_bytes
    reading.memory_total_bytes = status.memory_total_bytes

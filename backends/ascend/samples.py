"""Ascend chips as :class:`DeviceSample`: one sample per chip of the ``npu-smi info`` table.

``AICore(%)`` is the utilization (and ``compute_active_percent`` with source ``core_busy``: the
share of time the AI Cores computed); memory is the ``HBM-Usage(MB)`` pair where the table has
it (Ascend 910: the accelerator's HBM; ``Memory-Usage`` there is the on-board control CPU's
DDR), else ``Memory-Usage(MB)`` (Ascend 310/310P: the device memory), in MiB. ``Health``
``OK`` is ``ok``; ``Warning``, ``Alarm`` and ``Critical`` are faults (``degraded``); anything
else ``unknown``.
"""

from __future__ import annotations

from typing import Callable

from allsmi.schema import units
from allsmi.backends._common.cells import CellReader
from allsmi.schema import DeviceSample, ProcessSample

from .parse import Chip, NpuTable

LookupUser = Callable[[int], "str | None"]

HEALTH = {"ok": "ok", "warning": "degraded", "alarm": "degraded", "critical": "degraded",
          "error": "degraded"}


def _bus_id(text: str | None) -> str | None:
    if not text or units.is_missing(text):
        return None
    parts = text.lower().split(":")
    if len(parts) == 3 and "." in parts[2]:
        return f"{parts[0][-4:].zfill(4)}:{parts[1].zfill(2)}:{parts[2]}"
    return None


def _pair(raw: str | None, read: CellReader, what: str) -> tuple[int | None, int | None]:
    """``"1365/32768"`` (MiB) -> bytes used, bytes total."""
    if raw is None or units.is_missing(raw):
        return None, None
    used, sep, total = raw.partition("/")
    if not sep:
        read.measure(raw, None, what)
        return None, None
    out = []
    for part, name in ((used, f"{what} used"), (total, f"{what} total")):
        value = units.mib_to_bytes(part) if units.to_int(part) is not None else None
        out.append(read.measure(part, value, name, minimum=0))
    used_b, total_b = (None if v is None else int(v) for v in out)
    if total_b == 0:  # a 0 total: the table has no such memory
        return None, None
    if used_b is not None and total_b is not None and used_b > total_b:
        read.warnings.append(f"{read.label}: {what} used above total ({raw!r}); reported as unknown")
        return None, total_b
    return used_b, total_b


def chip_sample(chip: Chip, table: NpuTable, *, index: int, backend: str, vendor: str, kind: str,
                model_name: Callable[[str | None], str | None], lookup_user: LookupUser,
                warnings: list[str], source: str) -> DeviceSample:
    cells = chip.cells
    read = CellReader(f"NPU {chip.npu} chip {chip.chip}", warnings)
    power = cells.get("Power(W)")
    temperature = cells.get("Temp(C)")
    aicore = cells.get("AICore(%)")
    utilization = read.measure(aicore, units.parse_percent(aicore), "AICore", "utilization_percent")
    if "HBM-Usage(MB)" in cells:
        used, total = _pair(cells["HBM-Usage(MB)"], read, "HBM")
    else:
        used, total = _pair(cells.get("Memory-Usage(MB)"), read, "memory")
    bus = _bus_id(cells.get("Bus-Id"))
    processes: tuple[ProcessSample, ...] | None = None
    if table.processes is not None:
        rows = [p for p in table.processes if (p.npu, p.chip) == (chip.npu, chip.chip)]
        merged: dict[int, ProcessSample] = {}
        for p in rows:
            memory = units.mib_to_bytes(p.memory_mib) if units.to_int(p.memory_mib) is not None else None
            if p.pid in merged:
                prior = merged[p.pid].memory_bytes
                memory = None if prior is None or memory is None else prior + memory
            merged[p.pid] = ProcessSample(pid=p.pid, user=lookup_user(p.pid), command=p.name,
                                          memory_bytes=memory)
        processes = tuple(merged.values())
    health = HEALTH.get(cells.get("Health", "").lower(), "unknown")
    details: dict[str, object] = {"npu_id": chip.npu, "chip_id": chip.chip}
    return DeviceSample(
        id=f"ascend:{bus}" if bus else f"ascend:{chip.npu}:{chip.chip}", vendor=vendor, kind=kind,
        backend=backend, index=index, name=model_name(cells.get("Name")), bus_id=bus,
        driver_version=table.version, health=health,
        utilization_percent=utilization, compute_active_percent=utilization,
        compute_active_source=source if utilization is not None else None,
        memory_used_bytes=used, memory_total_bytes=total,
        temperature_celsius=read.measure(temperature, units.parse_temperature_celsius(temperature),
                                         "temperature", "temperature_celsius"),
        power_watts=read.measure(power, units.parse_power_watts(power), "power", "power_watts"),
        processes=processes, details=details)


#: The chip row's cell holding the number of its ``/dev/davinci<N>``: ``Device`` (310P, 910
#: tables) or ``Phy-ID`` (A3 tables, two chips per NPU; npu-smi 25 spells it ``Phy-Id``), in
#: lower case: the header is matched without regard to case.
DEVICE_NUMBER_CELLS = ("device", "phy-id")


def build_samples(table: NpuTable, **kwargs: object) -> list[DeviceSample]:
    seen: set[tuple[int, int]] = set()
    chips = []
    for chip in table.chips:
        if (chip.npu, chip.chip) in seen:
            kwargs["warnings"].append(  # type: ignore[attr-defined]
                f"NPU {chip.npu} chip {chip.chip} listed twice; the second skipped")
            continue
        seen.add((chip.npu, chip.chip))
        chips.append(chip)
    indices = device_numbers(chips)
    if table.processes is not None:
        from allsmi.backends._common.orphans import note_unmatched
        rows: dict[object, int] = {}
        for p in table.processes:
            rows[f"NPU {p.npu} chip {p.chip}"] = rows.get(f"NPU {p.npu} chip {p.chip}", 0) + 1
        note_unmatched(rows, {f"NPU {c.npu} chip {c.chip}" for c in chips},
                       kwargs["warnings"], "npu-smi info", rows)  # type: ignore[arg-type]
    return [chip_sample(chip, table, index=index, **kwargs)  # type: ignore[arg-type]
            for chip, index in zip(chips, indices)]


def device_numbers(chips: list[Chip]) -> list[int]:
    """Each chip's ``/dev/davinci<N>`` number: its ``Device`` or ``Phy-ID`` cell; without one,
    its NPU's id where every NPU has one chip, else its place in the table (the driver numbers
    chips in the order npu-smi lists them), so that two chips of one NPU never share a number."""
    numbers = []
    for chip in chips:
        cell = next((value for key in DEVICE_NUMBER_CELLS for name, value in chip.cells.items()
                     if name.lower() == key), "")
        numbers.append(units.to_int(cell))
    if all(n is not None for n in numbers) and len(set(numbers)) == len(numbers):
        return numbers  # type: ignore[return-value]
    if len({chip.npu for chip in chips}) == len(chips):
        return [chip.npu for chip in chips]
    return list(range(len(chips)))

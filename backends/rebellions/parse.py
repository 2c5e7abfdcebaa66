"""Turning ``rbln-smi -j`` / ``rbln-stat -j`` JSON into :class:`DeviceSample` objects.

Pure functions: the only outside facts they use (who owns a pid, which
``/dev/rblnN`` nodes a pid holds open) come in as callables, so every branch is
testable from fixture text alone.

Shape of the report (KMD 3.0.0; see ``fixtures/rebellions/README.md``)::

    {"KMD_version": "3.0.0",
     "devices": [{"npu": 0, "name": "RBLN-CA22", "sid": "...", "uuid": "...",
                  "device": "rbln0", "status": "normal", "fw_ver": "3.0.0",
                  "pci": {"dev": "0x1220", "bus_id": "0000:03:00.0", ...},
                  "temperature": "31C", "card_power": "17521800uW",
                  "pstate": "P14", "memory": {"used": "75497472", "total": "16877879296"},
                  "util": "4.4", "board_info": "0005000c", "location": 5}, ...],
     "contexts": [{"ctx_id": "10001", "npu": 0, "process": "VLLM::EngineCore",
                   "pid": "2733390", "memalloc": "3.5GiB", ...}, ...]}

Units as printed: temperature ``"31C"``, card power in microwatts with a
``uW`` suffix, memory as decimal strings of bytes, process memory as human
sizes (``"3.5GiB"``). Integer-kind cells (memory bytes, ``pci.link_width``,
``pci.numa_node``, ``location``) are whole numbers or nothing: ``"3.7"`` or a
width of 3 is refused with a warning said once per device, field and value while
the backend is open (``said``), never rounded; a ``numa_node`` of ``-1`` is the
kernel's "no node", unknown without one. ATOM Max (RBLN-CA25) prints one row per die; the dies of
a card share ``sid`` and repeat the card's power, which is therefore reported
once, on a parent device per card.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from allsmi.schema import units
from allsmi.backends._common.activity import engine_time
from allsmi.backends._common.cells import (PCIE_WIDTHS, CellReader, SaidOnce, index_key, shorten, text_of,
                                           whole_cell)
from allsmi.backends._common.jsonout import JsonOutputError, read_json
from allsmi.schema import DetailValue, DeviceSample, ProcessSample

from .processes import LookupNodes, LookupUser, attribute_contexts

#: Card names the vendor documents, and the product each belongs to
#: (docs.rbln.ai support matrix: CA02 is ATOM, CA12/CA22 ATOM+, CA25 ATOM Max).
PRODUCTS: dict[str, str] = {
    "RBLN-CA02": "ATOM",
    "RBLN-CA12": "ATOM+",
    "RBLN-CA22": "ATOM+",
    "RBLN-CA25": "ATOM Max",
}

#: Cards whose rows are dies of one board, with the dies a full card has.
MULTI_DIE_MODELS: dict[str, int] = {"RBLN-CA25": 4}

#: PCI device ids of SR-IOV virtual functions (the physical function of ATOM+ is 0x1220).
_VIRTUAL_FUNCTION_IDS = frozenset({"0x1221"})

#: ``pstate`` P12 is the vendor's "system abort" (hung device) state.
_FAULT_PSTATES = frozenset({"P12"})

_KERNEL_NAME = re.compile(r"^rbln([0-9]+)\Z")  # not \d: it takes digits of other scripts too
#: How much of the tool's text a message quotes.
PREVIEW_CHARS = 120



class ReportError(ValueError):
    """The tool's output holds no usable report; the message says why."""


def _is_report(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("devices"), list)


def load_report(text: str, tool: str) -> tuple[dict[str, Any], list[str]]:
    """Parse the tool's stdout into its top-level object.

    Returns the object and notes for :attr:`Backend.warnings` (text printed
    around the JSON, such as a deprecation banner, is ignored with a note).
    Raises :class:`ReportError` for empty, non-JSON or truncated output, or
    JSON without a ``devices`` list.
    """
    try:
        data, notes = read_json(text, tool, find=_is_report)
    except JsonOutputError as exc:
        raise ReportError(str(exc)) from None
    if not isinstance(data, dict):
        raise ReportError(f"{tool} printed JSON {type(data).__name__}, not an object: "
                          f"{shorten(text, PREVIEW_CHARS)!r}")
    if not isinstance(data.get("devices"), list):
        raise ReportError(f"{tool} JSON has no 'devices' list (keys: {', '.join(map(str, data)) or 'none'})")
    return data, notes


@dataclass
class _Die:
    """One parsed device row: a single-die card, or one die of a multi-die card."""

    position: int
    id: str
    label: str
    uuid: str | None
    sid: str | None
    kernel_name: str | None
    index: int | None
    npu: int | str | None
    model: str | None
    bus_id: str | None
    driver_version: str | None
    firmware_version: str | None
    health: str
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_celsius: float | None
    power_watts: float | None
    power_limit_watts: float | None
    details: dict[str, DetailValue] = field(default_factory=dict)
    processes: tuple[ProcessSample, ...] = ()

    @property
    def sort_key(self) -> tuple[float, int]:
        return (self.index if self.index is not None else math.inf, self.position)


def _watts(raw: object) -> float | None:
    """Watts from ``"17521800uW"``; a bare number is taken in the JSON's own unit, microwatts.

    Rounded to the microwatt, the tool's resolution, so that 41200000uW reads
    41.2 rather than 41.199999999999996.
    """
    watts = units.parse_power_watts(raw, default_unit="uw")
    return None if watts is None else round(watts, 6)


def _bytes(raw: object, what: str, cells: CellReader, said: SaidOnce | None) -> int | None:
    """Bytes from a memory cell: decimal bytes as printed (a number in one reported variant) are a
    whole number of 0 or more, never a rounded fraction; a size with a unit (``"2GiB"``) is read
    as one."""
    if units.to_float(raw) is not None:  # a bare number: no unit, so whole bytes or nothing
        return whole_cell(raw, cells.label, what, cells.warnings, said)
    return cells.size(raw, what)


def _parse_row(row: object, position: int, report_driver: str | None,
               warnings: list[str], said: SaidOnce | None = None) -> _Die | None:
    """One device row, or ``None`` (with a warning) when it cannot identify a device."""
    if not isinstance(row, dict):
        warnings.append(f"device row {position}: not an object ({shorten(repr(row), PREVIEW_CHARS)}); skipped")
        return None
    pci = row.get("pci") if isinstance(row.get("pci"), dict) else {}
    uuid = text_of(row.get("uuid"))
    kernel_name = text_of(row.get("device"))
    bus_id = text_of(pci.get("bus_id")) or text_of(row.get("bus_id"))
    if uuid:
        device_id = uuid
    elif bus_id:
        device_id = f"rebellions:pci:{bus_id}"
    elif kernel_name:
        device_id = f"rebellions:dev:{kernel_name}"
    else:
        warnings.append(f"device row {position}: no uuid, PCI bus id or device name; skipped")
        return None
    label = kernel_name or uuid or bus_id or f"device row {position}"
    cells = CellReader(label, warnings)
    match = _KERNEL_NAME.match(kernel_name or "")
    model = text_of(row.get("name"))
    status = text_of(row.get("status"))
    pstate = text_of(row.get("pstate"))

    health = "unknown" if status is None else ("ok" if status.lower() == "normal" else "degraded")
    if pstate is not None and pstate.upper() in _FAULT_PSTATES:
        health = "degraded"

    temperature = cells.measure(row.get("temperature"),
                                units.parse_temperature_celsius(row.get("temperature")),
                                "temperature", "temperature_celsius")
    power = cells.measure(row.get("card_power"), _watts(row.get("card_power")),
                          "card_power", "power_watts")
    power_limit = cells.measure(row.get("power_limit"), _watts(row.get("power_limit")),
                                "power_limit", "power_limit_watts")
    utilization = cells.measure(row.get("util"), units.parse_percent(row.get("util")),
                                "util", "utilization_percent")

    memory = row.get("memory")
    used = total = None
    if isinstance(memory, dict):
        used = _bytes(memory.get("used"), "memory.used", cells, said)
        total = _bytes(memory.get("total"), "memory.total", cells, said)
    elif not units.is_missing(memory):
        warnings.append(f"{label}: unreadable memory {shorten(repr(memory), PREVIEW_CHARS)}; reported as unknown")
    if total is not None and total < units.MIB:
        warnings.append(f"{label}: implausible memory.total {total} bytes; reported as unknown")
        total = None
    if used is not None and total is not None and used > total:
        warnings.append(f"{label}: memory.used {used} exceeds memory.total {total}; used reported as unknown")
        used = None

    details: dict[str, DetailValue] = {}
    sid = text_of(row.get("sid"))
    pci_dev = text_of(pci.get("dev"))
    candidates: dict[str, DetailValue] = {
        "sid": sid,
        "device": kernel_name,
        "npu": index_key(row.get("npu")),
        "product": PRODUCTS.get((model or "").upper()),
        "status": status,
        "pstate": pstate,
        "pci_device_id": pci_dev,
        "virtual_function": (pci_dev.lower() in _VIRTUAL_FUNCTION_IDS) if pci_dev else None,
        "pci_link_speed": text_of(pci.get("link_speed")),
        "pci_link_width": whole_cell(pci.get("link_width"), label, "pci.link_width", warnings, said,
                                     allowed=PCIE_WIDTHS),
        "numa_node": None if text_of(pci.get("numa_node")) == "-1" else
        whole_cell(pci.get("numa_node"), label, "pci.numa_node", warnings, said),
        "board_info": text_of(row.get("board_info")),
        "location": whole_cell(row.get("location"), label, "location", warnings, said),
        "group_id": text_of(row.get("group_id")),
    }
    details.update({k: v for k, v in candidates.items() if v is not None})

    return _Die(
        position=position, id=device_id, label=label, uuid=uuid, sid=sid,
        kernel_name=kernel_name, index=int(match.group(1)) if match else None,
        npu=index_key(row.get("npu")), model=model, bus_id=bus_id,
        driver_version=text_of(row.get("driver_version")) or report_driver,
        firmware_version=text_of(row.get("fw_ver")), health=health,
        utilization_percent=utilization, memory_used_bytes=used, memory_total_bytes=total,
        temperature_celsius=temperature, power_watts=power, power_limit_watts=power_limit,
        details=details)


def _die_sample(die: _Die, backend: str, vendor: str, kind: str, *,
                parent: str | None = None) -> DeviceSample:
    on_card = parent is not None
    return DeviceSample(
        id=die.id, vendor=vendor, kind=kind, backend=backend, index=die.index,
        uuid=die.uuid, name=die.model, bus_id=die.bus_id,
        driver_version=die.driver_version, firmware_version=die.firmware_version,
        parent=parent, health=die.health,
        utilization_percent=die.utilization_percent,
        # rbln-smi reports one busy figure per die, no per-core activity: engine time
        **engine_time(die.utilization_percent),
        memory_used_bytes=die.memory_used_bytes, memory_total_bytes=die.memory_total_bytes,
        temperature_celsius=die.temperature_celsius,
        # Board quantities belong to the card when this row is one of its dies.
        power_watts=None if on_card else die.power_watts,
        power_limit_watts=None if on_card else die.power_limit_watts,
        processes=die.processes, details=dict(die.details))


def _card_health(dies: list[_Die]) -> str:
    """A card is degraded when any die is; ok when some die is ok; else unknown."""
    states = {d.health for d in dies}
    if states & {"degraded", "lost"}:
        return "degraded"
    return "ok" if "ok" in states else "unknown"


def card_id(sid: str) -> str:
    """The id of a multi-die card: its board serial, stable across reboots and slots."""
    return f"rebellions:card:{sid}"


def _card_samples(sid: str, dies: list[_Die], backend: str, vendor: str,
                  kind: str) -> list[DeviceSample]:
    dies = sorted(dies, key=lambda d: d.sort_key)
    model = next((d.model for d in dies if d.model), None)
    firmware = {d.firmware_version for d in dies if d.firmware_version}
    # Every die repeats the same card reading; take the first die's, once.
    power = next((d.power_watts for d in dies if d.power_watts is not None), None)
    limit = next((d.power_limit_watts for d in dies if d.power_limit_watts is not None), None)
    details: dict[str, DetailValue] = {"sid": sid, "dies": len(dies)}
    if model and model.upper() in PRODUCTS:
        details["product"] = PRODUCTS[model.upper()]
    if model and model.upper() in MULTI_DIE_MODELS:
        details["dies_per_card"] = MULTI_DIE_MODELS[model.upper()]
    parent_id = card_id(sid)
    card = DeviceSample(
        id=parent_id, vendor=vendor, kind=kind, backend=backend, name=model,
        driver_version=next((d.driver_version for d in dies if d.driver_version), None),
        firmware_version=firmware.pop() if len(firmware) == 1 else None,
        health=_card_health(dies), power_watts=power, power_limit_watts=limit,
        details=details)
    return [card] + [_die_sample(d, backend, vendor, kind, parent=parent_id) for d in dies]


def build_samples(report: Mapping[str, Any], *, backend: str, vendor: str, kind: str,
                  lookup_user: LookupUser, lookup_nodes: LookupNodes,
                  warnings: list[str], said: SaidOnce | None = None) -> list[DeviceSample]:
    """Samples for every readable device row; problems go to ``warnings`` (a refused
    integer-kind value once per device, field and value through ``said``).

    Single-die cards (ATOM, ATOM+) become one device each. Rows that are dies
    of one card (shared ``sid``, or a multi-die model such as RBLN-CA25)
    become a parent device carrying the board power once, followed by one
    child per die with its own utilization, memory, temperature and processes.
    """
    report_driver = text_of(report.get("KMD_version")) or text_of(report.get("driver_version"))
    dies: list[_Die] = []
    seen: set[str] = set()
    for position, row in enumerate(report.get("devices") or []):
        die = _parse_row(row, position, report_driver, warnings, said)
        if die is None:
            continue
        if die.id in seen:
            warnings.append(f"device row {position}: duplicate id {die.id!r}; skipped")
            continue
        seen.add(die.id)
        dies.append(die)

    attribute_contexts(report.get("contexts"), dies, lookup_user, lookup_nodes, warnings)

    sid_counts: dict[str, int] = {}
    for die in dies:
        if die.sid:
            sid_counts[die.sid] = sid_counts.get(die.sid, 0) + 1
    cards: dict[str, list[_Die]] = {}
    units_out: list[tuple[tuple[float, int], list[DeviceSample]]] = []
    for die in dies:
        multi_model = (die.model or "").upper() in MULTI_DIE_MODELS
        if die.sid and (sid_counts[die.sid] > 1 or multi_model):
            cards.setdefault(die.sid, []).append(die)
            continue
        if multi_model and die.power_watts is not None:
            # Without the card serial the dies of one card cannot be told
            # apart from other cards; repeating card power per die would
            # count a board several times, so leave it unknown.
            warnings.append(f"{die.label}: {die.model} die without a card serial (sid); "
                            "board power not reported")
            die = replace(die, power_watts=None, power_limit_watts=None)
        units_out.append((die.sort_key, [_die_sample(die, backend, vendor, kind)]))
    for sid, members in cards.items():
        key = min(d.sort_key for d in members)
        units_out.append((key, _card_samples(sid, members, backend, vendor, kind)))
    units_out.sort(key=lambda item: item[0])
    return [sample for _, samples in units_out for sample in samples]

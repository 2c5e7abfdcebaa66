"""Decoding one ``tt-smi -s`` snapshot into per-chip readings, per board generation.

A snapshot's ``device_info`` list has one entry per chip (an n300 or p300 board
has two). Each entry carries:

* ``telemetry``: values tt-smi already decoded, as space-padded strings
  (``" 16.0"``): ``voltage`` (V), ``current`` (A), ``power`` (W, the ASIC's
  TDP reading), ``aiclk`` (MHz), ``asic_temperature`` (°C), ``heartbeat``;
  tt-smi 6.x adds ``board_power`` (W, whole-card input power, or "N/A") and
  ``fan_speed``.
* ``smbus_telem``: raw firmware registers as hex strings (or ``null``), named
  ``AICLK``/``TDP``/... (tt-smi 3+) or ``SMBUS_TX_AICLK``/... (tt-smi 1-2).
  Several are packed: ``TDP`` holds the limit in its high 16 bits and the
  reading in its low 16 bits (likewise ``TDC``, ``AICLK``), and
  ``ASIC_TEMPERATURE`` is ``(raw & 0xFFFF) / 16`` on Grayskull/Wormhole but
  signed 16.16 fixed point on Blackhole.
* ``board_info``, ``firmwares`` and ``limits`` (strings or numbers, by version).

tt-smi substitutes fabricated numbers when a register is ``null`` (``0`` for
power, current, clock, temperature and fan speed, ``10000`` V for voltage). A
decoded value whose source register is ``null`` (or all ones) is ``None``; a
``N/A`` cell is decoded here from its register instead.

Integer-kind cells are whole numbers or nothing: ``board_info.pcie_speed`` (the
link generation, 1 to 7; tt-smi prints a number), ``pcie_width`` (1, 2, 4, 8,
16 or 32; a string of digits), ``telemetry.heartbeat`` (a counter, a string of
digits) and the registers (unsigned: ``0x`` and hex digits, or decimal digits).
``-1`` or ``3.7`` is refused with a warning said once per chip, field and value
while the backend is open (``said``), never rounded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from allsmi.schema import units
from allsmi.backends._common.cells import PCIE_GENERATIONS, PCIE_WIDTHS, CellReader, SaidOnce, whole_cell

GRAYSKULL = "grayskull"
WORMHOLE = "wormhole"
BLACKHOLE = "blackhole"

#: Board UPI (bits 36..55 of the board id) to board type: only the codes tt-smi itself maps.
UPI_BOARD_TYPES: dict[int, str] = {
    0x3: "e150", 0xA: "e300", 0x7: "e75",
    0x8: "nb_cb", 0xB: "wh_4u", 0x14: "n300", 0x18: "n150", 0x35: "tt-galaxy-wh",
    0x36: "bh-scrappy", 0x43: "p100a", 0x40: "p150a", 0x41: "p150b",
}

_GENERATION_PREFIXES: tuple[tuple[str, str], ...] = (
    ("e", GRAYSKULL), ("n", WORMHOLE), ("wh", WORMHOLE), ("tt-galaxy-wh", WORMHOLE),
    ("p", BLACKHOLE), ("bh", BLACKHOLE), ("tt-galaxy-bh", BLACKHOLE),
)

#: Decoded telemetry field -> the register it comes from.
_SOURCE_REGISTER = {"power": "TDP", "current": "TDC", "voltage": "VCORE",
                    "aiclk": "AICLK", "asic_temperature": "ASIC_TEMPERATURE"}

#: ``ChipReading`` attribute, the schema field it fills (its range applies) and narrower bounds.
PLAUSIBLE: tuple[tuple[str, str | None, tuple[float | None, float | None]], ...] = (
    ("voltage_volts", None, (0.0, 5.0)),
    ("current_amps", None, (0.0, 2000.0)),
    ("asic_power_watts", "power_watts", (None, None)),
    ("board_power_watts", "power_watts", (None, None)),
    ("aiclk_mhz", "clock_mhz", (None, None)),
    ("temperature_celsius", "temperature_celsius", (None, None)),
    ("tdp_limit_watts", "power_limit_watts", (1.0, None)),  # 0 W is "no limit", not a limit
)
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_SIDE = re.compile(r"^(?P<type>.*?)\s+(?P<side>[LR])\Z")


@dataclass
class ChipReading:
    """One chip of one snapshot, in schema units."""

    position: int
    board_id: str | None = None
    board_type: str | None = None
    side: str | None = None
    generation: str | None = None
    bus_id: str | None = None
    coords: str | None = None
    voltage_volts: float | None = None
    current_amps: float | None = None
    asic_power_watts: float | None = None
    board_power_watts: float | None = None
    aiclk_mhz: float | None = None
    temperature_celsius: float | None = None
    fan_percent: float | None = None
    fan_rpm: int | None = None
    heartbeat: int | None = None
    tdp_limit_watts: float | None = None
    thermal_limit_celsius: float | None = None
    dram_trained: bool | None = None
    dram_speed: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    firmwares: dict[str, str] = field(default_factory=dict)
    has_telemetry: bool = False


def _text(value: object) -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or units.is_missing(value):
        return None
    return value.strip()


def _hex(text: str) -> int | None:
    """A number from ASCII hex digits (an optional ``0x`` in front); ``None`` for anything else
    (``int(text, 16)`` also takes a sign, underscores and other scripts' digits)."""
    digits = text[2:] if text[:2].lower() == "0x" else text
    return int(digits, 16) if digits and all(c in _HEX_DIGITS for c in digits) else None


def register(smbus: dict[str, Any], name: str) -> int | None:
    """A raw register (unsigned) as an int: ``0x`` hex string, decimal string or a whole number
    of 0 or more; ``None`` if absent or anything else."""
    value = smbus.get(name)
    if isinstance(value, str):
        text = value.strip()
        return _hex(text) if text[:2].lower() == "0x" else units.to_int(text)
    return units.to_int(value)


#: Registers holding a reading (not a counter or an id): all ones in one is the firmware's
#: "no reading", and what tt-smi decodes from it is no value either.
READING_REGISTERS = frozenset({"TDP", "TDC", "VCORE", "AICLK", "ASIC_TEMPERATURE", "FAN_RPM",
                               "FAN_SPEED"})
_ALL_ONES = frozenset({0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})


def reading_register(smbus: dict[str, Any], name: str) -> int | None:
    """:func:`register` for a register in :data:`READING_REGISTERS`: ``None`` also when it is
    all ones (``0xFFFFFFFF``; on Blackhole that would decode as -0.00002 °C)."""
    number = register(smbus, name)
    return None if number in _ALL_ONES else number


def _whole_register(smbus: dict[str, Any], name: str, label: str, warnings: list[str],
                    said: SaidOnce | None) -> int | None:
    """:func:`register`, with a warning (said once) when the register is present but unreadable."""
    number = register(smbus, name)
    if number is None:  # says why, unless the register is absent or null
        whole_cell(smbus.get(name), label, f"register {name}", warnings, said)
    return number


def normalise_smbus(raw: object) -> dict[str, Any]:
    """Register names without tt-smi 1.x/2.x's ``SMBUS_TX_`` prefix, upper-cased."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).upper()
        if name.startswith("SMBUS_TX_"):
            name = name[len("SMBUS_TX_"):]
        out.setdefault(name, value)
    return out


def canonical_board_id(text: object, smbus: dict[str, Any]) -> str | None:
    """The board serial as 16 lower-case hex digits, from board_info or the registers.

    tt-smi prints it with varying zero padding across versions, so it is
    normalised to one spelling: the id must not change when tt-smi does.
    """
    candidate = _text(text)
    if candidate:
        number = _hex(candidate.replace("-", ""))
        if number:
            return f"{number:016x}"
    whole = register(smbus, "BOARD_ID")
    if whole:
        return f"{whole:016x}"
    high, low = register(smbus, "BOARD_ID_HIGH"), register(smbus, "BOARD_ID_LOW")
    if high is None or low is None or (high == 0 and low == 0):
        return None
    return f"{(high << 32) | (low & 0xFFFFFFFF):016x}"


def board_type_from_id(board_id: str | None) -> str | None:
    """The board type tt-smi derives from the UPI field of the board id."""
    if not board_id:
        return None
    return UPI_BOARD_TYPES.get((int(board_id, 16) >> 36) & 0xFFFFF)


def generation_of(board_type: str | None, smbus: dict[str, Any]) -> str | None:
    """Chip generation from the board type, else from which registers exist."""
    if board_type:
        lowered = board_type.lower()
        for prefix, generation in sorted(_GENERATION_PREFIXES, key=lambda p: -len(p[0])):
            if lowered.startswith(prefix):
                return generation
    if "TIMER_HEARTBEAT" in smbus or "CM_FW_VERSION" in smbus:
        return BLACKHOLE
    if "ARC3_HEALTH" in smbus and "M3_APP_FW_VERSION" in smbus:
        return WORMHOLE
    return None


def decode_temperature(raw: int, generation: str | None) -> float | None:
    """ASIC temperature from its register, by generation; ``None`` when the encoding is unknown."""
    if generation == BLACKHOLE:
        signed = raw - (1 << 32) if raw & 0x80000000 else raw
        return signed / 65536.0
    if generation in (WORMHOLE, GRAYSKULL):
        return (raw & 0xFFFF) / 16.0
    return None


def _heartbeat_register(generation: str | None) -> str:
    return {BLACKHOLE: "TIMER_HEARTBEAT", WORMHOLE: "ARC3_HEALTH", GRAYSKULL: "ARC0_HEALTH"}.get(
        generation or "", "ARC3_HEALTH")


def _fan_register(generation: str | None) -> str:
    """The register tt-smi prints as ``telemetry.fan_speed`` (``0`` when it is ``null``)."""
    return "FAN_RPM" if generation == BLACKHOLE else "FAN_SPEED"


#: The fan speed tt-smi's percent conversion of ``FAN_RPM`` takes as 100 % (Blackhole).
FULL_FAN_RPM = 5000


def fan_percent(cell: object, smbus: dict[str, Any], generation: str | None) -> float | None:
    """``telemetry.fan_speed`` where it is a percent, else ``None``.

    Its unit depends on the tt-smi release and the firmware, and the cell does not say which:
    on Blackhole tt-smi printed ``min(FAN_RPM, 5000) / 50`` (percent), later ``FAN_RPM`` itself
    (RPM); on Wormhole ``FAN_SPEED`` is a percent up to firmware 19.5, then two packed 16-bit
    RPM figures, of which later tt-smi prints one. The cell is a percent only where it is what
    tt-smi's percent reading of its register gives (to its whole-number rounding): never an RPM
    figure in a percent field, and unknown without the register to tell.
    """
    value = units.parse_percent(cell)
    raw = reading_register(smbus, _fan_register(generation))
    if value is None or raw is None:
        return None
    if generation == BLACKHOLE:
        expected = min(raw, FULL_FAN_RPM) / (FULL_FAN_RPM / 100.0)
        return value if abs(value - expected) <= 0.5 else None
    return value if raw <= 100 and value == raw else None


def _trusted(telemetry: dict[str, Any], smbus: dict[str, Any], key: str) -> float | None:
    """A decoded cell, unless tt-smi fabricated it because its register is missing.

    tt-smi computes every one of these cells from ``smbus_telem[<register>]`` and exports that
    dict with its ``null`` registers, so a filler always comes with its register ``null`` (or
    all ones). A snapshot without the register (tt-smi 1.x wrote no ``smbus_telem``) computed
    the cell from the register itself, failing rather than filling when it was missing.
    """
    source = _SOURCE_REGISTER.get(key)
    if source and source in smbus and reading_register(smbus, source) is None:
        return None
    return units.to_float(telemetry.get(key))


def _limit(limits: dict[str, Any], key: str) -> float | None:
    value = units.to_float(limits.get(key))
    # tt-smi writes 0 when the register behind a limit is missing: not a limit.
    return value if value is not None and value > 0 else None


def decode_chip(position: int, entry: dict[str, Any], warnings: list[str],
                said: SaidOnce | None = None) -> ChipReading:
    """One ``device_info`` entry as a :class:`ChipReading`; odd cells become ``None``."""
    board = entry.get("board_info") if isinstance(entry.get("board_info"), dict) else {}
    telemetry = entry.get("telemetry") if isinstance(entry.get("telemetry"), dict) else {}
    limits = entry.get("limits") if isinstance(entry.get("limits"), dict) else {}
    firmwares = entry.get("firmwares") if isinstance(entry.get("firmwares"), dict) else {}
    smbus = normalise_smbus(entry.get("smbus_telem"))

    chip = ChipReading(position=position)
    chip.board_id = canonical_board_id(board.get("board_id"), smbus)
    board_type = _text(board.get("board_type"))
    if board_type:
        match = _SIDE.match(board_type)
        if match:
            board_type, chip.side = match.group("type"), match.group("side")
    chip.board_type = board_type or board_type_from_id(chip.board_id)
    chip.generation = generation_of(chip.board_type, smbus)
    chip.bus_id = _text(board.get("bus_id"))
    chip.coords = _text(board.get("coords"))
    dram = board.get("dram_status")
    chip.dram_trained = dram if isinstance(dram, bool) else (
        {"true": True, "false": False}.get(dram.strip().lower()) if isinstance(dram, str) else None)
    chip.dram_speed = _text(board.get("dram_speed"))
    # tt-smi's device number: the chips of an n300 or p300 share their board id and bus
    known = chip.board_id or chip.bus_id
    label = f"tt-smi device {position}" + (f" ({known})" if known else "")
    chip.pcie_gen = whole_cell(board.get("pcie_speed"), label, "pcie_speed", warnings, said,
                               minimum=PCIE_GENERATIONS[0], maximum=PCIE_GENERATIONS[-1])
    chip.pcie_width = whole_cell(board.get("pcie_width"), label, "pcie_width", warnings, said,
                                 allowed=PCIE_WIDTHS)

    chip.asic_power_watts = _trusted(telemetry, smbus, "power")
    chip.current_amps = _trusted(telemetry, smbus, "current")
    chip.voltage_volts = _trusted(telemetry, smbus, "voltage")
    chip.aiclk_mhz = _trusted(telemetry, smbus, "aiclk")
    chip.temperature_celsius = _trusted(telemetry, smbus, "asic_temperature")
    chip.board_power_watts = units.to_float(telemetry.get("board_power"))
    chip.fan_percent = fan_percent(telemetry.get("fan_speed"), smbus, chip.generation)
    chip.heartbeat = whole_cell(telemetry.get("heartbeat"), label, "heartbeat", warnings, said,
                                sentinels=False)  # a counter: all ones on its way round

    # Registers fill what the decoded block lacks (older tt-smi, or "N/A" cells).
    tdp, tdc, aiclk = (reading_register(smbus, name) for name in ("TDP", "TDC", "AICLK"))
    if chip.asic_power_watts is None and tdp is not None:
        chip.asic_power_watts = float(tdp & 0xFFFF)
    if chip.current_amps is None and tdc is not None:
        chip.current_amps = float(tdc & 0xFFFF)
    if chip.aiclk_mhz is None and aiclk is not None:
        chip.aiclk_mhz = float(aiclk & 0xFFFF)
    vcore = reading_register(smbus, "VCORE")
    if chip.voltage_volts is None and vcore is not None:
        chip.voltage_volts = vcore / 1000.0
    raw_temp = reading_register(smbus, "ASIC_TEMPERATURE")
    if chip.temperature_celsius is None and raw_temp is not None:
        chip.temperature_celsius = decode_temperature(raw_temp, chip.generation)
    if chip.heartbeat is None:
        chip.heartbeat = _whole_register(smbus, _heartbeat_register(chip.generation), label, warnings, said)
    fan_rpm = _whole_register(smbus, "FAN_RPM", label, warnings, said)
    chip.fan_rpm = fan_rpm if fan_rpm not in _ALL_ONES else None

    chip.tdp_limit_watts = _limit(limits, "tdp_limit")
    if chip.tdp_limit_watts is None and tdp is not None and tdp >> 16:
        chip.tdp_limit_watts = float(tdp >> 16)
    chip.thermal_limit_celsius = _limit(limits, "thm_limit")

    for key, value in firmwares.items():
        text = _text(value)
        if text is not None:
            chip.firmwares[str(key)] = text

    # Garbage that decoded to a number is still garbage: drop what cannot be physical, against
    # the range the schema declares for the field it fills (or, for a quantity that fills none,
    # its own).
    cells = CellReader(chip.board_id or chip.bus_id or f"device {position}", warnings)
    for attr, schema_field, bounds in PLAUSIBLE:
        value = getattr(chip, attr)
        if attr == "voltage_volts" and value == 10000.0:  # tt-smi's "no VCORE" filler
            setattr(chip, attr, None)
            continue
        low, high = bounds
        setattr(chip, attr, cells.plausible(value, attr, schema_field, minimum=low, maximum=high))
    chip.has_telemetry = any(v is not None for v in (chip.asic_power_watts, chip.aiclk_mhz,
                                                       chip.temperature_celsius, chip.voltage_volts,
                                                       chip.board_power_watts))
    return chip


def decode_snapshot(data: Any, said: SaidOnce | None = None
                    ) -> tuple[list[ChipReading], list[str], dict[str, Any]]:
    """Chips, warnings and host facts from a decoded snapshot; ``said`` keeps the refused
    integer-kind values already warned about (every one is warned about without it).

    Raises :class:`ValueError` when the document has no ``device_info`` list.
    """
    if not isinstance(data, dict) or not isinstance(data.get("device_info"), list):
        raise ValueError("no device_info list in the snapshot")
    warnings: list[str] = []
    chips: list[ChipReading] = []
    for position, entry in enumerate(data["device_info"]):
        if not isinstance(entry, dict):
            warnings.append(f"tt-smi device_info[{position}] is not an object; skipped")
            continue
        try:
            chips.append(decode_chip(position, entry, warnings, said))
        except Exception as exc:  # one malformed chip must not drop the others
            warnings.append(f"tt-smi device_info[{position}] could not be decoded ({exc}); skipped")
    host: dict[str, Any] = {}
    info = data.get("host_info")
    if isinstance(info, dict):
        host["driver"] = _text(info.get("Driver"))
    versions = data.get("host_sw_vers")
    if isinstance(versions, dict):
        host["tt_smi_version"] = _text(versions.get("tt_smi"))
    host["processes"] = data.get("processes") if isinstance(data.get("processes"), list) else []
    return chips, warnings, host

"""Decoding tt-smi snapshots per board generation (pure functions, no subprocess)."""

from __future__ import annotations

import json

import pytest

from allsmi.backends.tenstorrent import decode
from allsmi.backends.tenstorrent.snapshot import extract_snapshot
from tests.contract.scenarios_tenstorrent import TENSTORRENT


def _load(name: str) -> dict:
    return json.loads((TENSTORRENT / name).read_text())


@pytest.mark.parametrize(("raw", "generation", "celsius"), [
    (0x22D522, decode.BLACKHOLE, 34.832),  # signed 16.16: the p300c capture tt-smi shows as 34.8
    (0xFFFB0000, decode.BLACKHOLE, -5.0),  # negative in 16.16
    (0x2E902E9, decode.WORMHOLE, 46.5625),  # (raw & 0xFFFF) / 16: the high half is ignored
    (0x2BA02B9, decode.GRAYSKULL, 43.5625),
    (0x2E9, None, None),  # unknown generation: the encoding is ambiguous, so no value
])
def test_temperature_register_per_generation(raw: int, generation: str | None, celsius: float | None) -> None:
    value = decode.decode_temperature(raw, generation)
    assert value == (pytest.approx(celsius, abs=1e-3) if celsius is not None else None)


def test_registers_fill_na_cells_with_the_right_encoding() -> None:
    chips, warnings, _ = decode.decode_snapshot(_load("snapshot-5.3-na-cells.json"))
    n150 = chips[0]
    assert n150.generation == decode.WORMHOLE
    assert n150.asic_power_watts == 26.0  # TDP 0x64001a: low 16 bits; limit 100 in the high bits
    assert n150.tdp_limit_watts == 100.0
    assert n150.current_amps == 30.0  # TDC 0xa0001e
    assert n150.aiclk_mhz == 1000.0  # AICLK 0x3e803e8
    assert n150.voltage_volts == pytest.approx(0.793)  # VCORE 0x319 mV
    assert n150.temperature_celsius == pytest.approx(46.5625)
    assert warnings == []


def test_fabricated_zeros_for_missing_registers_are_dropped() -> None:
    chips, warnings, _ = decode.decode_snapshot(_load("snapshot-5.3-na-cells.json"))
    p150 = chips[1]
    # tt-smi printed power "0.0", temperature "0.0" and voltage "10000.00" for null registers.
    assert p150.asic_power_watts is None and p150.temperature_celsius is None
    assert p150.voltage_volts is None and p150.current_amps is None
    assert p150.aiclk_mhz == 1350.0  # AICLK is present: the decoded value stands
    assert p150.tdp_limit_watts is None  # limits "0": not a limit
    assert p150.dram_trained is False
    assert not any("voltage" in w for w in warnings)  # the 10000 V filler is not garbage to report


def test_smbus_tx_prefix_of_tt_smi_2_is_normalised() -> None:
    chips, _, host = decode.decode_snapshot(_load("snapshot-2.2-file-smbus-tx-wormhole-n150.json"))
    (chip,) = chips
    assert chip.heartbeat == 0x21C4  # from SMBUS_TX_ARC3_HEALTH: telemetry had no heartbeat then
    assert chip.board_id == "0100018311542017"  # "100018311542017" without its leading zero
    assert chip.firmwares["arc_fw"] == "2.21.0.0" and "tt_flash_version" not in chip.firmwares
    assert host["driver"] == "TT-KMD 1.27.1" and host.get("tt_smi_version") is None


@pytest.mark.parametrize(("text", "smbus", "expected"), [
    ("0100014211703001", {}, "0100014211703001"),
    ("100014211703001", {}, "0100014211703001"),
    ("N/A", {"BOARD_ID_HIGH": "0x1000142", "BOARD_ID_LOW": "0x11703001"}, "0100014211703001"),
    (None, {"BOARD_ID": "0x100014211703001"}, "0100014211703001"),
    ("N/A", {"BOARD_ID_HIGH": None, "BOARD_ID_LOW": "0x1"}, None),
    ("zz", {}, None),
])
def test_board_id_has_one_spelling(text: str | None, smbus: dict, expected: str | None) -> None:
    assert decode.canonical_board_id(text, smbus) == expected


@pytest.mark.parametrize(("board_type", "smbus", "generation"), [
    ("e150", {}, decode.GRAYSKULL), ("e75", {}, decode.GRAYSKULL),
    ("n150", {}, decode.WORMHOLE), ("n300", {}, decode.WORMHOLE), ("wh_4u", {}, decode.WORMHOLE),
    ("tt-galaxy-wh", {}, decode.WORMHOLE),
    ("p100a", {}, decode.BLACKHOLE), ("p150b", {}, decode.BLACKHOLE), ("p300c", {}, decode.BLACKHOLE),
    ("tt-galaxy-bh", {}, decode.BLACKHOLE),
    (None, {"TIMER_HEARTBEAT": "0x1"}, decode.BLACKHOLE),
    (None, {"ARC3_HEALTH": "0x1", "M3_APP_FW_VERSION": "0x1"}, decode.WORMHOLE),
    (None, {}, None),
])
def test_generation(board_type: str | None, smbus: dict, generation: str | None) -> None:
    assert decode.generation_of(board_type, smbus) == generation


def test_board_type_from_board_id_upi() -> None:
    assert decode.board_type_from_id("0100003111522019") == "e150"
    assert decode.board_type_from_id("0100014211703001") == "n300"
    assert decode.board_type_from_id("0000040031914035") == "p150a"
    assert decode.board_type_from_id("0000046131924062") is None  # a code tt-smi does not map: no guess


def test_board_side_suffix_is_split_off() -> None:
    chips, _, _ = decode.decode_snapshot(_load("snapshot-3.0-grayskull-e150-wormhole-n300.json"))
    assert [(c.board_type, c.side) for c in chips] == [("e150", None), ("n300", "L"), ("n300", "R")]
    assert chips[2].bus_id is None and chips[2].pcie_gen is None  # remote chip: "N/A"


def test_string_and_number_cells_across_versions() -> None:
    chips, _, _ = decode.decode_snapshot(_load("snapshot-5.3-blackhole-p150a-wormhole-n150.json"))
    p150 = chips[0]
    assert p150.pcie_gen == 5 and p150.pcie_width == 16  # a number and a string in 5.3
    assert p150.tdp_limit_watts == 300.0 and p150.thermal_limit_celsius == 110.0  # quoted strings
    assert p150.fan_rpm == 0x75A and p150.fan_percent is None


def test_garbage_numbers_are_dropped_with_warnings() -> None:
    chips, warnings, _ = decode.decode_snapshot(_load("snapshot-bad-rows.json"))
    assert [c.position for c in chips] == [1, 3]
    assert chips[1].asic_power_watts is None and chips[1].temperature_celsius is None
    assert any("device_info[0] is not an object" in w for w in warnings)
    assert any("implausible asic_power_watts 9999" in w for w in warnings)


def test_snapshot_without_device_info_is_rejected() -> None:
    with pytest.raises(ValueError, match="device_info"):
        decode.decode_snapshot({"time": "x", "host_info": {}})


def test_extract_snapshot_skips_progress_and_ansi() -> None:
    text = (TENSTORRENT / "stdout-3.0.5-progress-and-ansi.txt").read_text()
    assert text.startswith("\x1b[")
    assert len(extract_snapshot(text)["device_info"]) == 2


@pytest.mark.parametrize(("name", "message"), [("snapshot-truncated.json", "truncated"),
                                               ("garbage.txt", "JSON")])
def test_extract_snapshot_rejects_broken_output(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        extract_snapshot((TENSTORRENT / name).read_text())


@pytest.mark.parametrize("register", ["ASIC_TEMPERATURE", "TDP", "TDC", "AICLK", "VCORE"])
@pytest.mark.parametrize("telemetry_na", [False, True])
def test_all_ones_reading_register_is_no_reading(register: str, telemetry_na: bool) -> None:
    """0xFFFFFFFF in a reading register is the firmware's "no reading": neither the register
    nor what tt-smi decoded from it is a value (on Blackhole it decodes as -0.00002 °C)."""
    snapshot = _load("snapshot-6.8-blackhole-p300c-board-power.json")
    entry = snapshot["device_info"][0]
    entry["smbus_telem"][register] = "0xffffffff"
    field = {"ASIC_TEMPERATURE": "asic_temperature", "TDP": "power", "TDC": "current",
             "AICLK": "aiclk", "VCORE": "voltage"}[register]
    entry["telemetry"][field] = "N/A" if telemetry_na else " -0.0"
    chips, _, _ = decode.decode_snapshot(snapshot)
    attr = {"ASIC_TEMPERATURE": "temperature_celsius", "TDP": "asic_power_watts",
            "TDC": "current_amps", "AICLK": "aiclk_mhz", "VCORE": "voltage_volts"}[register]
    assert getattr(chips[0], attr) is None
    assert chips[1].temperature_celsius == 36.8  # the other chip reads, as tt-smi decoded it


def test_heartbeat_counter_keeps_all_ones() -> None:
    """A counter passes through 0xFFFFFFFF on its way round: that value is kept."""
    snapshot = _load("snapshot-6.8-blackhole-p300c-board-power.json")
    snapshot["device_info"][0]["telemetry"]["heartbeat"] = str(0xFFFFFFFF)
    chips, warnings, _ = decode.decode_snapshot(snapshot)
    assert chips[0].heartbeat == 0xFFFFFFFF and warnings == []


@pytest.mark.parametrize(("chip", "register"), [(0, "FAN_RPM"), (1, "FAN_SPEED")])
def test_fan_speed_filler_for_a_null_register_is_no_reading(chip: int, register: str) -> None:
    """tt-smi prints ``fan_speed`` "0" when its register (``FAN_RPM`` on Blackhole, ``FAN_SPEED``
    on Wormhole) is null: that 0 is a filler, not a stopped fan."""
    snapshot = _load("snapshot-5.3-blackhole-p150a-wormhole-n150.json")
    entry = snapshot["device_info"][chip]
    entry["smbus_telem"][register] = None
    entry["telemetry"]["fan_speed"] = "0"
    chips, _, _ = decode.decode_snapshot(snapshot)
    assert chips[chip].fan_percent is None
    entry["smbus_telem"][register] = "0x0"  # a register that reads 0: a real 0
    chips, _, _ = decode.decode_snapshot(snapshot)
    assert chips[chip].fan_percent == 0.0


def test_decoded_cells_without_register_block_are_readings() -> None:
    """tt-smi 1.x wrote no ``smbus_telem``; it computed each cell from its register and failed
    rather than fill one in when the register was missing, so those cells are readings."""
    snapshot = _load("snapshot-6.8-blackhole-p300c-board-power.json")
    del snapshot["device_info"][0]["smbus_telem"]
    chips, _, _ = decode.decode_snapshot(snapshot)
    assert chips[0].temperature_celsius == pytest.approx(float(
        snapshot["device_info"][0]["telemetry"]["asic_temperature"]))


@pytest.mark.parametrize(("chip", "register", "raw", "cell", "percent"), [
    # Blackhole: tt-smi's percent reading of FAN_RPM (min(rpm, 5000) / 50, printed "%3.0f") ...
    (0, "FAN_RPM", "0x75a", " 38", 38.0),
    (0, "FAN_RPM", "0x5a", "  2", 2.0),
    # ... and later releases' RPM itself, which is no percent, even below 100
    (0, "FAN_RPM", "0x5a", "90", None),
    (0, "FAN_RPM", "0x75a", "1882", None),
    # Wormhole: FAN_SPEED a percent before firmware 19.5 ...
    (1, "FAN_SPEED", "0x2a", "42", 42.0),
    # ... then max and current RPM packed in two halves, of which later tt-smi prints one
    (1, "FAN_SPEED", "0x5450040", "64", None),
    (1, "FAN_SPEED", "0x5450552", "1362", None),
    (1, "FAN_SPEED", "0x5450552", "88409426", None),
])
def test_fan_speed_in_rpm_is_never_a_percent(chip: int, register: str, raw: str, cell: str,
                                             percent: float | None) -> None:
    """``telemetry.fan_speed`` is RPM in some tt-smi releases and firmware: a percent only where
    it is what tt-smi's percent reading of its register gives."""
    snapshot = _load("snapshot-5.3-blackhole-p150a-wormhole-n150.json")
    entry = snapshot["device_info"][chip]
    entry["smbus_telem"][register] = raw
    entry["telemetry"]["fan_speed"] = cell
    chips, _, _ = decode.decode_snapshot(snapshot)
    assert chips[chip].fan_percent == percent


def test_fan_speed_without_its_register_is_unknown() -> None:
    """Without the register nothing tells a percent from an RPM figure: unknown, not guessed."""
    snapshot = _load("snapshot-6.8-blackhole-p300c-board-power.json")
    del snapshot["device_info"][0]["smbus_telem"]["FAN_RPM"]
    chips, _, _ = decode.decode_snapshot(snapshot)
    assert chips[0].fan_percent is None and chips[1].fan_percent == 38.0

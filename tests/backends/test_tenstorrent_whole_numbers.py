"""tt-smi's integer-kind values (PCIe generation and width, the ARC heartbeat, raw registers, the
board id, process pids and device numbers): a value that cannot be right is unknown with a
warning said once per chip, field and value while the backend is open, never rounded."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from allsmi.backends.tenstorrent import ENV_VAR, TenstorrentBackend, decode
from tests.contract.scenarios_tenstorrent import STDOUT_ARGS, TENSTORRENT, route, write_standin

P150_N150 = json.loads((TENSTORRENT / "snapshot-5.3-blackhole-p150a-wormhole-n150.json").read_text())
P150 = "tt-smi device 0 (0000040031914035)"


def _p150(board: dict[str, Any] | None = None, telemetry: dict[str, Any] | None = None,
          smbus: dict[str, Any] | None = None) -> dict[str, Any]:
    entry = copy.deepcopy(P150_N150["device_info"][0])
    entry["board_info"].update(board or {})
    entry["telemetry"].update(telemetry or {})
    entry["smbus_telem"].update(smbus or {})
    return entry


@pytest.mark.parametrize(("speed", "gen"), [
    (5, 5), ("4", 4), ("N/A", None),
    ("3.7", None),   # old: 4
    (4.6, None),     # old: 5
    (-1, None),      # old: -1
    (0, None), (9, None),  # old: 0 and 9; PCIe has generations 1 to 7
    ("٣", None),     # old: 3
])
def test_pcie_generation(speed: object, gen: int | None) -> None:
    warnings: list[str] = []
    chip = decode.decode_chip(0, _p150({"pcie_speed": speed}), warnings)
    assert chip.pcie_gen == gen
    said = [w for w in warnings if "pcie_speed" in w]
    assert said == ([] if gen is not None or speed == "N/A" else
                    [f"{P150}: pcie_speed value {speed!r} is not a whole number from 1 to 7; reported as unknown"])


@pytest.mark.parametrize(("width", "lanes"), [
    ("16", 16), (16, 16), ("4", 4), ("N/A", None),
    ("3", None),      # old: 3, no link trains to 3 lanes
    ("16.0", None),   # old: 16; tt-smi prints the sysfs digits
    ("15.5", None),   # old: 16
    (-16, None),      # old: -16
])
def test_pcie_width(width: object, lanes: int | None) -> None:
    warnings: list[str] = []
    chip = decode.decode_chip(0, _p150({"pcie_width": width}), warnings)
    assert chip.pcie_width == lanes
    assert sum("pcie_width" in w for w in warnings) == (0 if lanes is not None or width == "N/A" else 1)


@pytest.mark.parametrize(("heartbeat", "register", "beat"), [
    ("20493", "0x1e052", 20493),
    ("12.5", None, None),       # old: 12
    ("-3", None, None),         # old: -3
    ("12.5", "0x1e052", 0x1E052),  # the register fills in, as for "N/A"
    ("N/A", "-5", None),        # old: -5 from a decimal register string
    ("N/A", "0x1_0", None),     # old: 16 (int(text, 16) takes underscores)
    ("N/A", "0x٣", None),       # old: 3
    ("N/A", -7, None),          # old: -7
])
def test_heartbeat_and_its_register(heartbeat: str, register: object, beat: int | None) -> None:
    warnings: list[str] = []
    chip = decode.decode_chip(0, _p150(telemetry={"heartbeat": heartbeat},
                                       smbus={"TIMER_HEARTBEAT": register}), warnings)
    assert chip.heartbeat == beat
    bad = int(heartbeat not in ("20493", "N/A")) + int(register not in (None, "0x1e052"))
    assert sum("heartbeat" in w or "TIMER_HEARTBEAT" in w for w in warnings) == bad


def test_registers_are_unsigned_whole_numbers() -> None:
    smbus = {"A": "0x75a", "B": "1882", "C": -1, "D": "0x-1", "E": "+12", "F": True, "G": 3.0, "H": "0x"}
    assert [decode.register(smbus, k) for k in "ABCDEFGH"] == [0x75A, 1882] + [None] * 6
    warnings: list[str] = []
    chip = decode.decode_chip(0, _p150(smbus={"FAN_RPM": -1}), warnings)  # old: fan_rpm -1
    assert chip.fan_rpm is None
    assert warnings == [f"{P150}: register FAN_RPM value -1 is not a whole number of 0 or more; "
                        "reported as unknown"]


@pytest.mark.parametrize(("text", "expected"), [
    ("0000040031914035", "0000040031914035"), ("40031914035", "0000040031914035"),
    ("0x40031914035", "0000040031914035"), ("00-0004-0031-914035", "0000040031914035"),
    ("4_0031914035", None),   # old: read as 0x40031914035 (underscores)
    ("+40031914035", None),   # old: the same, signed
    ("４0031914035", None),   # old: the same, with a full-width digit
])
def test_board_id_is_ascii_hex(text: str, expected: str | None) -> None:
    assert decode.canonical_board_id(text, {}) == expected


def _snapshot(entry: dict[str, Any], processes: list[Any]) -> str:
    return json.dumps({**P150_N150, "device_info": [entry], "processes": processes})


def test_backend_says_each_refusal_once_while_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _snapshot(_p150({"pcie_speed": "3.7", "pcie_width": "-16"}, {"heartbeat": "-1"},
                           {"TIMER_HEARTBEAT": "0x1_0"}),
                     [{"pid": True, "device": 0}, {"pid": 7001, "device": 0.0}, {"pid": "7002.5", "device": 0},
                      {"pid": 7003, "device": 0, "user": "u"}])
    exe = write_standin(tmp_path / "bin", {STDOUT_ARGS: route(text=text)})
    monkeypatch.setenv(ENV_VAR, str(exe))
    backend = TenstorrentBackend(timeout_seconds=5.0, user_lookup=lambda pid: None)
    backend.open()

    def refused() -> list[str]:
        return [w for w in backend.warnings if "reported as unknown" in w or "lacks a pid" in w]

    (chip,) = backend.sample()
    for key in ("pcie_gen", "pcie_width", "heartbeat"):
        assert key not in chip.details  # old: 4, -16 and -1
    assert [p.pid for p in chip.processes or ()] == [7003]  # old: [1, 7003], true read as pid 1
    assert len(refused()) == 7
    backend.sample()
    assert refused() == []
    backend.close()
    backend.open()
    backend.sample()
    assert len(refused()) == 7

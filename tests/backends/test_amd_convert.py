"""Unit conversions and partition arrangement of the AMD backend, value by value."""

from __future__ import annotations

import pytest

from allsmi.backends.amd import convert as conv
from allsmi.backends.amd.partitions import Board, PlannedDevice, arrange, partition_count


@pytest.mark.parametrize(("info", "expected"), [
    ({"current_socket_power": 550, "average_socket_power": "N/A", "socket_power": 550},
     (550.0, "current_socket_power")),
    ({"current_socket_power": "N/A", "average_socket_power": 300, "socket_power": 300},
     (300.0, "average_socket_power")),
    ({"current_socket_power": 0xFFFFFFFF, "average_socket_power": 290}, (290.0, "average_socket_power")),
    ({"current_socket_power": "N/A", "average_socket_power": "N/A", "socket_power": 410},
     (410.0, "socket_power")),
    ({"current_socket_power": "N/A", "average_socket_power": 0xFFFFFFFF,
      "socket_power": 0xFFFFFFFFFFFFFFFF}, (None, None)),
    ({}, (None, None)),
])
def test_socket_power_by_generation(info: dict[str, object], expected: tuple[object, object]) -> None:
    assert conv.socket_power_watts(info) == expected


def test_power_cap_is_microwatts() -> None:
    assert conv.power_cap_watts({"power_cap": 750_000_000}) == 750.0
    assert conv.power_cap_watts({"power_cap": 0}) is None
    assert conv.power_cap_watts({"power_cap": 0xFFFFFFFFFFFFFFFF}) is None
    assert conv.power_cap_watts({"power_cap": "N/A"}) is None
    assert conv.power_limit_watts({"power_limit": 560}) == 560.0
    assert conv.power_limit_watts({"power_limit": 0xFFFF}) is None


def test_energy_is_ticks_times_microjoule_resolution() -> None:
    assert conv.energy_joules({"energy_accumulator": 65536, "counter_resolution": 15.2587890625}) == 1.0
    assert conv.energy_joules({"energy_accumulator": 1_000_000, "counter_resolution": 15.259}) \
        == pytest.approx(15.259)
    assert conv.energy_joules({"energy_accumulator": 0xFFFFFFFFFFFFFFFF, "counter_resolution": 15.2}) is None
    assert conv.energy_joules({"energy_accumulator": 10, "counter_resolution": 0.0}) is None
    # 65535 ticks is an ordinary count, not a sentinel
    assert conv.energy_joules({"energy_accumulator": 0xFFFF, "counter_resolution": 1.0}) \
        == pytest.approx(0.065535)


@pytest.mark.parametrize(("raw", "celsius"), [
    (54, 54.0), (0, 0.0), (-5, -5.0), (45000, 45.0), (65535, None), (0xFFFFFFFF, None),
    (200, None), ("N/A", None), (None, None),
])
def test_temperature(raw: object, celsius: float | None) -> None:
    assert conv.temperature_celsius(raw) == celsius


def test_memory_units() -> None:
    assert conv.mib_to_bytes(196608) == 192 * 1024 ** 3
    assert conv.mib_to_bytes(0xFFFF) == 0xFFFF * 1024 ** 2   # 64 GiB - 1 MiB is a real size
    assert conv.mib_to_bytes(0xFFFFFFFF) is None
    assert conv.byte_count(0xFFFFFFFFFFFFFFFF) is None
    assert conv.byte_count(0) == 0


def test_activity_fan_and_clock() -> None:
    assert conv.activity_percent(100) == 100.0
    assert conv.activity_percent(101) is None                # amdsmi's "unsupported" above 100
    assert conv.activity_percent("N/A") is None
    assert conv.fan_percent(128, 255) == pytest.approx(50.196, abs=1e-3)
    assert conv.fan_percent(10, 0) is None
    assert conv.fan_percent(300, 255) is None
    assert conv.clock_mhz({"clk": 2100}) == 2100.0
    assert conv.clock_mhz({"clk": "N/A"}) is None


def test_reading_rejects_non_numbers() -> None:
    assert conv.reading(True) is None
    assert conv.reading(float("nan")) is None
    assert conv.reading("garbage") is None
    assert conv.reading([1]) is None
    assert conv.text("N/A") is None and conv.text("  ") is None and conv.text(" MI300X ") == "MI300X"


def test_split_bdf() -> None:
    assert conv.split_bdf("0000:0C:00.3") == ("0000:0c:00", 3)
    assert conv.split_bdf("0c:00.3") is None
    assert conv.split_bdf("0000:0c:00") is None
    assert conv.split_bdf(None) is None


def _dev(index: int, bdf: str, mode: str | None, pid: int | None = None,
         uuid: str | None = None) -> PlannedDevice:
    return PlannedDevice(index=index, handle=index, bus_id=bdf, compute_partition=mode,
                         partition_id=pid, uuid=uuid)


def test_arrange_spx_devices_are_whole_gpus() -> None:
    devices = arrange([_dev(0, "0000:0c:00.0", "SPX", 0, "u0"), _dev(1, "0000:22:00.0", None, None, "u1")])
    assert all(isinstance(d, PlannedDevice) for d in devices)
    assert [(d.id, d.parent, d.partition_share, d.device_index) for d in devices] == [
        ("u0", None, None, 0), ("u1", None, None, 1)]


def test_arrange_dpx_uses_pci_function_when_kfd_is_silent() -> None:
    (board,) = arrange([_dev(0, "0000:0c:00.1", "DPX"), _dev(1, "0000:0c:00.0", "DPX")])
    assert isinstance(board, Board)
    assert board.id == "amd:0000:0c:00" and board.bus_id == "0000:0c:00.0" and board.owns_power
    assert [d.bus_id for d in board.partitions] == ["0000:0c:00.0", "0000:0c:00.1"]
    assert [(d.parent, d.partition_id, d.partition_share) for d in board.partitions] == [
        ("amd:0000:0c:00", 0, 0.5), ("amd:0000:0c:00", 1, 0.5)]


def test_arrange_ids_fall_back_and_stay_unique() -> None:
    layout = arrange([
        PlannedDevice(index=0, handle=0),
        PlannedDevice(index=1, handle=1),
        PlannedDevice(index=2, handle=2, uuid="same", bus_id="0000:01:00.0"),
        PlannedDevice(index=3, handle=3, uuid="same", bus_id="0000:02:00.0"),
    ])
    assert [d.id for d in layout] == ["amd:gpu0", "amd:gpu1", "amd:0000:01:00.0", "amd:0000:02:00.0"]


def test_arrange_groups_handles_of_one_pci_device_even_without_a_mode() -> None:
    # the first says CPX, the others' mode calls were not supported
    (board,) = arrange([_dev(0, "0000:0c:00.0", "CPX", 0, "u0"), _dev(1, "0000:0c:00.1", None, None, "u1"),
                        _dev(2, "0000:0c:00.2", None, None, "u2")])
    assert [(d.id, d.parent, d.partition_id) for d in board.partitions] == [
        ("u0", board.id, 0), ("u1", board.id, 1), ("u2", board.id, 2)]
    assert board.partitions[0].partition_share == pytest.approx(1 / 3)


@pytest.mark.parametrize("mode, handles, expected", [
    ("DPX", 2, 2), ("TPX", 3, 3), ("QPX", 4, 4), ("CPX", 8, 8), ("CPX", 3, 3),
    ("QPX", 2, 4),   # a container given two of four partitions: still quarters
    (None, 2, 2), ("SPX", 2, 2),  # the handles outvote a mode string that cannot be right
])
def test_partition_count(mode: str | None, handles: int, expected: int) -> None:
    members = [_dev(i, f"0000:0c:00.{i}", mode, i) for i in range(handles)]
    assert partition_count(mode, members) == expected


def test_arrange_lone_partition_other_than_0_has_a_board_without_power() -> None:
    (board,) = arrange([_dev(0, "0000:0c:00.5", "CPX", 5, "u5")])
    assert isinstance(board, Board) and not board.owns_power
    assert board.partitions[0].parent == board.id
    assert board.partitions[0].partition_share == pytest.approx(1 / 6)
    (spx,) = arrange([_dev(0, "0000:0c:00.0", "SPX", 0, "u0")])
    assert isinstance(spx, PlannedDevice) and spx.parent is None

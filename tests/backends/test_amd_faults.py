"""AMD faults the fixtures alone do not show: a partition failing at open, a partition's board
or gpu_metrics call failing, an amdsmi without an enum; through the real amdsmi package over
the fake libamd_smi.so."""

from __future__ import annotations

import copy

from allsmi.backends.amd import AmdBackend

from .amd_fake import FakeLibrary, fake_backend, load_amdsmi_against

BOARD = "amd:0000:0c:00"


def _open(name: str) -> tuple[FakeLibrary, AmdBackend]:
    lib = FakeLibrary.from_fixture(name)
    backend = fake_backend(lib)
    backend.open()
    return lib, backend


def test_a_partition_failing_at_open_is_placed_on_its_board_once_it_answers() -> None:
    lib = FakeLibrary.from_fixture("mi300x_cpx")
    healthy = copy.deepcopy(lib.devices[3])
    lib.devices[3] = {"default_status": "AMDSMI_STATUS_DRM_ERROR"}
    backend = fake_backend(lib)
    backend.open()
    first = backend.sample()
    lost = [d for d in first if d.health == "lost"]
    assert [d.bus_id for d in lost] == [None]               # loud, and not on any board
    assert any("not answering" in w for w in backend.warnings)
    lib.devices[3] = healthy
    devices = backend.sample()
    # back: a partition of board 0c, not a whole GPU repeating the board's 688 W
    assert len(devices) == 18 and all(d.health == "ok" for d in devices)
    part = next(d for d in devices if d.bus_id == "0000:0c:00.3")
    assert part.parent == BOARD and part.power_watts is None and part.partition_share == 1 / 8
    assert sum(d.power_watts or 0 for d in devices) == 688.0 + 402.0
    assert backend.warnings == []


def test_a_partitions_failing_power_call_is_reported_and_the_next_one_reads_the_board() -> None:
    lib, backend = _open("mi300x_cpx")
    assert backend.sample()[0].power_watts == 688.0
    lib.devices[0]["amdsmi_get_power_info"] = "AMDSMI_STATUS_DRM_ERROR"
    board = backend.sample()[0]
    assert board.id == BOARD and board.power_watts == 688.0    # partition 1 repeats it
    assert board.energy_joules == 3145728.0
    assert any("board readings through 0000:0c:00.0: power failed: AMDSMI_STATUS_DRM_ERROR" in w
               for w in backend.warnings)


def test_board_readings_failing_on_every_partition_degrade_the_board() -> None:
    lib, backend = _open("mi300x_cpx_nps1_power_first_only")
    lib.devices[0]["amdsmi_get_energy_count"] = "AMDSMI_STATUS_DRM_ERROR"
    board = backend.sample()[0]
    assert board.power_watts == 612.0 and board.energy_joules is None
    assert board.health == "degraded"
    assert any("energy failed" in w for w in backend.warnings)


def test_a_partitions_failing_gpu_metrics_leave_the_others_their_activity() -> None:
    lib, backend = _open("mi300x_cpx")
    lib.devices[0]["amdsmi_get_gpu_metrics_info"] = "AMDSMI_STATUS_DRM_ERROR"
    devices = {d.id: d for d in backend.sample()}
    partitions = [d for d in devices.values() if d.parent == BOARD]
    # the table is the socket's: partition 1 gives it
    assert [d.compute_active_percent for d in partitions] == [20.0, 88.0, 0.0, 5.0, 100.0, 12.0,
                                                             63.0, 40.0]
    assert devices[BOARD].compute_active_percent == 41.0
    assert devices[BOARD].memory_bandwidth_percent == 30.0
    assert partitions[0].health == "degraded"
    assert any("0000:0c:00.0: GPU metrics failed" in w for w in backend.warnings)


def test_a_board_without_gpu_metrics_is_asked_through_one_partition_after_the_first_scan() -> None:
    lib, backend = _open("mi300x_cpx")
    backend.sample()
    before = lib.calls.count("amdsmi_get_gpu_metrics_info")
    backend.sample()
    assert lib.calls.count("amdsmi_get_gpu_metrics_info") - before == 2  # one per board


def test_an_amdsmi_without_an_enum_loses_those_readings_only() -> None:
    lib = FakeLibrary.from_fixture("mi300x_spx")
    module = load_amdsmi_against(lib)
    del module.AmdSmiTemperatureType
    del module.AmdSmiClkType
    backend = AmdBackend(loader=lambda: module, process_lookup=lambda pid: (None, None))
    backend.open()
    first, second = backend.sample()
    assert first.temperature_celsius is None and first.clock_mhz is None
    assert first.power_watts == 612.0 and first.utilization_percent == 87.0
    assert first.health == second.health == "ok"
    assert any("lacks AmdSmiTemperatureType, AmdSmiClkType" in w for w in backend.warnings)

"""The AMD backend over the real amdsmi package and a fake libamd_smi.so.

Every value below goes through amdsmi's own Python layer (struct decoding,
"N/A" mapping, exceptions) before our conversions; see ``amd_fake.py``.
"""

from __future__ import annotations


import pytest

from allsmi.backend_api import BackendError, BackendUnavailable
from allsmi.backends.amd import AmdBackend
from allsmi.schema import DeviceSample
from allsmi.schema.units import GIB, MIB
from allsmi.usage import billing_shares

from .amd_fake import FakeLibrary, fake_backend


def _open(name: str) -> tuple[FakeLibrary, AmdBackend]:
    lib = FakeLibrary.from_fixture(name)
    backend = fake_backend(lib)
    backend.open()
    return lib, backend


def _by_bus(devices: list[DeviceSample]) -> dict[str, DeviceSample]:
    return {d.bus_id: d for d in devices if d.bus_id}


# -- values and units ---------------------------------------------------------

def test_mi300x_spx_values_and_units() -> None:
    _, backend = _open("mi300x_spx")
    first, second = backend.sample()
    assert backend.warnings == []

    assert first.id == first.uuid == "a6ff74a1-0000-1000-807c-d0b8a1e2c3f4"
    assert (first.vendor, first.kind, first.backend, first.index) == ("amd", "gpu", "amd", 0)
    assert first.name == "AMD Instinct MI300X"
    assert first.bus_id == "0000:0c:00.0"
    assert first.driver_version == "6.10.5"
    assert first.firmware_version == "022.040.003.043.000001"
    assert first.parent is None and first.health == "ok"

    assert first.utilization_percent == 87.0
    # memory from the byte-exact calls, not the MiB-truncated vram_usage
    assert first.memory_used_bytes == 28 * GIB
    assert first.memory_total_bytes == 192 * GIB
    assert first.temperature_celsius == 54.0          # hotspot; MI300X has no edge sensor
    assert first.power_watts == 612.0                 # current_socket_power (MI300 generation)
    assert first.power_limit_watts == 750.0           # 750000000 µW
    assert first.energy_joules == 1572864.0           # 103079215104 ticks × 15.2587890625 µJ
    assert first.clock_mhz == 2100.0
    assert first.fan_percent is None                  # OAM parts have no fan

    assert first.details["temperature_sensor"] == "hotspot"
    assert "edge_temperature_celsius" not in first.details
    assert first.details["memory_temperature_celsius"] == 41.0
    assert first.details["memory_activity_percent"] == 42.0
    assert first.details["power_source"] == "current_socket_power"
    assert first.details["memory_clock_mhz"] == 1300.0
    assert first.details["ecc_correctable_total"] == 3
    assert first.details["ecc_uncorrectable_total"] == 0
    assert first.details["gfx_version"] == "gfx942"
    assert first.details["compute_units"] == 304
    assert first.details["compute_partition"] == "SPX"
    assert first.details["memory_partition"] == "NPS1"

    procs = {p.pid: p for p in first.processes}
    assert set(procs) == {4242, 4250}
    assert procs[4242].user == "alice"
    assert procs[4242].command == "python3"
    assert procs[4242].memory_bytes == 26843545600   # vram_mem, not mem (which adds GTT)

    assert second.utilization_percent == 0.0          # a real zero stays zero
    assert second.power_watts == 141.0
    assert second.processes == ()


def test_power_limit_falls_back_to_power_info_watts() -> None:
    lib = FakeLibrary.from_fixture("mi300x_spx")
    lib.devices[0]["amdsmi_get_power_cap_info"] = "AMDSMI_STATUS_NOT_SUPPORTED"
    lib.devices[0]["amdsmi_get_power_info"]["power_limit"] = 700
    backend = fake_backend(lib)
    backend.open()
    dev = backend.sample()[0]
    assert dev.power_limit_watts == 700.0
    assert dev.health == "ok"


def test_power_limit_fallback_in_microwatts_is_watts() -> None:
    """Some amdsmi releases copy hwmon's power1_cap (µW) into power_info.power_limit unconverted;
    a 750 W limit arrives as 750000000 and must read 750 W, not 750 MW dropped as implausible."""
    lib = FakeLibrary.from_fixture("mi300x_spx")
    lib.devices[0]["amdsmi_get_power_cap_info"] = "AMDSMI_STATUS_NOT_SUPPORTED"
    lib.devices[0]["amdsmi_get_power_info"]["power_limit"] = 750_000_000
    backend = fake_backend(lib)
    backend.open()
    dev = backend.sample()[0]
    assert dev.power_limit_watts == 750.0
    assert not [w for w in backend.warnings if "power_limit" in w]


def test_mi250x_average_socket_power_and_uint32_sentinel() -> None:
    _, backend = _open("mi250x")
    gcd0, gcd1 = backend.sample()
    # current_socket_power is 0xFFFFFFFF on GCD 0: amdsmi passes it through as
    # 4294967295 (it only maps 0xFFFF); it must not become 4.3 GW.
    assert gcd0.power_watts == 312.0
    assert gcd0.details["power_source"] == "average_socket_power"
    assert gcd1.power_watts == 298.0
    assert gcd1.details["power_source"] == "average_socket_power"
    assert gcd0.power_limit_watts == gcd1.power_limit_watts == 560.0
    assert gcd0.temperature_celsius == 45.0
    assert gcd0.details["edge_temperature_celsius"] == 38.0
    assert gcd0.details["memory_temperature_celsius"] == 50.0
    # MI250X has no partition calls: each GCD is its own board
    assert gcd0.parent is None and gcd1.parent is None
    assert "compute_partition" not in gcd0.details and "partition_id" not in gcd0.details


def test_vram_usage_megabytes_are_mebibytes() -> None:
    _, backend = _open("mi250x")
    gcd0, gcd1 = backend.sample()
    assert gcd0.memory_used_bytes == GIB + 4096       # bytes call: exact
    # GCD 1 lacks the bytes calls; amdsmi_get_gpu_vram_usage says 65520 / 1024 "MB"
    assert gcd1.memory_total_bytes == 65520 * MIB == 68702699520
    assert gcd1.memory_used_bytes == 1024 * MIB


def test_workstation_card_fan_and_processes() -> None:
    _, backend = _open("radeon_w7900")
    (card,) = backend.sample()
    assert card.fan_percent == pytest.approx(77 * 100 / 255)
    assert card.temperature_celsius == 61.0
    assert card.details["edge_temperature_celsius"] == 48.0
    assert card.power_watts == 180.0
    assert card.power_limit_watts == 295.0
    assert card.energy_joules == 65536.0
    assert "ecc_correctable_total" not in card.details  # NOT_SUPPORTED is not an error
    assert card.health == "ok"
    procs = {p.pid: p for p in card.processes}
    assert set(procs) == {3131, 3200}                  # pid 0 row dropped
    assert procs[3131].memory_bytes == 6 * GIB         # listed twice: the larger one
    assert procs[3200].command == "Xorg"               # empty amdsmi name: host name
    assert procs[3200].user == "frank"
    assert backend.warnings == ["0000:03:00.0: skipped 1 process row(s) without a valid pid"]


def test_na_strings_and_sentinels_become_none() -> None:
    _, backend = _open("sentinels")
    (dev,) = backend.sample()
    assert dev.health == "ok"                          # "N/A" is an answer, not a fault
    assert dev.id == "amd:0000:2f:00.0"                # empty uuid: the bus id
    assert dev.uuid is None
    assert dev.name == "Radeon RX 7600"                # empty market name: board product
    assert dev.driver_version is None and dev.firmware_version is None
    assert dev.utilization_percent is None             # 0xFFFF → "N/A"
    assert "memory_activity_percent" not in dev.details  # 250 %
    assert dev.memory_used_bytes is None               # UINT64_MAX, then UINT32_MAX MiB
    assert dev.memory_total_bytes == 8573157376
    assert dev.temperature_celsius == 45.0             # hotspot 65535 rejected; edge 45000 m°C
    assert dev.details["temperature_sensor"] == "edge"
    assert dev.power_watts is None
    assert dev.power_limit_watts is None
    assert dev.energy_joules is None
    assert dev.clock_mhz is None
    assert dev.fan_percent is None
    assert not any(k.startswith("ecc_") for k in dev.details)
    assert "compute_units" not in dev.details
    (proc,) = dev.processes
    assert proc.pid == 777 and proc.memory_bytes == MIB  # vram_mem UINT64_MAX: total mem
    assert backend.warnings == []


def test_implausible_values_are_dropped_with_a_warning() -> None:
    lib = FakeLibrary.from_fixture("mi300x_spx")
    lib.devices[0]["amdsmi_get_power_info"]["current_socket_power"] = 60000
    lib.devices[0]["amdsmi_get_gpu_memory_usage"]["VRAM"] = 300 * GIB
    backend = fake_backend(lib)
    backend.open()
    dev = backend.sample()[0]
    assert dev.power_watts is None
    assert dev.memory_used_bytes is None
    assert dev.memory_total_bytes == 192 * GIB
    assert any("implausible power_watts=60000" in w for w in backend.warnings)
    assert any("above total" in w for w in backend.warnings)


def test_energy_counter_follows_the_accumulator() -> None:
    lib, backend = _open("mi300x_spx")
    before = backend.sample()[0].energy_joules
    lib.devices[0]["amdsmi_get_energy_count"]["energy_accumulator"] += 65536 * 500
    after = backend.sample()[0].energy_joules
    assert before is not None and after is not None
    assert after - before == pytest.approx(500.0)


# -- partitions -----------------------------------------------------------------

def _boards(devices: list[DeviceSample]) -> list[tuple[DeviceSample, list[DeviceSample]]]:
    """Each physical GPU with the partitions listed right after it."""
    out = []
    for position, dev in enumerate(devices):
        if dev.parent is None:
            children = []
            for child in devices[position + 1:]:
                if child.parent != dev.id:
                    break
                children.append(child)
            out.append((dev, children))
    return out


def test_cpx_every_partition_is_a_child_and_board_power_is_counted_once() -> None:
    lib, backend = _open("mi300x_cpx")
    devices = list(backend.sample())
    assert len(devices) == 2 + 16
    boards = _boards(devices)
    assert [b.bus_id for b, _ in boards] == ["0000:0c:00.0", "0000:22:00.0"]
    assert [b.index for b, _ in boards] == [0, 1]
    for board, children in boards:
        assert len(children) == 8
        assert [c.details["partition_id"] for c in children] == list(range(8))
        assert all(c.partition_share == 1 / 8 and c.index is None for c in children)
        assert board.partition_share is None and board.details["partitions"] == 8
        assert all(c.power_watts is None and c.energy_joules is None
                   and c.power_limit_watts is None for c in children)
        assert all(not any(k.startswith("ecc_") for k in c.details) for c in children)
        assert board.details["compute_partition"] == "CPX"
        assert board.details["memory_partition"] == "NPS4"
    # every partition handle repeats its board's 688 W / 402 W; the total must not
    assert [b.power_watts for b, _ in boards] == [688.0, 402.0]
    assert sum(d.power_watts or 0 for d in devices) == 688.0 + 402.0
    assert sum(d.energy_joules or 0 for d in devices) == (206158430208 + 103079215104) / 65536
    assert [b.power_limit_watts for b, _ in boards] == [750.0, 750.0]
    # partition 0 is a partition like the others: its readings are its own, not the board's
    by_bus = {d.bus_id: d for _, children in boards for d in children}
    board_a, board_b = boards[0][0], boards[1][0]
    assert by_bus["0000:0c:00.0"].utilization_percent == 91.0
    assert [p.pid for p in by_bus["0000:0c:00.0"].processes] == [5000]
    assert by_bus["0000:0c:00.4"].utilization_percent == 100.0
    assert by_bus["0000:0c:00.4"].memory_used_bytes == 40 * GIB
    assert by_bus["0000:0c:00.4"].memory_total_bytes == 48 * GIB
    assert [p.user for p in by_bus["0000:0c:00.4"].processes] == ["dave"]
    # the board: mean of its equal partitions, every process of any partition
    assert board_a.utilization_percent == round((91 + 88 + 0 + 47 + 100 + 12 + 63 + 75) / 8, 3)
    assert [p.pid for p in board_a.processes] == [5000, 5004]
    assert board_b.utilization_percent == 35.0 and board_b.processes == ()
    assert board_a.memory_total_bytes is None  # per partition only: never summed into a guess
    # power is asked of one partition per board
    assert lib.calls.count("amdsmi_get_power_info") == 2
    assert lib.calls.count("amdsmi_get_energy_count") == 2


def test_partitions_sharing_a_uuid_get_bus_ids_and_the_board_the_uuid() -> None:
    _, backend = _open("mi300x_cpx")
    devices = list(backend.sample())
    (board_a, part_a), (board_b, part_b) = _boards(devices)
    assert sorted(d.id for d in part_b) == [f"amd:0000:22:00.{p}" for p in range(8)]
    assert board_b.id == board_b.uuid == "79ff74a1-0000-1000-80d1-1a2b3c4d5e6f"
    assert all(d.uuid == "79ff74a1-0000-1000-80d1-1a2b3c4d5e6f" for d in part_b)
    assert part_b[0].bus_id == "0000:22:00.0"      # partition 3 enumerated first, listed in order
    assert board_a.id == "amd:0000:0c:00" and board_a.uuid is None
    assert part_a[1].id == "a7ff74a1-0000-1000-807c-d0b8a1e2c3f4"
    assert len({d.id for d in devices}) == len(devices)


def test_partitions_without_visible_partition_0_claim_no_board_power() -> None:
    lib = FakeLibrary.from_fixture("mi300x_cpx")
    del lib.devices[0]                                 # a container given partitions 1-7 of board 0c
    backend = fake_backend(lib)
    backend.open()
    (board_a, part_a), (board_b, _) = _boards(list(backend.sample()))
    assert len(part_a) == 7 and all(d.parent == board_a.id for d in part_a)
    assert board_a.power_watts is None and board_a.energy_joules is None
    assert "partition 0" in str(board_a.details["board_power"])
    assert all(d.power_watts is None and d.partition_share == 1 / 8 for d in part_a)
    assert board_b.power_watts == 402.0


def test_cpx_partitions_a_container_sees_keep_their_eighth_of_the_board() -> None:
    """A container given partitions 0-2 of a CPX MI300X: the board's gpu_metrics says 8
    partitions, so each visible one is 1/8 (not 1/3) and the board keeps the 5/8 of the
    partitions elsewhere; its energy is not billed three ways."""
    lib = FakeLibrary.from_fixture("mi300x_cpx")
    del lib.devices[3:8]                               # partitions 3-7 of board 0c are elsewhere
    backend = fake_backend(lib)
    backend.open()
    devices = list(backend.sample())
    (board_a, part_a), (board_b, part_b) = _boards(devices)
    assert len(part_a) == 3 and board_a.power_watts is not None
    assert all(d.partition_share == 1 / 8 for d in part_a)
    assert all(d.partition_share == 1 / 8 for d in part_b)
    shares = billing_shares(devices)
    assert shares[board_a.id] == pytest.approx(5 / 8)
    assert sum(shares[d.id] for d in part_a) == pytest.approx(3 / 8)
    backend.close()


def test_kfd_partition_id_wins_over_pci_function() -> None:
    lib = FakeLibrary.from_fixture("mi300x_cpx")
    # swap the partition ids of functions 0 and 1 on board 0c
    lib.devices[0]["amdsmi_get_gpu_kfd_info"]["current_partition_id"] = 1
    lib.devices[1]["amdsmi_get_gpu_kfd_info"]["current_partition_id"] = 0
    backend = fake_backend(lib)
    backend.open()
    (board, parts), _ = _boards(list(backend.sample()))
    assert [p.bus_id for p in parts[:2]] == ["0000:0c:00.1", "0000:0c:00.0"]
    assert [p.details["partition_id"] for p in parts[:2]] == [0, 1]
    assert board.power_watts == 688.0


@pytest.mark.parametrize("fixture, boards, per_board, mode, memory_mode, power", [
    ("mi300x_dpx", 2, 2, "DPX", "NPS1", [700.0, 650.0]),
    ("mi300x_qpx", 1, 4, "QPX", "NPS4", [540.0]),
    ("mi300x_cpx_nps1_power_first_only", 1, 8, "CPX", "NPS1", [612.0]),
    ("mi300x_cpx_power_on_none_but_partition_2", 1, 8, "CPX", "NPS4", [455.0]),
])
def test_partition_modes_and_power_placements(fixture: str, boards: int, per_board: int, mode: str,
                                               memory_mode: str, power: list[float]) -> None:
    lib, backend = _open(fixture)
    devices = list(backend.sample())
    found = _boards(devices)
    assert len(found) == boards and len(devices) == boards * (per_board + 1)
    for board, children in found:
        assert len(children) == per_board
        assert all(c.partition_share == 1 / per_board for c in children)
        assert sum(c.partition_share or 0 for c in children) == pytest.approx(1.0)
        assert board.details["compute_partition"] == mode
        assert board.details["memory_partition"] == memory_mode
        assert all(c.power_watts is None and c.energy_joules is None for c in children)
    assert [b.power_watts for b, _ in found] == power
    assert all(b.energy_joules is not None for b, _ in found)
    assert backend.warnings == []


def test_eight_mi300x_in_cpx_are_8_gpus_with_8_partitions_each() -> None:
    lib = FakeLibrary(_eight_cpx_boards())
    backend = fake_backend(lib)
    backend.open()
    devices = list(backend.sample())
    found = _boards(devices)
    assert len(devices) == 72 and len(found) == 8
    assert all(len(children) == 8 for _, children in found)
    assert [b.index for b, _ in found] == list(range(8))
    assert sum(d.power_watts or 0 for d in devices) == 8 * 688.0
    assert lib.calls.count("amdsmi_get_power_info") == 8


def _eight_cpx_boards() -> dict[str, object]:
    """Board 0c of mi300x_cpx.json repeated on eight PCI buses (as on an 8-OAM node)."""
    import copy
    import json

    from .amd_fake import FIXTURE_DIR
    template = json.loads((FIXTURE_DIR / "mi300x_cpx.json").read_text())
    devices = []
    for board, bus in enumerate((0x0C, 0x22, 0x38, 0x5C, 0x9F, 0xAF, 0xBF, 0xDF)):
        for partition in template["devices"][:8]:
            dev = copy.deepcopy(partition)
            function = dev["amdsmi_get_gpu_device_bdf"].rsplit(".", 1)[1]
            dev["amdsmi_get_gpu_device_bdf"] = f"0000:{bus:02x}:00.{function}"
            dev["amdsmi_get_gpu_device_uuid"] = f"{board:02x}{function}ff74a1-0000-1000-807c-d0b8a1e2c3f4"
            devices.append(dev)
    return {"devices": devices, "host_processes": template["host_processes"]}


# -- faults -------------------------------------------------------------------------

def test_one_degraded_and_one_lost_device_leave_the_others_reporting() -> None:
    _, backend = _open("faulty")
    healthy, degraded, lost = backend.sample()
    assert healthy.health == "ok" and healthy.utilization_percent == 87.0
    assert healthy.power_watts == 612.0

    assert degraded.health == "degraded"
    assert degraded.utilization_percent is None        # DRM_ERROR on activity
    assert degraded.power_watts == 355.0               # the rest still reads
    assert degraded.name == "AMD Instinct MI300X OAM"  # ASIC info raised ValueError in amdsmi
    assert degraded.processes is None                 # NO_PERM on the list: unknown, not "nobody"

    assert lost.health == "lost"
    assert lost.id == "b2ff74a1-0000-1000-8044-aabbccddeeff"
    assert lost.bus_id == "0000:38:00.0"
    assert lost.utilization_percent is None and lost.power_watts is None
    assert lost.memory_total_bytes is None

    warnings = "\n".join(backend.warnings)
    assert "0000:22:00.0: activity failed: AMDSMI_STATUS_DRM_ERROR" in warnings
    assert "0000:22:00.0: permission denied reading processes" in warnings
    assert "ASIC info failed: ValueError" in warnings
    assert "0000:38:00.0: not answering (AMDSMI_STATUS_NOT_FOUND - Device Not found; 16 calls failed)" \
        in warnings


def test_a_device_lost_after_open_and_back_again() -> None:
    lib, backend = _open("mi300x_spx")
    assert [d.health for d in backend.sample()] == ["ok", "ok"]
    assert backend.warnings == []
    saved = lib.devices[1]
    lib.fail_device(1, "AMDSMI_STATUS_DRIVER_NOT_LOADED")
    first, second = backend.sample()
    assert first.health == "ok" and first.power_watts == 612.0
    assert second.health == "lost" and second.power_watts is None
    assert second.id == "79ff74a1-0000-1000-80d1-1a2b3c4d5e6f"   # identity from open()
    assert second.name == "AMD Instinct MI300X"
    assert len(backend.warnings) == 1 and "0000:22:00.0: not answering" in backend.warnings[0]
    lib.devices[1] = saved
    assert [d.health for d in backend.sample()] == ["ok", "ok"]
    assert backend.warnings == []                      # reset at each sample


def test_driver_not_loaded_is_unavailable() -> None:
    lib = FakeLibrary.from_fixture("driver_not_loaded")
    backend = fake_backend(lib)
    probe = backend.probe()
    assert not probe.available
    assert probe.reason.startswith("amdgpu driver not loaded")
    with pytest.raises(BackendUnavailable, match="amdgpu driver not loaded"):
        backend.open()


def test_no_permission_at_init_is_an_error_not_absence() -> None:
    lib = FakeLibrary({"amdsmi_init": "AMDSMI_STATUS_NO_PERM", "devices": []})
    backend = fake_backend(lib)
    probe = backend.probe()
    # present but refusing is not "absent": probe lets open() raise, so the status is "error"
    assert probe.available and "render and video groups" in probe.details["problem"]
    with pytest.raises(BackendError, match="permission denied") as caught:
        backend.open()
    assert not isinstance(caught.value, BackendUnavailable)


def test_listing_failure_raises_and_shuts_down() -> None:
    lib = FakeLibrary({"amdsmi_get_socket_handles": "AMDSMI_STATUS_DRM_ERROR", "devices": []})
    backend = fake_backend(lib)
    probe = backend.probe()
    assert probe.available
    assert probe.details["problem"].startswith("amdsmi could not list the GPUs: AMDSMI_STATUS_DRM_ERROR")
    with pytest.raises(BackendError, match="could not list the GPUs: AMDSMI_STATUS_DRM_ERROR"):
        backend.open()
    assert lib.calls.count("amdsmi_init") == 2          # probe, then open
    assert lib.calls.count("amdsmi_shut_down") == 2


def test_no_devices_is_an_empty_sample() -> None:
    lib, backend = _open("no_devices")
    assert backend.sample() == []
    assert not fake_backend(lib).probe().available


# -- life cycle -------------------------------------------------------------------

def test_probe_initialises_and_shuts_down() -> None:
    lib = FakeLibrary.from_fixture("mi300x_spx")
    backend = fake_backend(lib)
    probe = backend.probe()
    assert probe.available and probe.reason == ""
    assert probe.details["gpus"] == "2"
    assert probe.details["library_version"] == "25.5.1"
    assert probe.details["amdsmi_package"] == "7.0.2"
    assert lib.calls.count("amdsmi_init") == lib.calls.count("amdsmi_shut_down") == 1


def test_close_is_idempotent_and_sample_needs_open() -> None:
    lib = FakeLibrary.from_fixture("mi300x_spx")
    backend = fake_backend(lib)
    with pytest.raises(BackendError, match="not open"):
        backend.sample()
    backend.open()
    backend.open()                                     # a second open is a no-op
    backend.close()
    backend.close()
    assert lib.calls.count("amdsmi_init") == 1
    assert lib.calls.count("amdsmi_shut_down") == 1
    with pytest.raises(BackendError):
        backend.sample()


def test_static_facts_are_read_once() -> None:
    lib, backend = _open("mi300x_spx")
    for _ in range(3):
        backend.sample()
    for call in ("amdsmi_get_gpu_asic_info", "amdsmi_get_gpu_device_uuid",
                 "amdsmi_get_gpu_vbios_info", "amdsmi_get_gpu_driver_info"):
        assert lib.calls.count(call) == 2, call        # once per device, in open()
    assert lib.calls.count("amdsmi_get_gpu_activity") == 6


def test_real_probe_without_libamd_smi(capfd: pytest.CaptureFixture[str]) -> None:
    backend = AmdBackend()
    probe = backend.probe()
    if probe.available:
        pytest.skip("libamd_smi.so is installed here")
    assert probe.reason.startswith("libamd_smi.so not found: install ROCm")
    # amdsmi's own words when it was imported; what was searched when the file system
    # already showed that neither a device node nor the library is here (not imported)
    assert "libamd_smi.so" in probe.details.get("loader_output", probe.details.get("searched", ""))
    with pytest.raises(BackendUnavailable, match="libamd_smi.so not found"):
        backend.open()
    backend.close()
    out, _ = capfd.readouterr()
    assert out == ""


def test_default_process_lookup_is_the_shared_host_lookup() -> None:
    from allsmi.backends._common.owners import process_owner

    assert AmdBackend()._process_lookup is process_owner


# -- per-process engine activity --------------------------------------------------

def test_engine_usage_counters_become_each_processes_share_of_the_interval() -> None:
    lib = FakeLibrary.from_fixture("mi300x_spx")
    now = [1000.0]
    backend = fake_backend(lib, clock=lambda: now[0])
    backend.open()
    first = backend.sample()[0]
    assert [p.utilization_percent for p in first.processes] == [None, None]  # one reading only
    rows = lib.devices[0]["amdsmi_get_gpu_process_list"]
    now[0] += 2.0
    rows[0]["engine_usage"]["gfx"] += int(1.5e9)   # 1.5 s of GFX time in 2 s: 75%
    rows[1]["engine_usage"]["gfx"] += int(0.5e9)   # 25%
    rows[0]["engine_usage"]["enc"] += int(0.2e9)   # 10% of the encoder
    dev = backend.sample()[0]
    procs = {p.pid: p for p in dev.processes}
    assert procs[4242].utilization_percent == pytest.approx(75.0)
    assert procs[4250].utilization_percent == pytest.approx(25.0)
    assert procs[4242].encoder_utilization_percent == pytest.approx(10.0)
    assert procs[4242].memory_utilization_percent is None  # amdsmi has no per-process figure
    # a counter that went back (the pid was reused): unknown for that cycle, never negative
    now[0] += 1.0
    rows[1]["engine_usage"]["gfx"] = 5
    procs = {p.pid: p for p in backend.sample()[0].processes}
    assert procs[4242].utilization_percent == 0.0 and procs[4250].utilization_percent is None
    assert backend.warnings == []


def test_cpx_board_process_activity_is_its_partitions_at_their_shares() -> None:
    lib = FakeLibrary.from_fixture("mi300x_cpx")
    now = [50.0]
    backend = fake_backend(lib, clock=lambda: now[0])
    backend.open()
    backend.sample()
    now[0] += 1.0
    for row in lib.devices[0]["amdsmi_get_gpu_process_list"]:
        row["engine_usage"]["gfx"] += int(0.8e9)  # 80% of partition 0
    (board, parts), _ = _boards(list(backend.sample()))
    on_part = [p for p in parts[0].processes]
    assert on_part and all(p.utilization_percent == pytest.approx(80.0) for p in on_part)
    mine = {p.pid for p in on_part}
    on_board = [p for p in board.processes or () if p.pid in mine]
    # a process only on partition 0 of 8 keeps the board 10% busy
    alone = [p for p in on_board if sum(p.pid in {q.pid for q in c.processes or ()}
                                        for c in parts) == 1]
    assert alone and all(p.utilization_percent == pytest.approx(10.0) for p in alone)

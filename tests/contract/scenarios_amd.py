"""Contract scenarios for the AMD backend.

The first scenario is the real thing: the real ``amdsmi`` import on this
machine, which has the Python package but no ``libamd_smi.so``. The others run
the real ``amdsmi`` package over the fake C library of
``tests/backends/amd_fake.py``, fed from ``fixtures/amd/*.json``.
"""

from __future__ import annotations

from typing import Callable

import pytest

from allsmi.backend_api import Backend
from allsmi.backends.amd import AmdBackend
from tests.backends.amd_fake import FakeLibrary, fake_backend

from .fixture_truth import json_value, total, times
from .scenario import FIXTURES, Scenario, ScenarioEnv, expect

AMD = FIXTURES / "amd"


def _at(fixture: str, bdf: str, location: str, unit: str | None = None):
    """The C struct field ``location`` of the handle at ``bdf`` in ``fixtures/amd/FIXTURE.json``,
    in the unit amdsmi documents for it (the README's "Units")."""
    return json_value(AMD / f"{fixture}.json", f"devices/amdsmi_get_gpu_device_bdf={bdf}/{location}", unit)


def _power(fixture: str, bdf: str):
    return _at(fixture, bdf, "amdsmi_get_power_info/socket_power", "W")


def _energy(fixture: str, bdf: str):
    """The energy counter's ticks times its resolution (in uJ)."""
    return times(_at(fixture, bdf, "amdsmi_get_energy_count/energy_accumulator", "count"),
                 _at(fixture, bdf, "amdsmi_get_energy_count/counter_resolution", "uJ"))


def _vram(fixture: str, bdf: str, call: str = "amdsmi_get_gpu_memory_usage"):
    return _at(fixture, bdf, f"{call}/VRAM", "B")


def _proc(fixture: str, bdf: str, pid: int):
    return _at(fixture, bdf, f"amdsmi_get_gpu_process_list/pid={pid}/memory_usage/vram_mem", "B")


def _real(env: ScenarioEnv) -> Backend:
    backend = AmdBackend()
    if backend.probe().available:
        pytest.skip("libamd_smi.so and an AMD GPU are present: this scenario is for hosts without ROCm")
    return backend


def _fixture(name: str) -> Callable[[ScenarioEnv], Backend]:
    def build(env: ScenarioEnv) -> Backend:
        # a clock one second further at each reading, so that the xGMI counters read at open
        # and at the first cycle give a rate (0 B/s: the fixture's counters stand still)
        ticks = iter(range(10**6))
        return fake_backend(FakeLibrary.from_fixture(name), clock=lambda: float(next(ticks)))
    return build


CPX, DPX = "mi300x_cpx", "mi300x_dpx"

SCENARIOS: list[Scenario] = [
    Scenario("real-amdsmi-without-libamd_smi", _real, expected_devices=None),
    Scenario("no-devices", _fixture("no_devices"), expected_devices=None),
    Scenario("driver-not-loaded", _fixture("driver_not_loaded"), expected_devices=None),
    Scenario("mi300x-spx", _fixture("mi300x_spx"), expected_devices=2),
    # partitioned GPUs: one device per physical GPU plus one per partition
    Scenario("mi300x-cpx-2-boards", _fixture("mi300x_cpx"), expected_devices=2 + 16, expected=[
        # the energy counter's ticks x its resolution, once per board (from its first handle)
        expect("amd:0000:0c:00", parent=None, power_watts=_power(CPX, "0000:0c:00.0"),
               power_limit_watts=_at(CPX, "0000:0c:00.0", "amdsmi_get_power_cap_info/power_cap", "uW"),
               energy_joules=_energy(CPX, "0000:0c:00.0"), partition_share=None, index=0,
               # the mean of the eight XCCs' gfx_busy_inst; umc_activity
               compute_active_percent=41.0, compute_active_source="gfx_busy",
               memory_bandwidth_percent=_at(CPX, "0000:0c:00.0", "amdsmi_get_gpu_activity/umc_activity", "%"),
               interconnect_rx_bytes_per_second=0.0),
        expect("a6ff74a1-0000-1000-807c-d0b8a1e2c3f4", parent="amd:0000:0c:00", partition_share=0.125,
               power_watts=None, energy_joules=None,
               utilization_percent=_at(CPX, "0000:0c:00.0", "amdsmi_get_gpu_activity/gfx_activity", "%"),
               compute_active_percent=20.0, compute_active_source="gfx_busy",
               memory_bandwidth_percent=None,
               memory_used_bytes=_vram(CPX, "0000:0c:00.0"),
               memory_total_bytes=_vram(CPX, "0000:0c:00.0", "amdsmi_get_gpu_memory_total"),
               processes=[(5000, _proc(CPX, "0000:0c:00.0", 5000))]),
        # board 22 lists partition 3 first: its board readings are that handle's
        expect("79ff74a1-0000-1000-80d1-1a2b3c4d5e6f", parent=None, power_watts=_power(CPX, "0000:22:00.3"),
               energy_joules=_energy(CPX, "0000:22:00.3")),
        expect("amd:0000:22:00.0", parent="79ff74a1-0000-1000-80d1-1a2b3c4d5e6f",
               partition_share=0.125, power_watts=None, compute_active_percent=None),
    ]),
    Scenario("mi300x-dpx-multi-device-processes", _fixture("mi300x_dpx"), expected_devices=2 + 4,
             expected=[
        # a board's process holds what it holds on each of the board's partitions
        expect("amd:0000:4f:00", power_watts=_power(DPX, "0000:4f:00.0"), energy_joules=_energy(DPX, "0000:4f:00.0"),
               utilization_percent=70.0,  # the mean of its partitions' gfx_activity, 80 and 60
               processes=[(7001, total(_proc(DPX, "0000:4f:00.0", 7001), _proc(DPX, "0000:4f:00.1", 7001))),
                          (7002, _proc(DPX, "0000:4f:00.1", 7002))]),
        expect("b1ff74a1-0000-1000-807c-000000004f00", parent="amd:0000:4f:00", partition_share=0.5,
               power_watts=None, memory_used_bytes=_vram(DPX, "0000:4f:00.0"),
               memory_total_bytes=_vram(DPX, "0000:4f:00.0", "amdsmi_get_gpu_memory_total"),
               processes=[(7001, _proc(DPX, "0000:4f:00.0", 7001))]),
        expect("b1ff74a1-0000-1000-807c-000000004f01", processes=[(7001, _proc(DPX, "0000:4f:00.1", 7001)),
                                                                  (7002, _proc(DPX, "0000:4f:00.1", 7002))]),
        expect("b1ff74a1-0000-1000-807c-000000008e00", parent="amd:0000:8e:00",
               processes=[(7001, _proc(DPX, "0000:8e:00.0", 7001))]),
        expect("amd:0000:8e:00", power_watts=_power(DPX, "0000:8e:00.0"), energy_joules=_energy(DPX, "0000:8e:00.0"),
               processes=[(7001, _proc(DPX, "0000:8e:00.0", 7001))]),
    ]),
    Scenario("mi300x-qpx-nps4-power-first-only", _fixture("mi300x_qpx"), expected_devices=1 + 4),
    Scenario("mi300x-cpx-nps1-power-first-only", _fixture("mi300x_cpx_nps1_power_first_only"),
             expected_devices=1 + 8),
    Scenario("mi300x-cpx-power-on-partition-2", _fixture("mi300x_cpx_power_on_none_but_partition_2"),
             expected_devices=1 + 8),
    Scenario("mi250x-average-power", _fixture("mi250x"), expected_devices=2),
    Scenario("radeon-w7900-fan", _fixture("radeon_w7900"), expected_devices=1),
    Scenario("sentinels-and-na", _fixture("sentinels"), expected_devices=1),
    Scenario("healthy-degraded-lost", _fixture("faulty"), expected_devices=3),
]

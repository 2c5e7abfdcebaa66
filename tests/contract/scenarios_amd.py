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
from allsmi.units import GIB
from tests.backends.amd_fake import FakeLibrary, fake_backend

from .scenario import Scenario, ScenarioEnv, expect


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


SCENARIOS: list[Scenario] = [
    Scenario("real-amdsmi-without-libamd_smi", _real, expected_devices=None),
    Scenario("no-devices", _fixture("no_devices"), expected_devices=None),
    Scenario("driver-not-loaded", _fixture("driver_not_loaded"), expected_devices=None),
    Scenario("mi300x-spx", _fixture("mi300x_spx"), expected_devices=2),
    # partitioned GPUs: one device per physical GPU plus one per partition
    Scenario("mi300x-cpx-2-boards", _fixture("mi300x_cpx"), expected_devices=2 + 16, expected=[
        # 206158430208 energy ticks x 15.2587890625 uJ = 3145728 J, once per board
        expect("amd:0000:0c:00", parent=None, power_watts=688.0, power_limit_watts=750.0,
               energy_joules=3145728.0, partition_share=None, index=0,
               # the mean of the eight XCCs' gfx_busy_inst; umc_activity
               compute_active_percent=41.0, compute_active_source="gfx_busy",
               memory_bandwidth_percent=30.0, interconnect_rx_bytes_per_second=0.0),
        expect("a6ff74a1-0000-1000-807c-d0b8a1e2c3f4", parent="amd:0000:0c:00", partition_share=0.125,
               power_watts=None, energy_joules=None, utilization_percent=91.0,
               compute_active_percent=20.0, compute_active_source="gfx_busy",
               memory_bandwidth_percent=None,
               memory_used_bytes=20 * GIB, memory_total_bytes=48 * GIB,
               processes=[(5000, 16 * GIB)]),
        expect("79ff74a1-0000-1000-80d1-1a2b3c4d5e6f", parent=None, power_watts=402.0,
               energy_joules=1572864.0),
        expect("amd:0000:22:00.0", parent="79ff74a1-0000-1000-80d1-1a2b3c4d5e6f",
               partition_share=0.125, power_watts=None, compute_active_percent=None),
    ]),
    Scenario("mi300x-dpx-multi-device-processes", _fixture("mi300x_dpx"), expected_devices=2 + 4,
             expected=[
        expect("amd:0000:4f:00", power_watts=700.0, energy_joules=6291456.0, utilization_percent=70.0,
               processes=[(7001, 30 * GIB), (7002, 30 * GIB)]),
        expect("b1ff74a1-0000-1000-807c-000000004f00", parent="amd:0000:4f:00", partition_share=0.5,
               power_watts=None, memory_used_bytes=40 * GIB, memory_total_bytes=192 * GIB,
               processes=[(7001, 20 * GIB)]),
        expect("b1ff74a1-0000-1000-807c-000000004f01", processes=[(7001, 10 * GIB), (7002, 30 * GIB)]),
        expect("b1ff74a1-0000-1000-807c-000000008e00", parent="amd:0000:8e:00",
               processes=[(7001, 5 * GIB)]),
        expect("amd:0000:8e:00", power_watts=650.0, energy_joules=3145728.0, processes=[(7001, 5 * GIB)]),
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

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

from .scenario import Scenario, ScenarioEnv


def _real(env: ScenarioEnv) -> Backend:
    backend = AmdBackend()
    if backend.probe().available:
        pytest.skip("libamd_smi.so and an AMD GPU are present: this scenario is for hosts without ROCm")
    return backend


def _fixture(name: str) -> Callable[[ScenarioEnv], Backend]:
    def build(env: ScenarioEnv) -> Backend:
        return fake_backend(FakeLibrary.from_fixture(name))
    return build


SCENARIOS: list[Scenario] = [
    Scenario("real-amdsmi-without-libamd_smi", _real, expected_devices=None),
    Scenario("no-devices", _fixture("no_devices"), expected_devices=None),
    Scenario("driver-not-loaded", _fixture("driver_not_loaded"), expected_devices=None),
    Scenario("mi300x-spx", _fixture("mi300x_spx"), expected_devices=2),
    # partitioned GPUs: one device per physical GPU plus one per partition
    Scenario("mi300x-cpx-2-boards", _fixture("mi300x_cpx"), expected_devices=2 + 16),
    Scenario("mi300x-dpx-multi-device-processes", _fixture("mi300x_dpx"), expected_devices=2 + 4),
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

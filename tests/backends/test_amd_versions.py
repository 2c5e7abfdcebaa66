"""Readings that differ between amdsmi releases, and a reused pid: each agrees with what
amd-smi shows on that release.

An older amdsmi is played by the installed package (over the fake ``libamd_smi.so``) with the
older Python layer's differences put back: ``amdsmi_get_energy_count`` naming its ticks
``power``, ``amdsmi_get_power_cap_info`` in W (before ROCm 6.1.2), ``AmdSmiTemperatureType``
without ``HOTSPOT`` (only ``JUNCTION``).
"""

from __future__ import annotations

import enum
import types
from typing import Any

import pytest

from allsmi.backends.amd import AmdBackend
from allsmi.backends.amd import convert as conv

from .amd_fake import FakeLibrary, load_amdsmi_against


def _older(module: types.ModuleType) -> types.ModuleType:
    old = types.ModuleType("amdsmi_older")
    old.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    real_energy, real_cap, real_temp = (module.amdsmi_get_energy_count,
                                        module.amdsmi_get_power_cap_info,
                                        module.amdsmi_get_temp_metric)

    def energy(handle: Any) -> dict[str, Any]:
        new = real_energy(handle)
        return {"power": new["energy_accumulator"], "counter_resolution": new["counter_resolution"],
                "timestamp": new["timestamp"]}

    def cap(handle: Any) -> dict[str, Any]:
        return {k: v // 1_000_000 if isinstance(v, int) else v for k, v in real_cap(handle).items()}

    members = {name: int(m) for name, m in module.AmdSmiTemperatureType.__members__.items()
               if name != "HOTSPOT"}
    sensors = enum.IntEnum("AmdSmiTemperatureType", members)  # type: ignore[misc]

    def temp(handle: Any, sensor: Any, metric: Any) -> int:
        return real_temp(handle, module.AmdSmiTemperatureType(int(sensor)), metric)

    old.amdsmi_get_energy_count = energy
    old.amdsmi_get_power_cap_info = cap
    old.AmdSmiTemperatureType = sensors
    old.amdsmi_get_temp_metric = temp
    return old


def _pair(fixture: str) -> tuple[Any, Any]:
    """(sample through the current package, sample through the older one) of one machine."""
    out = []
    for older in (False, True):
        lib = FakeLibrary.from_fixture(fixture)
        module = load_amdsmi_against(lib)
        if older:
            module = _older(module)
        backend = AmdBackend(loader=lambda m=module: m, process_lookup=lambda pid: (None, None))
        backend.open()
        try:
            out.append(backend.sample()[0])
        finally:
            backend.close()
    return out[0], out[1]


def test_an_older_amdsmi_reads_the_same_energy_power_cap_and_temperatures() -> None:
    new, old = _pair("mi300x_spx")
    assert new.energy_joules is not None and new.power_limit_watts is not None
    assert new.temperature_celsius is not None
    # amd-smi on the older release shows the same counter, cap and hotspot: so do we
    assert old.energy_joules == pytest.approx(new.energy_joules)
    assert old.power_limit_watts == new.power_limit_watts
    assert old.temperature_celsius == new.temperature_celsius
    assert old.details.get("temperature_sensor") == "hotspot"
    assert old.details.get("memory_temperature_celsius") == new.details.get(
        "memory_temperature_celsius")


def test_energy_ticks_under_the_older_key() -> None:
    assert conv.energy_joules({"power": 65536, "counter_resolution": 15.2587890625}) == 1.0
    assert conv.energy_joules({"power": 0xFFFFFFFFFFFFFFFF, "counter_resolution": 15.2}) is None
    # both keys (later 6.x): the new one counts
    assert conv.energy_joules({"energy_accumulator": 65536, "power": 1,
                               "counter_resolution": 15.2587890625}) == 1.0


def test_power_cap_in_watts_from_releases_before_6_1_2() -> None:
    assert conv.power_cap_watts({"power_cap": 750}) == 750.0
    assert conv.power_cap_watts({"power_cap": 750_000_000}) == 750.0
    assert conv.power_cap_watts({"power_cap": 0xFFFF}) is None


def test_a_pid_reused_by_another_process_has_no_engine_share() -> None:
    lib = FakeLibrary.from_fixture("mi300x_spx")
    now = [10.0]
    module = load_amdsmi_against(lib)
    backend = AmdBackend(loader=lambda: module, process_lookup=lambda pid: (None, None),
                         clock=lambda: now[0])
    backend.open()
    backend.sample()
    rows = lib.devices[0]["amdsmi_get_gpu_process_list"]
    # pid of rows[0] exits; another program gets the pid and runs 0.9 s of its 1 s life
    now[0] += 1.0
    rows[0]["name"] = "other_program"
    rows[0]["engine_usage"]["gfx"] += int(0.9e9)
    rows[1]["engine_usage"]["gfx"] += int(0.5e9)
    procs = {p.pid: p for p in backend.sample()[0].processes}
    assert procs[rows[0]["pid"]].utilization_percent is None
    assert procs[rows[1]["pid"]].utilization_percent == pytest.approx(50.0)
    # the next cycle measures the new process from the counter it had then
    now[0] += 1.0
    rows[0]["engine_usage"]["gfx"] += int(0.25e9)
    procs = {p.pid: p for p in backend.sample()[0].processes}
    assert procs[rows[0]["pid"]].utilization_percent == pytest.approx(25.0)
    backend.close()

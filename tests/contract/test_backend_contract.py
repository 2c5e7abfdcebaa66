"""One contract suite, run over every registered backend and every fixture scenario."""

from __future__ import annotations

import math
import threading
from dataclasses import fields as dc_fields
from typing import Any, Callable

import pytest

from allsmi.collection import registry
from allsmi.backend_api import Backend, BackendError, ProbeResult
from allsmi.schema.fields import MEASURED_FIELDS
from allsmi.schema import COMPUTE_ACTIVE_SOURCES, HEALTH_STATES, DeviceSample, ProcessSample

from .fixture_truth import undeclared_readings
from .scenario import Scenario, ScenarioEnv, check_expected, scenario_module


def _scenarios() -> list[tuple[str, Scenario]]:
    cases = []
    for name in registry.names():
        module = scenario_module(name)
        if module is None:
            cases.append((name, None))
            continue
        for scenario in module.SCENARIOS:
            cases.append((name, scenario))
    return cases


CASES = _scenarios()

#: A backend call may take its own timeout plus this much; past it, the suite fails at once
#: instead of waiting for a hung call (a second tool that hangs in ``open()`` or ``sample()``).
CALL_SLACK = 10.0


def _within(backend: Backend, what: str, call: Callable[[], Any]) -> Any:
    """``call()``, failing the test when it does not return within the backend's timeout plus
    :data:`CALL_SLACK` (the call is left on a daemon thread; the backend is closed)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            result["error"] = exc
    worker = threading.Thread(target=run, daemon=True, name=f"contract-{what}")
    worker.start()
    limit = getattr(backend, "timeout_seconds", 5.0) + CALL_SLACK
    worker.join(limit)
    if worker.is_alive():
        threading.Thread(target=backend.close, daemon=True).start()
        pytest.fail(f"{type(backend).name}: {what} did not return within {limit:g} s")
    if "error" in result:
        raise result["error"]
    return result.get("value")


#: What an accelerator's readings must look like whatever the vendor: a value outside these is a
#: unit slip (watts left in mW or kW, bytes in MiB), checked against the device's class.
ACCELERATOR_POWER_WATTS = (5.0, 3000.0)
ACCELERATOR_MEMORY_BYTES = (256 * 2**20, 8 * 2**40)


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_backend_has_scenarios(name: str) -> None:
    module = scenario_module(name)
    assert module is not None, f"backend {name} has no scenario module (tests/contract/scenarios_{name}.py)"
    assert module.SCENARIOS, f"backend {name} declares no fixture scenarios"
    assert any(s.expected_devices is None for s in module.SCENARIOS), \
        f"backend {name} has no 'no hardware' scenario"
    assert any(s.expected_devices for s in module.SCENARIOS), \
        f"backend {name} has no scenario with devices"
    assert any(s.expected for s in module.SCENARIOS), \
        f"backend {name}: no scenario declares exact values (Scenario.expected, see scenario.expect)"


def _check_device(dev: DeviceSample, backend: Backend) -> None:
    assert isinstance(dev, DeviceSample)
    assert dev.id and isinstance(dev.id, str)
    assert dev.vendor == backend.vendor
    assert dev.kind in ("gpu", "npu")
    assert dev.backend == backend.display_name
    assert dev.health in HEALTH_STATES
    assert dev.resource_group is None, "resource groups are assigned by the collector"
    for f in (dev.index,):
        assert f is None or (isinstance(f, int) and f >= 0)
    for text in ("uuid", "name", "bus_id", "driver_version", "firmware_version", "parent"):
        value = getattr(dev, text)
        assert value is None or (isinstance(value, str) and value.strip()), (text, value)
    for m in MEASURED_FIELDS:
        value = getattr(dev, m.field)
        if value is None:
            continue
        assert isinstance(value, (int, float)) and not isinstance(value, bool), (m.field, value)
        assert math.isfinite(value), (m.field, value)
        if m.field.endswith("_bytes"):
            assert isinstance(value, int), f"{m.field} must be an int byte count"
        if m.minimum is not None:
            assert value >= m.minimum, (dev.id, m.field, value)
        if m.maximum is not None:
            assert value <= m.maximum, (dev.id, m.field, value)
    # compute activity is never without what it measures, and a source never without a value
    assert (dev.compute_active_percent is None) == (dev.compute_active_source is None), \
        (dev.id, dev.compute_active_percent, dev.compute_active_source)
    assert dev.compute_active_source in (None, *COMPUTE_ACTIVE_SOURCES), dev.id
    if dev.memory_used_bytes is not None and dev.memory_total_bytes is not None:
        assert dev.memory_used_bytes <= dev.memory_total_bytes, dev.id
    if dev.memory_total_bytes is not None:
        assert dev.memory_total_bytes >= 1024 ** 2, "memory_total_bytes looks like MiB, not bytes"
    _check_class_units(dev)
    if dev.health == "lost":
        assert dev.utilization_percent is None and dev.power_watts is None, \
            "a lost device must not report values"
        # nor list its processes: who used it is unknown, never "nobody" (a holder then reads
        # "waiting: nothing" and the device "not allocated")
        assert dev.processes is None, f"{dev.id}: a lost device's processes are unknown (None)"
    assert dev.processes is None or isinstance(dev.processes, tuple)
    pids = [p.pid for p in dev.processes or ()]
    assert len(pids) == len(set(pids)), "processes must be deduplicated by pid"
    for proc in dev.processes or ():
        assert isinstance(proc, ProcessSample)
        assert isinstance(proc.pid, int) and proc.pid > 0
        assert proc.memory_bytes is None or (isinstance(proc.memory_bytes, int) and proc.memory_bytes >= 0)
    for key, value in dev.details.items():
        assert isinstance(key, str)
        assert not (isinstance(value, float) and not math.isfinite(value)), (key, value)


def _check_class_units(dev: DeviceSample) -> None:
    """Units relative to the device's class: an accelerator (``gpu``/``npu``) is not limited to
    3 W nor drawing 3 W at 80 % busy (a value left in kW), nor 40000 W (in mW); a whole device's
    memory is not 16 KiB (left in MiB) nor petabytes (in KiB taken as bytes)."""
    low, high = ACCELERATOR_POWER_WATTS
    if dev.power_limit_watts is not None and dev.parent is None:
        assert low <= dev.power_limit_watts <= high, \
            f"{dev.id}: power limit {dev.power_limit_watts} W is no accelerator's (a unit slip?)"
    if dev.power_watts is not None:
        assert dev.power_watts <= high, f"{dev.id}: {dev.power_watts} W (left in mW?)"
        if dev.utilization_percent is not None and dev.utilization_percent >= 50:
            assert dev.power_watts >= low, \
                f"{dev.id}: {dev.power_watts} W at {dev.utilization_percent} % busy (left in kW?)"
    if dev.memory_total_bytes is not None and dev.parent is None:
        mem_low, mem_high = ACCELERATOR_MEMORY_BYTES
        assert mem_low <= dev.memory_total_bytes <= mem_high, \
            f"{dev.id}: {dev.memory_total_bytes} bytes of memory is no accelerator's (a unit slip?)"


#: Field families whose unit a backend most easily forgets to convert, and the wrong value: a
#: byte count left in MiB, watts left in milliwatts.
UNIT_SLIPS = {"memory_used_bytes": lambda v: v // 2**20, "memory_total_bytes": lambda v: v // 2**20,
              "power_watts": lambda v: v * 1000, "power_limit_watts": lambda v: v * 1000}


def _check_units_are_caught(devices: list[DeviceSample], scenario: Scenario) -> None:
    """The declared truth would catch a value left in MiB or mW: each declared non-zero bytes or
    watts value, slipped to the wrong unit, fails :func:`check_expected`."""
    from dataclasses import replace
    for device_id, values in scenario.expected.items():
        dev = next(d for d in devices if d.id == device_id)
        for key, slip in UNIT_SLIPS.items():
            want = values.get(key)
            if not want:
                continue
            slipped = replace(dev, **{key: slip(getattr(dev, key))})
            with pytest.raises(AssertionError):
                check_expected([slipped], {device_id: {key: want}})


@pytest.mark.parametrize("name", registry.names())
def test_declared_truth_covers_the_units_a_backend_converts(name: str) -> None:
    """Every backend declares exact values (``expect``) for at least one byte count and one
    wattage it reports, so that a value left in MiB or mW fails the contract suite."""
    cls = registry.load(name)
    module = scenario_module(name)
    assert module is not None
    declared = {key for s in module.SCENARIOS for values in s.expected.values()
                for key, value in values.items() if isinstance(value, (int, float)) and value}
    for family in (("memory_used_bytes", "memory_total_bytes"), ("power_watts", "power_limit_watts")):
        reported = [f for f in family if f not in cls.unreported_fields]
        if reported:
            assert declared & set(reported), \
                f"{name}: no scenario declares an exact non-zero value of {' or '.join(reported)}"


@pytest.mark.parametrize("name", registry.names())
def test_declared_readings_are_read_from_the_fixture(name: str) -> None:
    """Each bytes, watts, joules and degrees value a backend's scenarios declare (process memory
    included) is read from its fixture in a declared unit (:mod:`tests.contract.fixture_truth`),
    not typed in by the scenario's author: the truth cannot share the author's unit slip."""
    module = scenario_module(name)
    assert module is not None
    typed = [f"{s.name}: {problem}" for s in module.SCENARIOS for problem in undeclared_readings(s.expected)]
    assert not typed, f"{name}: declare where in the fixture each value is (fixture_truth), not the number:\n" + \
        "\n".join(typed)


@pytest.mark.parametrize(("name", "scenario"), [c for c in CASES if c[1] is not None],
                         ids=[f"{n}-{s.name}" for n, s in CASES if s is not None])
def test_contract(name: str, scenario: Scenario, tmp_path, monkeypatch) -> None:
    backend = scenario.build(ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch))
    assert isinstance(backend, Backend)
    assert type(backend).name == name
    probe = _within(backend, "probe()", backend.probe)
    assert isinstance(probe, ProbeResult)
    if scenario.expected_devices is None and not probe.available:
        assert probe.reason, "an unavailable probe must say why"
        _within(backend, "close()", backend.close)
        return
    try:
        _within(backend, "open()", backend.open)
        devices = list(_within(backend, "sample()", backend.sample))
        again = list(_within(backend, "a second sample()", backend.sample))
    except BackendError as exc:  # pragma: no cover - reported clearly below
        pytest.fail(f"{name}/{scenario.name}: {exc}")
    finally:
        _within(backend, "close()", backend.close)
        _within(backend, "close() again", backend.close)  # idempotent
    expected = scenario.expected_devices or 0
    # sample() after close(): reopen by itself, or say it is not open; never stale or empty data.
    try:
        after_close = list(_within(backend, "sample() after close()", backend.sample))
    except BackendError as exc:
        assert str(exc), "the error must say why"
    else:
        assert len(after_close) == expected, "sample() after close() must reopen, not return stale data"
    finally:
        _within(backend, "close()", backend.close)
    assert len(devices) == expected
    assert len(again) == expected
    # The collector closes a backend before it retries one that failed or vanished:
    # open() after close() must work like the first time.
    try:
        _within(backend, "open() after close()", backend.open)
        reopened = list(_within(backend, "sample() after reopening", backend.sample))
    except BackendError as exc:  # pragma: no cover - reported clearly below
        pytest.fail(f"{name}/{scenario.name}: open() after close() failed: {exc}")
    finally:
        _within(backend, "close()", backend.close)
    assert len(reopened) == expected
    ids = [d.id for d in devices]
    assert len(ids) == len(set(ids)), "device ids must be unique"
    check_expected(devices, scenario.expected)
    _check_units_are_caught(devices, scenario)
    by_id = {d.id: d for d in devices}
    for device_id in scenario.unread:  # listed, but no reading row this sample
        assert device_id in by_id, f"{device_id} is listed by the tool and must be reported"
        dev = by_id[device_id]
        assert dev.health == "degraded", f"{device_id}: no reading row, so degraded, not {dev.health}"
        assert dev.utilization_percent is None and dev.memory_used_bytes is None, dev
    seen: set[str] = set()
    for dev in devices:
        _check_device(dev, backend)
        if dev.parent is not None:
            assert dev.parent in seen, "a partition comes after its parent"
        seen.add(dev.id)
    # board power is counted once: a partition never repeats its parent's power
    for dev in devices:
        if dev.parent is not None:
            assert dev.power_watts is None and dev.energy_joules is None, \
                f"{dev.id}: board power/energy belongs to the parent only"
    assert {f.name for f in dc_fields(DeviceSample)} >= {"id", "processes"}


@pytest.mark.parametrize(("values", "refused"), [
    ({"compute_active_percent": 40.0}, True),  # activity without what it measures
    ({"compute_active_source": "sm_active"}, True),  # a source without a value
    ({"compute_active_percent": 40.0, "compute_active_source": "gfx_busy"}, False),
    ({"interconnect_rx_bytes_per_second": -1.0}, True),
    ({"memory_bandwidth_percent": 100.5}, True),
    ({"sm_occupancy_percent": float("nan")}, True),
])
def test_contract_checks_the_activity_fields(values, refused) -> None:
    """The contract's device check refuses activity without its source and values out of
    range (set past the schema's own cleaning, as a backend bug would need to)."""
    backend = registry.load("simulated")()
    dev = DeviceSample(id="d0", vendor=backend.vendor, kind="gpu", backend=backend.display_name,
                       health="ok")
    for name, value in values.items():
        object.__setattr__(dev, name, value)
    if refused:
        with pytest.raises(AssertionError):
            _check_device(dev, backend)
    else:
        _check_device(dev, backend)

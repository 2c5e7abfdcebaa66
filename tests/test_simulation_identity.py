"""The simulation is the hardware it claims to be (issue 15, item 5).

Each simulated backend of the ``mixed`` scenario is compared with the real backend it
impersonates, run on that backend's own contract fixtures (tests/contract/scenarios_*.py,
real tool and library output): vendor and kind, the measured fields that are always
``None`` (``Backend.unreported_fields``, checked against the fixtures in both directions),
the model names, and the identity of partitions (bus id, ``partition_share``, name).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from allsmi.collection import registry
from allsmi.backend_api import Backend
from allsmi.backends.simulated import load_scenario, simulated_backends
from allsmi.cli.doctor import device_node_patterns
from allsmi.schema.fields import MEASURED_FIELDS
from allsmi.schema import DeviceSample

from .contract.scenario import ScenarioEnv, scenario_module

MIXED = load_scenario("mixed")
TARGETS = MIXED.backend_names()
MEASURED = frozenset(m.field for m in MEASURED_FIELDS)
#: Instants spread over several job cycles, so that idle and busy devices both show.
INSTANTS = [MIXED.epoch + 86400.0 * 300 + 613.0 * k for k in range(12)]


@dataclass
class RealOutput:
    """Every device the real backend produced over its contract scenarios with devices."""

    scenarios: list[list[DeviceSample]] = field(default_factory=list)

    @property
    def devices(self) -> list[DeviceSample]:
        return [d for devs in self.scenarios for d in devs]

    def whole(self) -> list[DeviceSample]:
        return [d for d in self.devices if d.parent is None and d.health != "lost"]

    def partitions(self) -> list[DeviceSample]:
        return [d for d in self.devices if d.parent is not None and d.health != "lost"]


_REAL: dict[str, RealOutput] = {}


def real_output(name: str, tmp_path_factory: pytest.TempPathFactory) -> RealOutput:
    """Run backend ``name`` on each of its contract scenarios that has devices (cached)."""
    if name not in _REAL:
        module = scenario_module(name)
        assert module is not None, name
        out = RealOutput()
        for scenario in module.SCENARIOS:
            if not scenario.expected_devices:
                continue
            with pytest.MonkeyPatch.context() as mp:
                backend = scenario.build(ScenarioEnv(tmp_path_factory.mktemp(name), mp))
                try:
                    backend.open()
                    out.scenarios.append(list(backend.sample()))
                finally:
                    backend.close()
        assert out.scenarios, f"{name}: no contract scenario with devices"
        _REAL[name] = out
    return _REAL[name]


def _always_none(devices: list[DeviceSample]) -> frozenset[str]:
    return frozenset(f for f in MEASURED if all(getattr(d, f) is None for d in devices))


def _simulated(target: str) -> list[list[DeviceSample]]:
    """The simulated devices of ``target`` at each instant of :data:`INSTANTS`."""
    runs = []
    for at in INSTANTS:
        [backend] = [b for b in simulated_backends(MIXED, clock=lambda at=at: at) if b.display_name == target]
        backend.open()
        runs.append([d for d in backend.sample() if d.health != "lost"])
    return runs


@pytest.mark.parametrize("name", registry.hardware_names())
def test_declared_unreported_fields_agree_with_the_real_output(name: str, tmp_path_factory) -> None:
    cls = registry.load(name)
    declared = cls.unreported_fields
    assert declared <= MEASURED, f"{name}: unknown fields declared {sorted(declared - MEASURED)}"
    real = real_output(name, tmp_path_factory)
    for dev in real.devices:
        reported = sorted(f for f in declared if getattr(dev, f) is not None)
        assert not reported, f"{name} declares {reported} unreported, yet {dev.id} reports them"
    # Complete: every field not declared is reported by some device of some fixture.
    missing = sorted(_always_none(real.devices) - declared)
    assert not missing, f"{name} never reports {missing} in its fixtures: declare them unreported_fields"


@pytest.mark.parametrize("name", TARGETS)
def test_simulated_backend_has_the_real_backends_known_and_unknown_fields(name: str, tmp_path_factory) -> None:
    cls = registry.load(name)
    real = real_output(name, tmp_path_factory)
    runs = _simulated(name)
    whole = [d for devs in runs for d in devs if d.parent is None]
    assert whole
    assert {(d.vendor, d.kind) for d in whole} == {(cls.vendor, cls.kind)}
    sim_none = _always_none(whole)
    # Nothing the real backend never reports is invented...
    assert cls.unreported_fields <= sim_none, sorted(cls.unreported_fields - sim_none)
    # ...and whatever else the simulation leaves unknown is unknown on some real hardware
    # (a fan-less SXM board, a GPU without an energy counter): one real fixture where all
    # whole devices lack it.
    hardware_gaps = frozenset().union(*(_always_none([d for d in devs if d.parent is None and d.health != "lost"])
                                        for devs in real.scenarios if any(d.parent is None for d in devs)))
    unexplained = sorted(sim_none - cls.unreported_fields - hardware_gaps)
    assert not unexplained, f"simulated {name} leaves {unexplained} unknown; no real {name} fixture does"


@pytest.mark.parametrize("name", TARGETS)
def test_simulated_model_names_are_the_real_backends_names(name: str, tmp_path_factory) -> None:
    cls = registry.load(name)
    real_names = {d.name for d in real_output(name, tmp_path_factory).whole()}
    sim_names = {d.name for devs in _simulated(name) for d in devs if d.parent is None}
    assert sim_names <= real_names, f"simulated {name} names {sim_names - real_names}; the real backend " \
                                    f"names the same hardware one of {sorted(n for n in real_names if n)}"
    for model in sim_names | real_names:
        assert cls.model_name(model) == model, f"{name}.model_name is not idempotent on {model!r}"


def test_simulated_partitions_carry_the_real_partitions_identity(tmp_path_factory) -> None:
    """MIG instances: the GPU's bus id, compute slices over the GPU's as partition_share,
    "<GPU name> MIG <profile>" as name, no index, and only the fields NVML reports for them."""
    real = real_output("nvidia", tmp_path_factory)
    simulated = _simulated("nvidia")
    sim = [d for devs in simulated for d in devs]
    profile = re.compile(r"^(?P<parent>.+) MIG (?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.\d+gb$")
    runs = [("real", devs) for devs in real.scenarios] + [("simulated", devs) for devs in simulated]
    for label in ("real", "simulated"):
        assert any(d.parent for lab, devs in runs if lab == label for d in devs), f"{label}: no MIG instance"
    for label, devices in runs:
        by_id = {d.id: d for d in devices}
        for part in (d for d in devices if d.parent is not None and d.health != "lost"):
            parent = by_id[part.parent]
            assert part.bus_id is not None and part.bus_id == parent.bus_id, (label, part.id)
            assert part.index is None, (label, part.id)
            found = profile.match(part.name or "")
            assert found is not None and found["parent"] == parent.name, (label, part.name)
            slices = int(found["c"] or found["g"])
            assert part.partition_share == pytest.approx(slices / 7), (label, part.name, part.partition_share)
    real_parts = [d for d in real.devices if d.parent is not None and d.health == "ok"]
    sim_parts = [d for d in sim if d.parent is not None]
    assert _always_none(sim_parts) == _always_none(real_parts)


def test_raw_tool_model_names_become_the_real_backends_names(tmp_path: Path) -> None:
    """A scenario written with the tool's own words (furiosa-smi's "RNGD", tt-smi's generation and
    board type) shows the names the real backends show."""
    text = (Path(MIXED.source).read_text()
            .replace('model = "Furiosa RNGD"', 'model = "RNGD"')
            .replace('model = "Tenstorrent Blackhole p150a"', 'model = "Blackhole p150a"'))
    path = tmp_path / "raw.toml"
    path.write_text(text)
    names = set()
    for backend in simulated_backends(str(path), clock=lambda: INSTANTS[0]):
        backend.open()
        names |= {d.name for d in backend.sample()}
    assert {"Furiosa RNGD", "Tenstorrent Blackhole p150a"} <= names
    assert not names & {"RNGD", "Blackhole p150a"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
    return subprocess.run([sys.executable, "-m", "allsmi", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


def test_snapshot_status_says_simulated_and_a_rule_for_real_names_matches(tmp_path: Path) -> None:
    """Through the CLI: each backend's status message says it is simulated, and model rules
    written with the real backends' names pick the simulated devices."""
    config = tmp_path / "allsmi.toml"
    config.write_text('[groups.lab]\nlabels = { team = "lab" }\n\n'
                      '[[rules]]\nmodel = "Tenstorrent Blackhole*"\nresource_group = "lab"\n\n'
                      '[[rules]]\nmodel = "Furiosa RNGD"\nresource_group = "lab"\n')
    result = _cli("snapshot", "--simulate", "mixed", "--format", "json", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert {b["name"]: b["message"] for b in doc["backends"]} == {
        name: "simulated (scenario mixed)" for name in TARGETS}
    assert all(b["status"] == "ok" for b in doc["backends"])
    by_backend: dict[str, list[dict]] = {}
    for dev in doc["devices"]:
        by_backend.setdefault(dev["backend"], []).append(dev)
    for name in ("tenstorrent", "furiosa"):
        assert by_backend[name] and all(d["resource_group"] == "lab" for d in by_backend[name]), name
    tt = by_backend["tenstorrent"]
    assert all(d["utilization_percent"] is None and d["memory_used_bytes"] is None
               and d["memory_total_bytes"] is None for d in tt)
    rbln = by_backend["rebellions"]
    assert all(d["clock_mhz"] is None and d["power_limit_watts"] is None for d in rbln)
    migs = [d for d in by_backend["nvidia"] if d["parent"]]
    assert len(migs) == 3 and all(d["bus_id"] and d["partition_share"] for d in migs)


@pytest.mark.parametrize("name", registry.hardware_names())
def test_every_hardware_backend_declares_its_device_nodes(name: str) -> None:
    cls: type[Backend] = registry.load(name)
    assert cls.device_nodes, f"{name} declares no device_nodes for allsmi doctor"
    assert all(p.startswith("/dev/") for p in cls.device_nodes)
    assert device_node_patterns(cls()) == cls.device_nodes

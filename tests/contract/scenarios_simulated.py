"""Contract scenarios for the simulated backend: every backend it impersonates, and edge cases."""

from __future__ import annotations

from pathlib import Path

from allsmi.backends.simulated import SimulatedBackend, load_scenario

from .fixture_truth import toml_value
from .scenario import REPO, Scenario, ScenarioEnv, expect

MIXED = REPO / "backends" / "simulated" / "scenarios" / "mixed.toml"
#: The scenario files name each static fact's unit in its key.
_SUFFIX_UNITS = {"_bytes": "B", "_watts": "W", "_celsius": "C"}


def _static(backend: str, key: str):
    """The static fact ``key`` (``memory_total_bytes``) of ``backend``'s devices in the mixed scenario."""
    unit = next(u for suffix, u in _SUFFIX_UNITS.items() if key.endswith(suffix))
    return toml_value(MIXED, f"devices/backend={backend}/{key}", unit)


FIXED = 1_790_000_000.0  # a fixed instant: deterministic values


def _sim(target: str, scenario: str = "mixed", at: float = FIXED):
    def build(env: ScenarioEnv) -> SimulatedBackend:
        return SimulatedBackend(scenario=load_scenario(scenario), target=target, clock=lambda: at)
    return build


def _empty(env: ScenarioEnv) -> SimulatedBackend:
    path = Path(env.tmp_path) / "empty.toml"
    path.write_text('name = "empty"\nseed = 1\n')
    return SimulatedBackend(scenario=str(path), target="nvidia")


def _lost_gpu(env: ScenarioEnv) -> SimulatedBackend:
    scenario = load_scenario("mixed-faults")
    # inside the 'lost' window of nvidia:3 (every 600 s, first 120 s)
    at = scenario.epoch + 600 * 1000 + 10
    return SimulatedBackend(scenario=scenario, target="nvidia", clock=lambda: at)


SCENARIOS = [
    Scenario("no-devices", _empty, None),
    Scenario("mixed-nvidia-with-mig", _sim("nvidia"), 11),
    Scenario("mixed-amd", _sim("amd"), 8),
    Scenario("mixed-gaudi", _sim("gaudi"), 8),
    Scenario("mixed-furiosa", _sim("furiosa"), 4),
    # The scenario's static facts: the simulation converts nothing, but a units slip in the
    # model (GiB taken as bytes) would still show here. The scenario's power limit and
    # clocks are not reported: rbln-smi prints neither (RebellionsBackend.unreported_fields).
    Scenario("mixed-rebellions", _sim("rebellions"), 4, dict([
        expect("fd611fdd-5ebf-3525-5747-9b39fc2f4058", name="RBLN-CA12",
               memory_total_bytes=_static("rebellions", "memory_total_bytes"),
               power_limit_watts=None, clock_mhz=None, bus_id="0000:65:00.0")])),
    # tt-smi has no utilization or memory; the name is the real backend's.
    Scenario("mixed-tenstorrent", _sim("tenstorrent"), 2, dict([
        expect("tenstorrent:19d3004e536bb800", name="Tenstorrent Blackhole p150a", utilization_percent=None,
               memory_used_bytes=None, memory_total_bytes=None,
               power_limit_watts=_static("tenstorrent", "power_limit_watts"))])),
    Scenario("faults-lost-gpu", _lost_gpu, 11),
]

"""Contract scenarios for the AWS Neuron backend: a stand-in ``neuron-ls`` printing a fixture, and
a stand-in ``neuron-monitor`` that keeps printing its report (the shared stand-in's streaming
mode), as the real one does."""

from __future__ import annotations

import json

from allsmi.backends.neuron import MONITOR, TOOL, NeuronBackend

from . import standin
from .fixture_truth import json_value, jsonl_value, total
from .scenario import FIXTURES, CliTool, Scenario, ScenarioEnv, expect

NEURON = FIXTURES / "neuron"
#: How often the stand-in monitor prints its report (the real one: its configured period).
EVERY = 0.2


def backend_for(env: ScenarioEnv, listing: str | None, monitor: str | None = None, *,
                listing_text: str | None = None, timeout_seconds: float = 5.0) -> NeuronBackend:
    """``neuron-ls`` printing ``listing`` (or ``listing_text``); ``neuron-monitor`` printing
    ``monitor`` every :data:`EVERY` s, or no monitor at all (``None``)."""
    bindir = env.tmp_path / "bin"
    pidfile = str(bindir / "pids")
    route = standin.route(NEURON, listing, text=listing_text or "", pidfile=pidfile)
    ls = standin.write_standin(bindir, "neuron-ls", {}, default=route)
    env.monkeypatch.setenv(TOOL.env_var, str(ls))
    if monitor is None:
        env.monkeypatch.setenv(MONITOR.env_var, str(bindir / "no-neuron-monitor"))
    else:
        mon = standin.write_standin(bindir, "neuron-monitor", {}, placeholders=("-c",),
                                    default=standin.route(NEURON, monitor, every=EVERY, pidfile=pidfile))
        env.monkeypatch.setenv(MONITOR.env_var, str(mon))
    return NeuronBackend(timeout_seconds=timeout_seconds, search_dirs=(), lookup_user=lambda pid: None)


def _absent(env: ScenarioEnv) -> NeuronBackend:
    empty = env.tmp_path / "empty"
    empty.mkdir()
    for var in (TOOL.env_var, MONITOR.env_var):
        env.monkeypatch.delenv(var, raising=False)
    env.monkeypatch.setenv("PATH", str(empty))
    return NeuronBackend(search_dirs=(str(empty),))


def _sixty_four(env: ScenarioEnv) -> NeuronBackend:
    """64 devices of two NeuronCores each (global cores 0-127), no application."""
    row = json.loads((NEURON / "neuron-ls-trn1.2xlarge-idle.json").read_text())[0]
    rows = []
    for n in range(64):
        rows.append(dict(row, neuron_device=n, bdf=f"{n + 16:02x}:00.0",
                         neuroncore_ids=[2 * n, 2 * n + 1]))
    return backend_for(env, None, "neuron-monitor-trn1-idle.jsonl", listing_text=json.dumps(rows))


TRN1_LS, TRN2_LS = "neuron-ls-trn1.2xlarge-idle.json", "neuron-ls-trn2-4dev-two-apps.json"
TWO_APPS, COUNTERS_ERROR = "neuron-monitor-trn2-two-apps.jsonl", "neuron-monitor-trn2-counters-error.jsonl"
#: What neuron-monitor counts in each NeuronCore's memory, in bytes (``neuron_runtime_used_bytes``).
CORE_MEMORY = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")


def _memory_size(listing: str, device: int):
    """neuron-ls's ``memory_size`` of ``device``, in bytes."""
    return json_value(NEURON / listing, f"neuron_device={device}/memory_size", "B")


def _held(report: str, pid: int, cores: range):
    """What ``pid`` holds on ``cores``: every category of neuron-monitor's per-core breakdown."""
    base = f"neuron_runtime_data/pid={pid}/report/memory_used/neuron_runtime_used_bytes/usage_breakdown"
    return total(*(jsonl_value(NEURON / report, 0, f"{base}/neuroncore_memory_usage/{core}/{what}", "B")
                   for core in cores for what in CORE_MEMORY))


SCENARIOS: list[Scenario] = [
    Scenario("no-hardware-tools-absent", _absent, None),
    Scenario("no-hardware-tool-sees-no-device",
             lambda env: backend_for(env, "neuron-ls-no-devices.json", "neuron-monitor-trn1-idle.jsonl"), None),
    # No application: every core idle (0 %), no memory held.
    Scenario("trn1-idle", lambda env: backend_for(env, "neuron-ls-trn1.2xlarge-idle.json",
                                                  "neuron-monitor-trn1-idle.jsonl"), 1, dict([
        expect("neuron:0000:00:1e.0", index=0, name="AWS Trainium", bus_id="0000:00:1e.0",
               utilization_percent=0.0, compute_active_percent=0.0, compute_active_source="core_busy",
               memory_used_bytes=0, memory_total_bytes=_memory_size(TRN1_LS, 0), power_watts=None,
               details__core_first=0, details__core_count=2, processes=[])])),
    Scenario("trn2-two-apps", lambda env: backend_for(env, "neuron-ls-trn2-4dev-two-apps.json",
                                                      "neuron-monitor-trn2-two-apps.jsonl"), 4, dict([
        # (42 + 58 + 61.5 + 38.5) / 4 cores
        expect("neuron:0000:cc:00.0", name="AWS Trainium2", utilization_percent=50.0,
               memory_used_bytes=_held(TWO_APPS, 268911, range(0, 4)), memory_total_bytes=_memory_size(TRN2_LS, 0),
               details__core_first=0, details__core_count=4,
               processes=[(268911, _held(TWO_APPS, 268911, range(0, 4)))]),
        # (10 + 20 + 30 + 40) / 4
        expect("neuron:0000:b5:00.0", utilization_percent=25.0, details__core_first=4,
               processes=[(268911, _held(TWO_APPS, 268911, range(4, 8)))]),
        # (90 + 70 + 0 + 0) / 4: two of its four cores in use
        expect("neuron:0000:b6:00.0", utilization_percent=40.0, memory_used_bytes=_held(TWO_APPS, 270001, range(8, 10)),
               processes=[(270001, _held(TWO_APPS, 270001, range(8, 10)))]),
        expect("neuron:0000:cb:00.0", utilization_percent=0.0, memory_used_bytes=0, processes=[])])),
    Scenario("trn2-counters-error", lambda env: backend_for(env, "neuron-ls-trn2-4dev-two-apps.json",
                                                            "neuron-monitor-trn2-counters-error.jsonl"), 4, dict([
        expect("neuron:0000:b6:00.0", utilization_percent=None, compute_active_percent=None,
               memory_used_bytes=_held(COUNTERS_ERROR, 270001, range(8, 10))),
        expect("neuron:0000:cc:00.0", utilization_percent=50.0)])),
    Scenario("monitor-missing", lambda env: backend_for(env, "neuron-ls-trn2-4dev-two-apps.json"), 4, dict([
        expect("neuron:0000:cc:00.0", utilization_percent=None, memory_used_bytes=None,
               memory_total_bytes=_memory_size(TRN2_LS, 0), processes=[(268911, None)])])),
    # Device 0 lists no neuroncore_ids: its cores are counted from nc_count (0 and 1).
    Scenario("older-neuron-ls", lambda env: backend_for(env, "neuron-ls-older-no-memory.json",
                                                        "neuron-monitor-trn1-idle.jsonl"), 2, dict([
        expect("neuron:0000:00:1e.0", memory_total_bytes=None, details__core_first=0, details__core_count=2,
               utilization_percent=0.0, processes=[(4242, None)]),
        expect("neuron:0000:00:1f.0", memory_total_bytes=_memory_size("neuron-ls-older-no-memory.json", 1),
               details__core_first=2)])),
    Scenario("sixty-four-devices", _sixty_four, 64, dict([
        expect("neuron:0000:4f:00.0", index=63, details__core_first=126, utilization_percent=0.0)])),
]

#: The fault-and-drift matrix drives both tools: neuron-ls (one run per sample) and the
#: long-running neuron-monitor (a missing monitor leaves the devices listed, values unknown).
CLI = (
    CliTool(env_var=TOOL.env_var, executable="neuron-ls", partial=NEURON / "neuron-ls-truncated.json",
            calls=("--json-output",),
            drift={"oldest": "older-neuron-ls", "newest": "trn2-two-apps", "na-fields": "trn2-counters-error",
                   "64-devices": "sixty-four-devices", "multi-process": "trn2-two-apps"}),
    CliTool(env_var=MONITOR.env_var, executable="neuron-monitor",
            partial=NEURON / "neuron-monitor-trn2-two-apps.jsonl", calls=("-c PATH",), stream=True,
            expect={"missing": ("ok", "is not an executable file")}),
)

"""The fault-and-drift matrix over every CLI backend (every registered backend whose scenario
module declares ``CLI``; a new vendor joins with its entry point and scenario file alone).

Fault cells replace the vendor tool with the shared stand-in answering every call with one
fault (missing, hang, hang ignoring SIGTERM with a grandchild holding the pipes, slow,
crash, abort, signal, garbage, partial output, a tool that exits and leaves a grandchild).
Drift cells run the vendor's own scenarios named in ``CLI.drift`` (oldest and newest tool
versions, N/A fields, 64 devices, partitions, processes on several devices). Each cell runs
the backend through the collector next to a healthy companion backend and asserts:

* the companion's values exact (its scenario's declared values);
* the failing backend's status and reason (exit status or signal, stderr's first line);
* bounded time, and nothing left running (every pid the stand-in wrote is gone);
* for a representative subset, ``allsmi snapshot --format json`` and ``allsmi doctor --json``
  as subprocesses: stdout one complete JSON document, exit 0, the reason shown.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from allsmi.collection import registry
from allsmi.collection.collector import Collector

from ..conftest import run_allsmi
from . import standin
from .scenario import CliTool, Scenario, ScenarioEnv, check_expected, scenario_module

#: The failing tool's timeout in the fault cells where it hangs is 80 % of this (where it
#: answers, 80 % of CYCLE_TIMEOUT).
TIMEOUT = 1.0
#: A cell may take the timeout plus this (closing, reaping, a loaded 2-core machine).
BOUND = TIMEOUT + 4.0
#: The collection cycle's timeout (``allsmi --timeout`` in the CLI checks, where the tools get
#: 80 % of it): the failing tool is cut at its own timeout, the healthy companion (a Python
#: stand-in started for each of its calls) gets the room it needs on a loaded machine (the
#: suite runs in parallel workers), since what the cells check is that it stays healthy.
CYCLE_TIMEOUT = 3.0

CRASH_STDERR = "Error: PCI link down on 0000:19:00.0\ncaused by: device 3 not responding\n"

#: fault -> (stand-in route, expected status, text the status message must contain)
FAULTS: dict[str, tuple[dict[str, Any] | None, str, str]] = {
    "missing": (None, "unavailable", "is not an executable file"),
    "hang": ({"hang": True}, "timeout", ""),
    "hang-ignoring-sigterm-grandchild": ({"grandchild": True, "ignore_term": True, "hang": True},
                                         "timeout", ""),
    "exits-leaving-grandchild": ({"grandchild": True, "stderr": CRASH_STDERR, "rc": 1},
                                 "error", "exited with status 1: Error: PCI link down on 0000:19:00.0"),
    "slow": ({"sleep": 30}, "timeout", ""),
    "crash": ({"stderr": CRASH_STDERR, "rc": 1}, "error",
              "exited with status 1: Error: PCI link down on 0000:19:00.0"),
    "crash-with-output": ({"text": "[]", "stderr": "panicked at 'index out of bounds'\n", "rc": 101},
                          "error", "exited with status 101: panicked at 'index out of bounds'"),
    "abort": ({"abort": True}, "error", "killed by signal SIGABRT (6)"),
    "segfault": ({"die": "SIGSEGV", "stderr": "Segmentation fault\n"}, "error",
                 "killed by signal SIGSEGV (11): Segmentation fault"),
    "garbage": ({"text": "\x1b[31m<html>Internal Server Error</html>\x07\n"}, "error", ""),
    "partial": ({"partial_of": True}, "error", ""),
}
#: Cells also run end to end through the CLI as a subprocess.
SUBPROCESS_CELLS = {"crash", "hang-ignoring-sigterm-grandchild"}
DRIFT_CELLS = ("oldest", "newest", "na-fields", "64-devices", "partitions", "multi-process")


def _cli_backends() -> list[tuple[str, CliTool, Any]]:
    found = []
    for name in registry.names():
        module = scenario_module(name)
        spec = getattr(module, "CLI", None) if module is not None else None
        if spec is not None:
            found.append((name, spec if isinstance(spec, CliTool) else spec[0], module))
    return found


CLI_BACKENDS = _cli_backends()


def vendor_tools(name: str) -> tuple[CliTool, ...]:
    """Every tool ``name`` declares (``CLI``, or each of a tuple of them: the main tool first)."""
    module = next(m for n, _, m in CLI_BACKENDS if n == name)
    return (module.CLI,) if isinstance(module.CLI, CliTool) else tuple(module.CLI)


def fault_cell_id(name: str, tool: int, what: str) -> str:
    """``neuron-hang`` for the main tool, ``neuron-neuron-monitor-hang`` for another one."""
    return f"{name}-{what}" if tool == 0 else f"{name}-{vendor_tools(name)[tool].executable}-{what}"


def _companion(name: str) -> tuple[str, Scenario]:
    """A healthy CLI backend other than ``name`` whose scenario declares exact values."""
    for other, spec, module in CLI_BACKENDS:
        if other == name or spec.env_var == dict((n, s) for n, s, _ in CLI_BACKENDS)[name].env_var:
            continue
        scenario = next((s for s in module.SCENARIOS if s.expected and s.name == spec.drift.get("newest")), None)
        if scenario is not None:
            return other, scenario
    raise AssertionError(f"no companion backend with exact values for {name}")


def _fault_cells() -> list[Any]:
    return [pytest.param(name, tool, fault, id=fault_cell_id(name, tool, fault))
            for name, _, _ in CLI_BACKENDS for tool in range(len(vendor_tools(name))) for fault in FAULTS]


def _drift_cells() -> list[Any]:
    return [pytest.param(name, cell, id=f"{name}-{cell}")
            for name, spec, _ in CLI_BACKENDS for cell in DRIFT_CELLS if cell in spec.drift]


def _install_fault(env: ScenarioEnv, spec: CliTool, fault: str) -> Path:
    """Point the backend's tool variable at a stand-in answering every call with ``fault``."""
    route, _, _ = FAULTS[fault]
    bindir = env.tmp_path / "fault-bin"
    pidfile = bindir / "pids"
    if route is None:
        env.monkeypatch.setenv(spec.env_var, str(bindir / "no-such-tool"))
        return pidfile
    route = dict(route, pidfile=str(pidfile))
    if route.pop("partial_of", False):
        text = spec.partial.read_text()
        route["text"] = text[: len(text) // 2]
    exe = standin.write_standin(bindir, spec.executable, {}, default=route)
    env.monkeypatch.setenv(spec.env_var, str(exe))
    return pidfile


def wait_gone(pids: list[int], deadline: float) -> list[int]:
    while True:
        alive = [pid for pid in pids if standin.alive(pid)]
        if not alive or time.monotonic() > deadline:
            return alive


def collect_with(backends: list[Any], timeout: float) -> tuple[Any, float]:
    collector = Collector(backends, timeout_seconds=timeout)
    started = time.monotonic()
    try:
        snap = collector.collect_once()
    finally:
        collector.close_within(2.0)
    return snap, time.monotonic() - started


def _spec(name: str) -> CliTool:
    return next(spec for n, spec, _ in CLI_BACKENDS if n == name)


@pytest.mark.parametrize(("name", "tool", "fault"), _fault_cells())
def test_fault_cell(name: str, tool: int, fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = vendor_tools(name)[tool]
    env = ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch)
    other, scenario = _companion(name)
    companion = scenario.build(ScenarioEnv(tmp_path=tmp_path / "companion", monkeypatch=monkeypatch))
    if len(vendor_tools(name)) > 1:  # the other tools answer as in the newest scenario
        newest_scenario(name).build(ScenarioEnv(tmp_path=tmp_path / "healthy", monkeypatch=monkeypatch))
    pidfile = _install_fault(env, spec, fault)
    _, want_status, want_text = FAULTS[fault]
    if fault == "partial" and spec.partial_status == "ok":
        want_status, want_text = "ok", "skipped"
    if spec.optional:
        want_status = "ok"
    want_status, want_text = spec.expect.get(fault, (want_status, want_text))
    # A tool that hangs is cut at TIMEOUT's 80 %; one that answers (crashes, dies, prints
    # garbage) is a Python stand-in too, and gets the companion's room to start on a loaded
    # machine: cut at 0.8 s it was reported as a timeout, not as what it did.
    answers = FAULTS[fault][1] != "timeout" and want_status != "timeout"
    failing = registry.load(name)(timeout_seconds=(CYCLE_TIMEOUT if answers else TIMEOUT) * 0.8,
                                  options=dict(_spec(name).options))

    snap, took = collect_with([failing, companion], CYCLE_TIMEOUT)
    assert took < BOUND, f"{name}/{fault}: the cycle took {took:.1f} s"
    statuses = {b.name: b for b in snap.backends}
    assert statuses[other].status == "ok", statuses[other]
    check_expected([d for d in snap.devices if d.backend == other], scenario.expected)
    assert len([d for d in snap.devices if d.backend == other]) == scenario.expected_devices
    status = statuses[name]
    assert status.status == want_status, status
    assert status.message and want_text in status.message, status
    if want_status != "ok":
        assert not [d for d in snap.devices if d.backend == name], "a failing tool reports no devices"
    leftovers = wait_gone(standin.pids(pidfile), time.monotonic() + 5.0)
    assert leftovers == [], f"{name}/{fault}: still running: {leftovers}"

    if fault in SUBPROCESS_CELLS:
        _check_cli(name, _spec(name), other, scenario, fault, want_status, want_text, pidfile)


def _check_cli(name: str, spec: CliTool, other: str, scenario: Scenario, fault: str,
               want_status: str, want_text: str, pidfile: Path) -> None:
    """``allsmi snapshot --format json`` and ``allsmi doctor --json`` with the same fault."""
    config = pidfile.parent.parent / "allsmi.toml"
    options = "".join(f"\n[backends.{n}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in s.options.items())
                      for n, s, _ in CLI_BACKENDS if n in (name, other) and s.options)
    config.write_text(f'[backends]\nenabled = ["{name}", "{other}"]\n{options}')
    env = {k: v for k, v in os.environ.items() if k.startswith("ALLSMI_")}
    env.update({k: v for k, v in os.environ.items() if k == "PATH"})
    started = time.monotonic()
    result = run_allsmi("snapshot", "--format", "json", "--config", str(config),
                        "--timeout", str(CYCLE_TIMEOUT), env=env, timeout=60)
    assert time.monotonic() - started < BOUND + 10
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # one complete JSON document, nothing else
    statuses = {b["name"]: b for b in document["backends"]}
    assert statuses[name]["status"] == want_status and want_text in statuses[name]["message"]
    assert statuses[other]["status"] == "ok"
    assert len([d for d in document["devices"] if d["backend"] == other]) == scenario.expected_devices
    doctor = run_allsmi("doctor", "--json", "--config", str(config), "--timeout", str(CYCLE_TIMEOUT),
                        env=env, timeout=60)
    assert doctor.returncode == 0, doctor.stderr
    report = {b["name"]: b for b in json.loads(doctor.stdout)["backends"]}
    assert report[name]["status"] == want_status and want_text in report[name]["message"]
    assert wait_gone(standin.pids(pidfile), time.monotonic() + 5.0) == []


@pytest.mark.parametrize(("name", "cell"), _drift_cells())
def test_drift_cell(name: str, cell: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(name)
    module = scenario_module(name)
    scenario = next(s for s in module.SCENARIOS if s.name == spec.drift[cell])
    backend = scenario.build(ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch))
    other, companion_scenario = _companion(name)
    companion = companion_scenario.build(ScenarioEnv(tmp_path=tmp_path / "companion", monkeypatch=monkeypatch))
    snap, took = collect_with([backend, companion], 10.0)
    assert took < 15.0
    statuses = {b.name: b for b in snap.backends}
    assert statuses[name].status == "ok", statuses[name]
    mine = [d for d in snap.devices if d.backend == name]
    assert len(mine) == scenario.expected_devices
    check_expected(mine, scenario.expected)
    check_expected([d for d in snap.devices if d.backend == other], companion_scenario.expected)
    if cell == "partitions":
        assert any(d.parent for d in mine), "the partitions cell must show partitions"
        for dev in mine:
            if dev.parent is not None:
                assert dev.power_watts is None, "board power is counted once, on the parent"
    if cell == "multi-process":
        users = {}
        for dev in mine:
            for proc in dev.processes or ():
                users.setdefault(proc.pid, set()).add(dev.id)
        assert any(len(devs) > 1 for devs in users.values()), "a process on several devices"


def newest_scenario(name: str) -> Scenario:
    spec, module = _spec(name), scenario_module(name)
    return next(s for s in module.SCENARIOS if s.name == spec.drift["newest"])


def routed_backend(name: str, env: ScenarioEnv, faults: dict[str, dict[str, Any]],
            tool: int = 0) -> tuple[Any, Path]:
    """The ``newest`` scenario's backend with a route table in front of its stand-in of ``tool``:
    the calls in ``faults`` answered so, every other one passed on to the scenario's own stand-in."""
    spec = vendor_tools(name)[tool]
    backend = newest_scenario(name).build(env)
    healthy = Path(os.environ[spec.env_var])
    config = Path(str(healthy) + ".json")
    placeholders = json.loads(config.read_text()).get("placeholders", []) if config.exists() else []
    bindir = env.tmp_path / "routed-bin"
    pidfile = bindir / "pids"
    routes = {call: dict(route, pidfile=str(pidfile)) for call, route in faults.items()}
    exe = standin.write_standin(bindir, spec.executable, routes,
                                default={"exec": str(healthy), "pidfile": str(pidfile)},
                                placeholders=placeholders)
    env.monkeypatch.setenv(spec.env_var, str(exe))
    return backend, bindir


def _call_cells() -> list[Any]:
    return [pytest.param(name, tool, call, id=fault_cell_id(name, tool, f"call-{n}"))
            for name, _, _ in CLI_BACKENDS for tool, spec in enumerate(vendor_tools(name))
            for n, call in enumerate(spec.calls)]


@pytest.mark.parametrize(("name", "tool"), [pytest.param(name, tool, id=fault_cell_id(name, tool, "calls"))
                                            for name, _, _ in CLI_BACKENDS
                                            for tool in range(len(vendor_tools(name)))])
def test_declared_calls_are_the_calls_made(name: str, tool: int, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``CLI.calls`` lists every distinct call of open() and the first sample(), so that each is
    faulted below (a backend whose sample() runs another command cannot leave it untested)."""
    backend, bindir = routed_backend(name, ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch), {}, tool)
    try:
        backend.open()
        devices = backend.sample()
    finally:
        backend.close()
    assert len(devices) == newest_scenario(name).expected_devices
    made = tuple(dict.fromkeys(standin.calls(bindir)))
    assert made, f"{name}: the routed stand-in was never called"
    spec = vendor_tools(name)[tool]
    assert set(spec.calls) == set(made), f"{name}: declare {spec.executable}'s calls = {made!r}"


@pytest.mark.parametrize(("name", "tool", "call"), _call_cells())
def test_each_call_faulted_alone(name: str, tool: int, call: str, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """One call crashes, the others answer: the crash is reported (an error, or a warning beside
    the devices it did not spoil), never an invented value or "no devices", nothing left running."""
    crash, _, text = FAULTS["crash"]
    backend, bindir = routed_backend(name, ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch),
                              {call: dict(crash or {})}, tool)
    snap, took = collect_with([backend], 10.0)
    assert took < 10.0 + BOUND
    assert call in standin.calls(bindir), f"{name}: {call!r} was not reached"
    status = next(b for b in snap.backends if b.name == name)
    assert "PCI link down on 0000:19:00.0" in status.message, status
    mine = [d for d in snap.devices if d.backend == name]
    if status.status == "ok":
        assert mine, f"{name}: ok with no devices after {call!r} failed"
    else:
        assert status.status == "error" and not mine, status
    assert wait_gone(standin.pids(bindir / "pids"), time.monotonic() + 5.0) == []


def test_matrix_covers_every_cli_backend() -> None:
    names = {name for name, _, _ in CLI_BACKENDS}
    assert {"furiosa", "gaudi", "rebellions", "tenstorrent"} <= names
    for name, spec, _ in CLI_BACKENDS:
        assert {"oldest", "newest", "na-fields", "64-devices"} <= set(spec.drift), name

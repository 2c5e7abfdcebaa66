"""Contract scenarios for the Rebellions backend, and the stand-in ``rbln-smi`` they use.

The stand-in is the shared one (:mod:`tests.contract.standin`): it prints a
fixture file, exits non-zero, hangs, or dies. The backend is pointed at it
through ``ALLSMI_RBLN_SMI`` (or through PATH, for the ``rbln-stat`` fallback).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from allsmi.backends.rebellions import ENV_VAR, RebellionsBackend

from . import standin
from .fixture_truth import json_value, total
from .scenario import FIXTURES, CliTool, Scenario, ScenarioEnv, expect

RBLN_FIXTURES = FIXTURES / "rebellions"
LOADED, ATOM_MAX, FOUR_JOBS = ("rbln-smi-kmd3.0-ca22x4-loaded.json", "rbln-smi-kmd3.0-ca25x2-atom-max.json",
                               "rbln-smi-kmd3.0-ca22x8-four-jobs.json")
NA_CELLS = "rbln-smi-kmd2.0-ca12x2-na-cells.json"


def device(fixture: str, name: str, key: str):
    """rbln-smi's ``key`` of device ``name`` (``rbln0``): ``card_power`` (``"37257088uW"``) and
    ``temperature`` (``"45C"``) state their unit; ``memory/used`` and ``memory/total`` are byte
    strings (fixtures/rebellions/README.md)."""
    unit = "B" if key.startswith("memory/") else None
    return json_value(RBLN_FIXTURES / fixture, f"devices/device={name}/{key}", unit)


def _memalloc(fixture: str, npu: int, pid: int, ptid: int = 0):
    """A context's ``memalloc`` (``"3.5GiB"``, its unit stated), found by npu, pid and ptid."""
    return json_value(RBLN_FIXTURES / fixture, f"contexts/npu={npu}&pid={pid}&ptid={ptid}/memalloc")


def write_standin(directory: Path, executable: str = "rbln-smi", *, fixture: str | None = None,
                  text: str | None = None, stderr: str = "", exit_code: int = 0,
                  hang: bool = False, die: bool | str = False, **behaviour: object) -> Path:
    """A stand-in ``rbln-smi``/``rbln-stat`` (the shared one) that answers every call the same way.

    It prints ``fixture`` (a file under ``fixtures/rebellions``) or ``text`` on
    stdout and ``stderr`` on stderr, then hangs, kills itself (``die``: True for
    SIGKILL or a signal name), or exits with ``exit_code``. Its pid goes to
    ``<executable>.pid``; calls are logged (see :func:`tests.contract.standin.calls`).
    """
    spec = standin.route(RBLN_FIXTURES, fixture, text=text or "", stderr=stderr, rc=exit_code,
                         hang=hang, die=die, pidfile=str(directory / f"{executable}.pid"), **behaviour)
    return standin.write_standin(directory, executable, {}, default=spec)


def backend_for(env: ScenarioEnv, fixture: str | None = None, *, executable: str = "rbln-smi",
                via_path: bool = False, timeout_seconds: float = 5.0, **standin: object) -> RebellionsBackend:
    """A backend whose tool is a stand-in printing ``fixture``.

    ``via_path`` puts the stand-in alone on PATH (no env override, no vendor
    directories) to exercise discovery; otherwise ``ALLSMI_RBLN_SMI`` names it.
    """
    bindir = env.tmp_path / "bin"
    path = write_standin(bindir, executable, fixture=fixture, **standin)  # type: ignore[arg-type]
    if via_path:
        env.monkeypatch.delenv(ENV_VAR, raising=False)
        env.monkeypatch.setenv("PATH", str(bindir))
    else:
        env.monkeypatch.setenv(ENV_VAR, str(path))
    # Fixture pids are fictitious: no local owner, no open /dev/rbln nodes.
    return RebellionsBackend(timeout_seconds=timeout_seconds, search_dirs=(),
                             lookup_user=lambda pid: None, lookup_nodes=lambda pid: None)


def _tools_absent(env: ScenarioEnv) -> RebellionsBackend:
    empty = env.tmp_path / "empty"
    empty.mkdir()
    env.monkeypatch.delenv(ENV_VAR, raising=False)
    env.monkeypatch.setenv("PATH", str(empty))
    return RebellionsBackend(search_dirs=(str(empty),))


def _override_not_executable(env: ScenarioEnv) -> RebellionsBackend:
    env.monkeypatch.setenv(ENV_VAR, os.path.join(str(env.tmp_path), "missing", "rbln-smi"))
    return RebellionsBackend(search_dirs=())


def _sixty_four_cards(env: ScenarioEnv) -> RebellionsBackend:
    """64 ATOM+ cards: the loaded capture's first row repeated with its own ids, no contexts."""
    report = json.loads((RBLN_FIXTURES / "rbln-smi-kmd3.0-ca22x4-loaded.json").read_text())
    template = report["devices"][0]
    rows = []
    for n in range(64):
        row = json.loads(json.dumps(template))
        row.update(npu=n, device=f"rbln{n}", uuid=f"00000000-0000-4000-8000-{n:012d}", sid=f"{n:016d}")
        row["pci"]["bus_id"] = f"0000:{n + 16:02x}:00.0"
        rows.append(row)
    return backend_for(env, None, text=json.dumps({"KMD_version": "3.0.0", "devices": rows, "contexts": []}))


SCENARIOS: list[Scenario] = [
    Scenario("atom-plus-64-cards", _sixty_four_cards, 64, dict([
        expect("00000000-0000-4000-8000-000000000063", power_watts=device(LOADED, "rbln0", "card_power"),
               index=63, bus_id="0000:4f:00.0", processes=[])])),
    Scenario("no-hardware-tools-absent", _tools_absent, None),
    Scenario("no-hardware-override-not-executable", _override_not_executable, None),
    Scenario("no-hardware-tool-sees-no-device",
             lambda env: backend_for(env, "rbln-smi-no-devices.json"), None),
    # Power and temperature in the unit their strings state, memory strings in bytes, a process's
    # memory the sum of its contexts' memalloc on the NPU (ptid 0 and 1).
    Scenario("atom-plus-4-cards-loaded",
             lambda env: backend_for(env, LOADED), 4, dict([
                 expect("6f1c2a9e-0d4b-4c55-9a61-2f0e8b7d1a01",
                        temperature_celsius=device(LOADED, "rbln0", "temperature"),
                        power_watts=device(LOADED, "rbln0", "card_power"),
                        memory_used_bytes=device(LOADED, "rbln0", "memory/used"),
                        memory_total_bytes=device(LOADED, "rbln0", "memory/total"), utilization_percent=62.3,
                        compute_active_percent=62.3, compute_active_source="engine_time",
                        bus_id="0000:03:00.0", driver_version="3.0.0", firmware_version="3.0.0",
                        health="ok", processes=[(2733390, total(_memalloc(LOADED, 0, 2733390, 0),
                                                                _memalloc(LOADED, 0, 2733390, 1)))]),
                 expect("a83b5f27-51c9-4e0e-b1d4-7c6f0a9e3b02", power_watts=device(LOADED, "rbln1", "card_power"),
                        memory_used_bytes=device(LOADED, "rbln1", "memory/used"), utilization_percent=58.9)])),
    Scenario("atom-4-cards-rbln-stat-fallback",
             lambda env: backend_for(env, "rbln-stat-kmd1.3-ca02x4.json",
                                     executable="rbln-stat", via_path=True), 4),
    # 2 cards (parents) + 8 dies (children).
    Scenario("atom-max-2-cards-8-dies",
             lambda env: backend_for(env, ATOM_MAX), 10, dict([
                 # the card's power once, on the card (each die repeats it); its dies carry none.
                 expect("rebellions:card:0000000025800201", power_watts=device(ATOM_MAX, "rbln0", "card_power"),
                        parent=None),
                 expect("3c90a100-6e2d-4b7a-9c41-000000000000", power_watts=None, utilization_percent=71.0,
                        memory_used_bytes=device(ATOM_MAX, "rbln0", "memory/used"),
                        temperature_celsius=device(ATOM_MAX, "rbln0", "temperature"),
                        parent="rebellions:card:0000000025800201")])),
    Scenario("atom-plus-8-cards-repeated-npu",
             lambda env: backend_for(env, "rbln-smi-kmd3.0-ca22x8-shared-npu.json"), 8),
    Scenario("atom-plus-8-cards-four-jobs",
             lambda env: backend_for(env, FOUR_JOBS), 8, dict([
                 expect("7c41d0e0-3b9a-4e27-9f10-5d2a8c6e4000", processes=[(31001, _memalloc(FOUR_JOBS, 0, 31001))]),
                 expect("7c41d0e2-3b9a-4e27-9f10-5d2a8c6e4002", processes=[
                     (42002, total(_memalloc(FOUR_JOBS, 0, 42002, 0), _memalloc(FOUR_JOBS, 0, 42002, 1)))]),
                 expect("7c41d0e7-3b9a-4e27-9f10-5d2a8c6e4007", processes=[(42002, _memalloc(FOUR_JOBS, 3, 42002))]),
                 # 1.4GiB is 1503238553.6 bytes: the backend rounds to the nearest byte
                 expect("7c41d0e5-3b9a-4e27-9f10-5d2a8c6e4005", processes=[(53003, _memalloc(FOUR_JOBS, 0, 53003))]),
                 expect("7c41d0e1-3b9a-4e27-9f10-5d2a8c6e4001", processes=[(64004, _memalloc(FOUR_JOBS, 0, 64004, 1))]),
                 expect("7c41d0e4-3b9a-4e27-9f10-5d2a8c6e4004", processes=[])])),
    Scenario("atom-plus-na-cells",
             lambda env: backend_for(env, "rbln-smi-kmd2.0-ca12x2-na-cells.json"), 2, dict([
                 expect("7a2e9c04-3b1f-4d6e-8a95-0c4b7e2f1d05", temperature_celsius=None, power_watts=None,
                        memory_used_bytes=None, memory_total_bytes=device(NA_CELLS, "rbln0", "memory/total"),
                        utilization_percent=None,
                        compute_active_percent=None, compute_active_source=None),
                 expect("b5d13f8a-6c20-4e97-9b3a-2f8e1d6c0a06", power_watts=device(NA_CELLS, "rbln1", "card_power"),
                        memory_used_bytes=device(NA_CELLS, "rbln1", "memory/used"),
                        firmware_version=None)])),
    # 6 rows: a string, a row without identity and a duplicate are skipped.
    Scenario("malformed-device-rows",
             lambda env: backend_for(env, "rbln-smi-malformed-device-row.json"), 3),
    Scenario("malformed-process-rows",
             lambda env: backend_for(env, "rbln-smi-malformed-process-row.json"), 2),
    Scenario("numeric-values-variant",
             lambda env: backend_for(env, "rbln-smi-numeric-values.json"), 1),
]

#: How the fault-and-drift matrix (tests/contract/test_cli_faults.py) drives rbln-smi.
CLI = CliTool(env_var=ENV_VAR, executable="rbln-smi", partial=RBLN_FIXTURES / "rbln-smi-truncated.json",
              calls=("-j",),
              drift={"oldest": "atom-4-cards-rbln-stat-fallback", "newest": "atom-plus-4-cards-loaded",
                     "na-fields": "atom-plus-na-cells", "64-devices": "atom-plus-64-cards",
                     "partitions": "atom-max-2-cards-8-dies", "multi-process": "atom-plus-8-cards-four-jobs"})

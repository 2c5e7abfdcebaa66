"""The Rebellions backend end to end: a stand-in rbln-smi/rbln-stat prints fixtures or misbehaves."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from allsmi.backend_api import BackendError, BackendUnavailable
from allsmi.backends._common.runner import ToolTimeout
from allsmi.backends.rebellions import ENV_VAR, RebellionsBackend
from allsmi.schema import DeviceSample
from allsmi.schema.units import GIB, MIB
from tests.contract.scenario import ScenarioEnv
from tests.contract import standin
from tests.contract.scenarios_rebellions import RBLN_FIXTURES, backend_for, write_standin

LOADED = "rbln-smi-kmd3.0-ca22x4-loaded.json"
ATOM_MAX = "rbln-smi-kmd3.0-ca25x2-atom-max.json"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ScenarioEnv:
    return ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch)


def _run(backend: RebellionsBackend) -> list[DeviceSample]:
    assert backend.probe().available
    backend.open()
    try:
        return list(backend.sample())
    finally:
        backend.close()


def _by_kernel(devices: list[DeviceSample]) -> dict[str, DeviceSample]:
    return {str(d.details["device"]): d for d in devices if "device" in d.details}


# --- units ---------------------------------------------------------------------------------

def test_card_power_in_microwatts_becomes_watts(env: ScenarioEnv) -> None:
    devices = _by_kernel(_run(backend_for(env, LOADED)))
    # "17521800uW" is 17.52 W: not 0 (suffix not parsed) and not 17521800 (read as W).
    assert devices["rbln3"].power_watts == pytest.approx(17.5218, abs=1e-9)
    assert devices["rbln0"].power_watts == pytest.approx(37.257088, abs=1e-9)
    assert [devices[k].power_watts for k in ("rbln1", "rbln2")] == [36.104512, 35.88096]


def test_memory_cells_are_byte_counts_not_mib(env: ScenarioEnv) -> None:
    devices = _by_kernel(_run(backend_for(env, LOADED)))
    assert devices["rbln0"].memory_total_bytes == 16877879296
    assert devices["rbln0"].memory_used_bytes == int(3.5 * GIB) + 58 * MIB
    assert devices["rbln3"].memory_used_bytes == 0


def test_temperature_and_utilization_strings(env: ScenarioEnv) -> None:
    devices = _by_kernel(_run(backend_for(env, LOADED)))
    assert devices["rbln0"].temperature_celsius == 45.0
    assert devices["rbln3"].temperature_celsius == 31.0
    assert devices["rbln0"].utilization_percent == 62.3
    assert devices["rbln3"].utilization_percent == 0.0


def test_identity_fields(env: ScenarioEnv) -> None:
    devices = _run(backend_for(env, LOADED))
    assert [d.index for d in devices] == [0, 1, 2, 3]
    first = devices[0]
    assert first.id == first.uuid == "6f1c2a9e-0d4b-4c55-9a61-2f0e8b7d1a01"
    assert (first.name, first.bus_id, first.driver_version, first.firmware_version) == (
        "RBLN-CA22", "0000:03:00.0", "3.0.0", "3.0.0")
    assert (first.vendor, first.kind, first.backend, first.health) == ("rebellions", "npu", "rebellions", "ok")
    assert first.parent is None and first.energy_joules is None
    assert first.details["sid"] == "0000000022513101"
    assert first.details["product"] == "ATOM+"
    assert first.details["pstate"] == "P2"
    assert first.details["numa_node"] == 0 and first.details["pci_link_width"] == 16
    assert first.resource_group is None and dict(first.labels) == {}


# --- processes -----------------------------------------------------------------------------

def test_process_memory_is_summed_per_pid_and_device(env: ScenarioEnv) -> None:
    devices = _by_kernel(_run(backend_for(env, LOADED)))
    (vllm,) = devices["rbln0"].processes
    # Two contexts (3.5GiB + 58.0MiB) of one process on one device: one row.
    assert (vllm.pid, vllm.command, vllm.memory_bytes) == (2733390, "VLLM::EngineCore", int(3.5 * GIB) + 58 * MIB)
    assert [(p.pid, p.memory_bytes) for p in devices["rbln2"].processes] == [
        (957143, 72 * MIB), (2733390, int(3.5 * GIB))]
    assert devices["rbln3"].processes == ()


def test_four_jobs_with_repeated_npu_are_all_attributed(env: ScenarioEnv) -> None:
    # Under load the tool numbers npu per job (0 repeats on four cards); every process must
    # still reach every card it uses, with its memory in bytes (was: 1 of 4 processes).
    backend = backend_for(env, "rbln-smi-kmd3.0-ca22x8-four-jobs.json")
    devices = {d.details["device"]: d for d in _run(backend)}
    placed = {name: [(p.pid, p.command, p.memory_bytes) for p in dev.processes or ()]
              for name, dev in devices.items()}
    assert placed == {
        "rbln0": [(31001, "python", 72 * MIB)],
        "rbln1": [(64004, "python3", 54 * MIB)],
        "rbln2": [(42002, "VLLM::EngineCore", int(3.5 * GIB) + 58 * MIB)],
        "rbln3": [(42002, "VLLM::EngineCore", int(3.5 * GIB))],
        "rbln4": [],
        "rbln5": [(53003, "python3", 1503238554)],
        "rbln6": [(42002, "VLLM::EngineCore", int(3.5 * GIB))],
        "rbln7": [(42002, "VLLM::EngineCore", int(3.5 * GIB))],
    }
    assert backend.warnings == []
    for dev in devices.values():  # the listing agrees with the cards' own memory counters
        assert sum(p.memory_bytes for p in dev.processes) == dev.memory_used_bytes


def test_process_user_comes_from_the_local_lookup(env: ScenarioEnv) -> None:
    backend = backend_for(env, LOADED)
    backend._lookup_user = {2733390: "alice"}.get  # type: ignore[assignment]
    devices = _by_kernel(_run(backend))
    assert devices["rbln1"].processes[0].user == "alice"
    assert [p.user for p in devices["rbln2"].processes] == [None, "alice"]


# --- tool discovery ------------------------------------------------------------------------

def test_rbln_stat_is_used_when_rbln_smi_is_absent(env: ScenarioEnv) -> None:
    backend = backend_for(env, "rbln-stat-kmd1.3-ca02x4.json", executable="rbln-stat", via_path=True)
    probe = backend.probe()
    assert probe.available and probe.details["tool"].endswith("/rbln-stat")
    devices = _run(backend)
    assert backend.tool_path == str(env.tmp_path / "bin" / "rbln-stat")
    assert {d.backend for d in devices} == {"rebellions"}  # one name whichever tool runs
    assert len(devices) == 4
    assert {d.name for d in devices} == {"RBLN-CA02"}
    assert devices[0].details["product"] == "ATOM"
    assert devices[0].details["npu"] == 0  # printed as the string "0" by SDK 1.x
    assert devices[0].driver_version == "1.3.73"
    assert all(d.processes == () for d in devices)  # no "contexts" key in this version
    assert standin.calls(env.tmp_path / "bin")[0] == "-j"


def test_rbln_smi_is_preferred_over_rbln_stat(env: ScenarioEnv) -> None:
    bindir = env.tmp_path / "bin"
    write_standin(bindir, "rbln-stat", fixture="rbln-stat-kmd1.3-ca02x4.json")
    backend = backend_for(env, LOADED, via_path=True)  # writes rbln-smi into the same dir
    assert [d.name for d in _run(backend)] == ["RBLN-CA22"] * 4
    assert backend.tool_path == str(bindir / "rbln-smi")


def test_vendor_directories_are_searched_after_path(env: ScenarioEnv) -> None:
    vendor_dir = env.tmp_path / "run" / "rbln" / "driver" / "usr" / "bin"
    write_standin(vendor_dir, "rbln-smi", fixture=LOADED)
    env.monkeypatch.delenv(ENV_VAR, raising=False)
    env.monkeypatch.setenv("PATH", str(env.tmp_path / "nothing-here"))
    backend = RebellionsBackend(search_dirs=(str(vendor_dir),), lookup_user=lambda pid: None,
                                lookup_nodes=lambda pid: None)
    assert len(_run(backend)) == 4
    assert backend.tool_path == str(vendor_dir / "rbln-smi")


def test_env_override_names_either_executable_and_wins(env: ScenarioEnv) -> None:
    write_standin(env.tmp_path / "path", "rbln-smi", fixture=LOADED)
    env.monkeypatch.setenv("PATH", str(env.tmp_path / "path"))
    override = write_standin(env.tmp_path / "opt", "rbln-stat", fixture="rbln-stat-kmd1.3-ca02x4.json")
    env.monkeypatch.setenv(ENV_VAR, str(override))
    backend = RebellionsBackend(search_dirs=(), lookup_user=lambda pid: None, lookup_nodes=lambda pid: None)
    assert {d.name for d in _run(backend)} == {"RBLN-CA02"}


def test_bad_env_override_is_reported_not_ignored(env: ScenarioEnv) -> None:
    write_standin(env.tmp_path / "path", "rbln-smi", fixture=LOADED)
    env.monkeypatch.setenv("PATH", str(env.tmp_path / "path"))
    env.monkeypatch.setenv(ENV_VAR, "/nonexistent/rbln-smi")
    backend = RebellionsBackend(search_dirs=())
    probe = backend.probe()
    assert not probe.available and ENV_VAR in probe.reason and "/nonexistent/rbln-smi" in probe.reason
    with pytest.raises(BackendUnavailable, match=ENV_VAR):
        backend.open()


def test_tools_absent_reason_names_both_tools(env: ScenarioEnv) -> None:
    env.monkeypatch.delenv(ENV_VAR, raising=False)
    env.monkeypatch.setenv("PATH", str(env.tmp_path))
    backend = RebellionsBackend(search_dirs=(str(env.tmp_path),))
    probe = backend.probe()
    assert not probe.available
    assert "rbln-smi" in probe.reason and "rbln-stat" in probe.reason and ENV_VAR in probe.reason
    with pytest.raises(BackendUnavailable):
        backend.open()


def test_probe_never_raises(env: ScenarioEnv) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        raise PermissionError("PATH unreadable")

    env.monkeypatch.delenv(ENV_VAR, raising=False)
    from allsmi.backends._common import toolpath
    env.monkeypatch.setattr(toolpath, "find_tool", broken)  # what the tool search calls
    probe = RebellionsBackend().probe()
    assert not probe.available and "PATH unreadable" in probe.reason


def test_one_tool_run_per_sample(env: ScenarioEnv) -> None:
    backend = backend_for(env, LOADED)
    backend.open()
    backend.sample()
    backend.sample()
    runs = standin.calls(env.tmp_path / "bin")
    assert runs == ["-j", "-j", "-j"]  # open() once, then one run per sample (devices and processes together)


# --- ATOM Max ------------------------------------------------------------------------------

def test_atom_max_board_power_is_counted_once(env: ScenarioEnv) -> None:
    devices = _run(backend_for(env, ATOM_MAX))
    cards = [d for d in devices if d.parent is None]
    dies = [d for d in devices if d.parent is not None]
    assert [c.id for c in cards] == ["rebellions:card:0000000025800201", "rebellions:card:0000000025800202"]
    assert len(dies) == 8
    # Each die repeats its card's 85.3 W / 41.2 W; the node draws 126.5 W, not 506 W.
    assert sum(d.power_watts or 0.0 for d in devices) == pytest.approx(85.3 + 41.2)
    assert [c.power_watts for c in cards] == [85.3, 41.2]
    assert all(d.power_watts is None and d.power_limit_watts is None and d.energy_joules is None for d in dies)


def test_atom_max_cards_come_before_their_dies(env: ScenarioEnv) -> None:
    devices = _run(backend_for(env, ATOM_MAX))
    assert [d.parent for d in devices[:5]] == [None] + ["rebellions:card:0000000025800201"] * 4
    assert [d.index for d in devices[1:5]] == [0, 1, 2, 3]
    card = devices[0]
    assert card.name == "RBLN-CA25" and card.uuid is None and card.bus_id is None
    assert card.utilization_percent is None and card.memory_total_bytes is None
    assert dict(card.details) == {"sid": "0000000025800201", "dies": 4, "product": "ATOM Max",
                                  "dies_per_card": 4}
    die = devices[1]
    assert die.id == die.uuid and die.utilization_percent == 71.0
    assert die.memory_used_bytes == 4 * GIB and die.memory_total_bytes == 16877879296


def test_atom_max_card_is_degraded_when_a_die_is(env: ScenarioEnv) -> None:
    devices = _run(backend_for(env, ATOM_MAX))
    by_kernel = _by_kernel(devices)
    assert by_kernel["rbln6"].health == "degraded"  # pstate P12: system abort
    assert by_kernel["rbln6"].utilization_percent is None  # "N/A"
    assert devices[5].id == "rebellions:card:0000000025800202" and devices[5].health == "degraded"
    assert devices[0].health == "ok"


def test_atom_max_processes_are_placed_by_the_nodes_they_hold(env: ScenarioEnv) -> None:
    held = {7001: frozenset({"rbln0", "rbln1", "rbln2", "rbln3"}), 7002: frozenset({"rbln4"}),
            7003: frozenset({"rbln3"})}
    backend = backend_for(env, ATOM_MAX)
    backend._lookup_nodes = held.get  # type: ignore[assignment]
    devices = _by_kernel(_run(backend))
    assert [p.pid for p in devices["rbln3"].processes] == [7001, 7003]
    assert devices["rbln3"].processes[1].memory_bytes == 96 * MIB
    assert [(p.pid, p.memory_bytes) for p in devices["rbln4"].processes] == [(7002, int(1.5 * GIB))]
    assert devices["rbln7"].processes == ()
    assert not [w for w in backend.warnings if "not attributed" in w]


# --- faults --------------------------------------------------------------------------------

def test_truncated_json_is_a_backend_error(env: ScenarioEnv) -> None:
    backend = backend_for(env, "rbln-smi-truncated.json")
    with pytest.raises(BackendError, match="truncated"):
        backend.open()


def test_garbage_is_a_backend_error(env: ScenarioEnv) -> None:
    backend = backend_for(env, "rbln-smi-garbage.txt")
    with pytest.raises(BackendError, match="did not print JSON"):
        backend.open()


def test_nonzero_exit_without_json_is_a_backend_error(env: ScenarioEnv) -> None:
    backend = backend_for(env, None, exit_code=1,
                          stderr="rbln-smi: failed to open /dev/rbln0: Permission denied\n")
    with pytest.raises(BackendError) as info:
        backend.open()
    assert "exited with status 1" in str(info.value)
    assert "Permission denied" in str(info.value)


def test_nonzero_exit_is_an_error_even_with_json(env: ScenarioEnv) -> None:
    # A tool that says it failed has failed: its JSON may be stale or partial.
    backend = backend_for(env, LOADED, exit_code=3, stderr="error: rbln3 telemetry stale\nmore\n")
    with pytest.raises(BackendError) as info:
        backend.open()
    assert str(info.value) == "rbln-smi -j exited with status 3: error: rbln3 telemetry stale"


@pytest.mark.parametrize(("die", "shown"), [(True, "SIGKILL (9)"), ("SIGSEGV", "SIGSEGV (11)")])
def test_tool_killed_by_a_signal_is_a_backend_error(env: ScenarioEnv, die: object, shown: str) -> None:
    backend = backend_for(env, LOADED, die=die, stderr="Segmentation fault in librbln\n")
    with pytest.raises(BackendError) as info:
        backend.open()
    assert str(info.value) == f"rbln-smi -j was killed by signal {shown}: Segmentation fault in librbln"


def test_hung_tool_times_out_and_is_killed(env: ScenarioEnv) -> None:
    backend = backend_for(env, None, hang=True, timeout_seconds=0.5)
    started = time.monotonic()
    with pytest.raises(BackendError, match="did not finish within 0.5 s") as info:
        backend.open()
    assert time.monotonic() - started < 5.0
    assert isinstance(info.value.__cause__, ToolTimeout)
    pid = int((env.tmp_path / "bin" / "rbln-smi.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped, not left running or as a zombie


def test_tool_vanishing_after_open_is_a_backend_error(env: ScenarioEnv) -> None:
    backend = backend_for(env, LOADED)
    backend.open()
    (env.tmp_path / "bin" / "rbln-smi").unlink()
    with pytest.raises(BackendError, match="cannot run"):
        backend.sample()


def test_warnings_are_reset_every_sample(env: ScenarioEnv) -> None:
    backend = backend_for(env, "rbln-smi-malformed-device-row.json")
    backend.open()
    backend.sample()
    assert backend.warnings
    write_standin(env.tmp_path / "bin", "rbln-smi", fixture=LOADED)
    devices = backend.sample()
    # only the first output's devices, now missing (reported degraded), are said again
    missing = {d.id for d in devices if d.health == "degraded" and d.processes is None}
    assert missing and all(w.split(":")[0] in missing and "missing from rbln-smi's output" in w
                           for w in backend.warnings), backend.warnings


def test_tool_with_no_device_gives_an_empty_list(env: ScenarioEnv) -> None:
    backend = backend_for(env, "rbln-smi-no-devices.json")
    assert _run(backend) == []
    assert backend.warnings == []


def test_fixture_directory_is_documented() -> None:
    readme = (RBLN_FIXTURES / "README.md").read_text()
    for fixture in sorted(RBLN_FIXTURES.iterdir()):
        if fixture.name != "README.md":
            assert f"`{fixture.name}`" in readme, f"{fixture.name} is not described in README.md"

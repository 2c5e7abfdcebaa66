"""The Furiosa backend's CLI path, against generated ``furiosa-smi`` stand-ins."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from allsmi.backend_api import BackendError
from allsmi.backends.furiosa import parse
from allsmi.backends.furiosa import ENV_VAR, FuriosaBackend
from tests.contract.scenarios_furiosa import FURIOSA, RNGD_4X, block_sdk, route, write_standin

GIB = 1024 ** 3


@pytest.fixture(autouse=True)
def _no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    block_sdk(monkeypatch)


def _backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, routes: dict, *, timeout: float = 5.0,
             **kwargs: object) -> tuple[FuriosaBackend, Path]:
    exe = write_standin(tmp_path / "bin", routes, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setenv(ENV_VAR, str(exe))
    backend = FuriosaBackend(timeout_seconds=timeout, user_lookup=lambda pid: f"user{pid % 10}")
    assert backend.probe().available
    backend.open()
    return backend, exe


def _calls(exe: Path) -> list[str]:
    return (exe.parent / "calls.log").read_text().splitlines()


def test_four_rngd_values_match_the_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, exe = _backend(tmp_path, monkeypatch, {s: route(f) for s, f in RNGD_4X.items()})
    devices = backend.sample()
    assert [d.id for d in devices] == ["A3D7E1C2-5B8F-4E2A-9C61-0D4F7B2E8A11",
                                       "B9E2F4A7-1C3D-4F6B-8A20-5E7D9C1B3F22",
                                       "C4F1A8B3-7D2E-4A9C-B153-6F8E0D2C4A33",
                                       "D8A3B6C9-2E4F-4B7D-9C84-1A5F3E7D6B44"]
    npu1 = devices[1]
    assert npu1.uuid == npu1.id and npu1.index == 1
    assert npu1.name == "Furiosa RNGD" and npu1.kind == "npu" and npu1.vendor == "furiosa"
    assert npu1.bus_id == "0000:2a:00.0"
    assert npu1.firmware_version == "2026.3.0, 2d3f72a"
    assert npu1.temperature_celsius == pytest.approx(41.33)
    assert npu1.power_watts == pytest.approx(52.0)
    assert npu1.clock_mhz == pytest.approx(1000.0)
    assert npu1.memory_used_bytes == 12 * GIB and npu1.memory_total_bytes == 51002736640
    assert npu1.details["core_utilization_percent"] == (45.5, 44.0, 47.25, 46.0, 45.0, 43.5, 44.75, 46.0)
    assert npu1.utilization_percent == pytest.approx(45.25)  # the mean of the 8 PEs, not the max
    assert npu1.details["serial"] == "RNG26040100182Q" and npu1.details["governor"] == "OnDemand"
    assert npu1.health == "ok"
    assert devices[0].utilization_percent == 0.0 and devices[0].memory_used_bytes == 0
    assert devices[3].utilization_percent == pytest.approx(98.4375)
    assert backend.warnings == []
    calls = _calls(exe)  # status and ps run at once after info, so either may be logged first
    assert calls[0] == "info --format json"
    assert sorted(calls[1:]) == ["ps --format json", "status --format json"]


def test_processes_attributed_to_every_listed_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {s: route(f) for s, f in RNGD_4X.items()})
    by_label = {d.details["dev_name"]: d for d in backend.sample()}
    assert [p.pid for p in by_label["npu1"].processes] == [41230, 52011]
    assert [p.pid for p in by_label["npu3"].processes] == [41877, 52011]
    assert by_label["npu0"].processes == () and by_label["npu2"].processes == ()
    bench = by_label["npu3"].processes[1]
    assert bench.command == "python3 bench.py" and bench.user == "user1"
    assert bench.memory_bytes is None  # RNGD ps reports no per-process memory: unknown, not 0


def test_ids_follow_uuid_when_npu_labels_move(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    info = json.loads((FURIOSA / RNGD_4X["info"]).read_text())
    status = json.loads((FURIOSA / RNGD_4X["status"]).read_text())
    # After a reboot the same cards come back under other npuN labels.
    for row, label in zip(info, ["npu2", "npu3", "npu0", "npu1"]):
        row["dev_name"] = label
    for row, label in zip(status, ["npu2", "npu3", "npu0", "npu1"]):
        row["device"] = label
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route(text=json.dumps(info)),
                                                  "status": route(text=json.dumps(status)),
                                                  "ps": route(text="[]")})
    by_id = {d.id: d for d in backend.sample()}
    moved = by_id["B9E2F4A7-1C3D-4F6B-8A20-5E7D9C1B3F22"]
    assert moved.details["dev_name"] == "npu3" and moved.index == 3
    assert moved.utilization_percent == pytest.approx(45.25)  # its own status row followed it


def test_2025_1_format_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route("info-rngd-2x-2025.1.json"),
                                                  "status": route("status-rngd-2x-2025.1.json"),
                                                  "ps": route(text="[]")})
    first, second = backend.sample()
    assert first.temperature_celsius == pytest.approx(29.81)  # "29.81°C"
    assert first.power_watts == 35.0  # "35 W"
    assert first.clock_mhz is None  # "N/A", not 0
    assert first.details["pert_version"] == "2025.1.0+1694e18"
    assert "governor" not in first.details
    assert second.utilization_percent == 0.0


def test_warboy_era_output_flag_is_found_and_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, exe = _backend(tmp_path, monkeypatch, {"info": route("info-warboy-output-flag.json"),
                                                    "status": route("status-warboy-output-flag.json"),
                                                    "ps": route("ps-warboy-output-flag.json")}, flag="--output")
    (device,) = backend.sample()
    (device,) = backend.sample()
    calls = _calls(exe)
    assert calls[:2] == ["info --format json", "info --output json"]
    # status and ps run at once after info, so either may be logged first
    assert len(calls) == 7 and calls[4] == "info --output json"
    assert sorted(calls[2:4]) == sorted(calls[5:7]) == ["ps --output json", "status --output json"]
    assert device.details["core_utilization_percent"] == (63.2, 0.0)
    assert device.temperature_celsius == 35.0 and device.power_watts == pytest.approx(1.37)
    (proc,) = device.processes
    assert proc.pid == 3771 and proc.memory_bytes == 768 * 1024 ** 2  # two core rows, summed


def test_na_cells_and_partial_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route("info-na-cells.json"),
                                                  "status": route("status-partial.json"),
                                                  "ps": route(text="[]")})
    devices = backend.sample()
    assert [d.details["dev_name"] for d in devices] == ["npu0", "npu2"]
    dead, unread = devices
    assert dead.health == "lost"
    assert dead.utilization_percent is None and dead.power_watts is None and dead.memory_used_bytes is None
    assert "core_utilization_percent" not in dead.details
    assert dead.firmware_version is None  # "N/A"
    assert unread.health == "degraded"  # listed by info, no status row for npu2 (issue 20)
    assert unread.power_watts is None and unread.temperature_celsius is None  # "garbage W", 999
    text = " | ".join(backend.warnings)
    assert "row 1 (npu1) has no device_uuid" in text
    assert "unreadable power 'garbage W'" in text
    assert "implausible temperature 999" in text
    assert "status row 2 is not an object" in text
    assert "npu2: no furiosa-smi status row" in text


def test_bad_pe_values_and_dram_are_dropped_not_clamped() -> None:
    rows, warnings = parse.parse_status([
        {"device": "npu1", "liveness": "alive",
         "memory": {"DRAM": {"used_size": 2 * 51002736640, "total_size": 51002736640}},
         "pe_utilizations": [{"pe_core": 1, "pe_utilization": 140.0}, {"pe_core": 0, "pe_utilization": "12.5"},
                             {"pe_core": 2, "pe_utilization": "N/A"}]}])
    row = rows["npu1"]
    assert row.core_utilization == (12.5, None, None)  # sorted by pe_core; 140 % is garbage
    assert row.memory_used_bytes is None and row.memory_total_bytes is None
    assert any("140.0 is not a percentage" in w for w in warnings)
    assert any("implausible DRAM usage" in w for w in warnings)
    assert not any("PE 2" in w for w in warnings)  # N/A is missing, not garbage


def test_ps_failure_keeps_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route(RNGD_4X["info"]), "status": route(RNGD_4X["status"]),
                                                  "ps": route(stderr="Error: Permission denied\n", rc=1)})
    devices = backend.sample()
    assert len(devices) == 4 and all(d.processes is None for d in devices)  # unknown, not "nobody"
    assert any("ps unavailable" in w and "Permission denied" in w for w in backend.warnings)


def test_status_garbage_keeps_info_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route(RNGD_4X["info"]), "status": route("garbage.txt"),
                                                  "ps": route(text="[]")})
    devices = backend.sample()
    assert len(devices) == 4
    assert devices[1].power_watts == 52.0 and devices[1].utilization_percent is None
    assert devices[1].health == "unknown"
    assert any("status unavailable" in w for w in backend.warnings)


def test_non_zero_exit_is_an_error_even_with_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route(RNGD_4X["info"], rc=1, stderr="Error: io\nx\n"),
                                                  "status": route(RNGD_4X["status"]), "ps": route(text="[]")})
    with pytest.raises(BackendError) as info:
        backend.sample()
    assert str(info.value) == "furiosa-smi info --format json exited with status 1: Error: io"


@pytest.mark.parametrize("crash", [
    route(text="[]", die="SIGSEGV"),   # printed an empty list, then crashed: not "no devices"
    route(text="[]", rc=101, stderr="thread 'main' panicked at src/main.rs: device not found\n"),
    route(stderr="Error: device not found\nCaused by: /dev/rngd/npu0mgmt: No such file\n", rc=1),
    route(abort=True),
])
def test_a_crashed_tool_is_never_no_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: dict) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {"info": crash})
    with pytest.raises(BackendError, match=r"furiosa-smi info --format json (exited with status|was killed by signal)"):
        backend.sample()


@pytest.mark.parametrize(("info_route", "message"), [
    (route("garbage.txt"), "not JSON"),
    (route("info-truncated.json"), "not JSON"),
    (route(text='{"unexpected": true}'), "expected a JSON list"),
    (route(text="Error: internal error\n", rc=3), "exited with status 3: Error: internal error"),
    (route(die=True), r"was killed by signal SIGKILL \(9\)"),
])
def test_total_garbage_is_a_clear_backend_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                info_route: dict, message: str) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {"info": info_route, "status": route(RNGD_4X["status"])})
    with pytest.raises(BackendError, match=message):
        backend.sample()


def test_no_device_message_means_no_hardware(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route(stderr="Error: no devices found\n", rc=1)})
    assert backend.sample() == []


def _alive_standins(exe: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(exe) == part for part in (proc.info["cmdline"] or [])):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_hung_info_times_out_and_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, exe = _backend(tmp_path, monkeypatch, {"info": route(hang=True)}, timeout=0.6)
    started = time.monotonic()
    with pytest.raises(BackendError, match="did not finish within"):
        backend.sample()
    assert time.monotonic() - started < 3.0
    assert _alive_standins(exe) == []


def test_hung_status_costs_only_its_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, exe = _backend(tmp_path, monkeypatch, {"info": route(RNGD_4X["info"]), "status": route(hang=True),
                                                    "ps": route(RNGD_4X["ps"])}, timeout=1.0)
    started = time.monotonic()
    devices = backend.sample()
    assert time.monotonic() - started < 3.0
    assert len(devices) == 4 and devices[0].power_watts == 38.0 and devices[0].utilization_percent is None
    assert any("status unavailable" in w for w in backend.warnings)
    # ps runs beside status, not after it: the hung call no longer costs the processes
    assert not any("ps unavailable" in w for w in backend.warnings)
    assert all(d.processes is not None for d in devices)
    assert _alive_standins(exe) == []


def test_method_cli_ignores_an_installed_sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.contract.scenarios_furiosa import four_rngd, modern_sdk, use_sdk

    use_sdk(monkeypatch, modern_sdk(four_rngd()))
    exe = write_standin(tmp_path / "bin", {s: route(f) for s, f in RNGD_4X.items()})
    monkeypatch.setenv(ENV_VAR, str(exe))
    backend = FuriosaBackend(options={"method": "cli"})
    backend.open()
    assert backend.sample()[0].details["source"] == "furiosa-smi"


def test_ps_rows_for_an_unlisted_npu_are_named_in_the_warnings(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    rows = json.loads((FURIOSA / RNGD_4X["ps"]).read_text())
    rows.append({"dev_name": "npu9:[0, 7]", "pid": 60001, "cmdline": "ghost"})
    routes = {s: route(f) for s, f in RNGD_4X.items()} | {"ps": route(text=json.dumps(rows))}
    backend, _ = _backend(tmp_path, monkeypatch, routes)
    devices = backend.sample()
    assert len(devices) == 4 and all(60001 not in {p.pid for p in d.processes} for d in devices)
    assert any("does not list" in w and "npu9 (1 row(s))" in w for w in backend.warnings), backend.warnings


def test_status_dram_all_ones_is_unknown() -> None:
    """A DRAM total of UINT64_MAX bytes is the tool's "no reading", not 16 EiB."""
    rows, warnings = parse.parse_status([{"device": "npu0", "liveness": "alive", "memory": {"DRAM": {
        "used_size": 1024, "total_size": 18446744073709551615, "used_ratio": 0.0}}}])
    assert rows["npu0"].memory_total_bytes is None and rows["npu0"].memory_used_bytes == 1024
    assert warnings == []


def test_a_warning_line_before_the_json_is_ignored_with_a_note(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """furiosa-smi, like the other vendors' tools, may print a banner before its JSON: the
    document after it is read, and the note says text was ignored."""
    info = "WARN: a newer firmware is available for npu0\n" + (FURIOSA / RNGD_4X["info"]).read_text()
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route(text=info),
                                                  "status": route(RNGD_4X["status"])})
    devices = backend.sample()
    assert len(devices) == 4 and all(d.health == "ok" for d in devices)
    assert any("ignored" in w and "non-JSON" in w for w in backend.warnings), backend.warnings


def test_utilization_is_unknown_when_a_pe_did_not_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mean over the PEs that reported is not the device's: with PE 3 silent (N/A) or garbage
    (140 %), utilization_percent is unknown, like compute_active_percent, never 7 PEs' mean."""
    import json
    status = json.loads((FURIOSA / RNGD_4X["status"]).read_text())
    status[1]["pe_utilizations"][3]["pe_utilization"] = "N/A"
    status[2]["pe_utilizations"][3]["pe_utilization"] = 140.0
    backend, _ = _backend(tmp_path, monkeypatch, {"info": route(RNGD_4X["info"]), "status": route(text=json.dumps(status)),
                                                  "ps": route(RNGD_4X["ps"])})
    devices = backend.sample()
    for device in devices[1:3]:
        assert device.details["core_utilization_percent"][3] is None
        assert device.utilization_percent is None and device.compute_active_percent is None
    assert devices[3].utilization_percent == pytest.approx(98.4375)  # every PE reported
    assert devices[3].compute_active_percent == pytest.approx(98.438)

"""The Tenstorrent backend end to end, against generated ``tt-smi`` stand-ins."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from allsmi.backend_api import BackendError
from allsmi.backends.tenstorrent import ENV_VAR, HEARTBEAT_STALL_SECONDS, TenstorrentBackend
from tests.contract.scenarios_tenstorrent import FILE_ARGS, STDOUT_ARGS, TENSTORRENT, route, write_standin

P150_N150 = "snapshot-5.3-blackhole-p150a-wormhole-n150.json"
ARGPARSE_ERROR = (TENSTORRENT / "argparse-pre-3.0.5.txt").read_text()


def _backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, routes: dict, *, timeout: float = 5.0,
             **kwargs: object) -> tuple[TenstorrentBackend, Path]:
    exe = write_standin(tmp_path / "bin", routes)
    monkeypatch.setenv(ENV_VAR, str(exe))
    backend = TenstorrentBackend(timeout_seconds=timeout, **kwargs)  # type: ignore[arg-type]
    assert backend.probe().available
    backend.open()
    return backend, exe


def _calls(exe: Path) -> list[str]:
    return (exe.parent / "calls.log").read_text().splitlines()


def test_two_generations_two_boards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, exe = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route(P150_N150)})
    p150, n150 = backend.sample()
    assert p150.id == "tenstorrent:0000040031914035" and p150.parent is None
    assert p150.name == "Tenstorrent Blackhole p150a" and p150.bus_id == "0000:c1:00.0"
    assert p150.temperature_celsius == 48.2 and p150.clock_mhz == 1350.0
    assert p150.power_watts == 62.0 and p150.details["power_source"] == "asic_power"
    assert p150.power_limit_watts == 300.0
    assert p150.firmware_version == "19.11.0.0" and p150.driver_version == "2.0.0"
    assert p150.details["voltage_volts"] == 0.72 and p150.details["current_amps"] == 45.0
    assert p150.details["fw_gddr_fw"] == "2.16" and p150.details["tt_smi_version"] == "5.3.0"
    assert p150.health == "ok"
    # tt-smi has no utilization or memory figures: unknown, never guessed from a board table.
    assert p150.utilization_percent is None
    assert p150.memory_used_bytes is None and p150.memory_total_bytes is None
    assert n150.id == "tenstorrent:0100018311542017" and n150.details["generation"] == "wormhole"
    assert n150.temperature_celsius == 46.6 and n150.power_watts == 26.0 and n150.details["chip"] == "L"
    assert n150.firmware_version == "80.13.0.0"
    assert backend.warnings == []
    assert _calls(exe) == [STDOUT_ARGS]


def test_n300_right_chip_is_a_partition_and_power_is_counted_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch,
                          {STDOUT_ARGS: route("snapshot-3.0-grayskull-e150-wormhole-n300.json")})
    e150, left, right = backend.sample()
    assert e150.name == "Tenstorrent Grayskull e150" and e150.power_watts == 17.0
    assert e150.temperature_celsius == 43.6 and e150.clock_mhz == 1202.0
    assert left.id == "tenstorrent:0100014211703001" and left.parent is None
    assert right.id == "tenstorrent:0100014211703001:1" and right.parent == left.id
    assert left.power_watts == 58.0 and left.details["power_source"] == "asic_power_sum"  # 31 W + 27 W
    assert right.power_watts is None and right.details["asic_power_watts"] == 27.0
    assert right.temperature_celsius == 49.9 and right.bus_id is None
    assert left.power_limit_watts is None  # per-chip TDP limits do not make a board limit
    assert sum(d.power_watts or 0 for d in (e150, left, right)) == 75.0


def test_board_power_from_tt_smi_6_and_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch,
                          {STDOUT_ARGS: route("snapshot-6.8-blackhole-p300c-board-power.json")},
                          user_lookup=lambda pid: "looked-up")
    board, second = backend.sample()
    assert board.power_watts == 42.0 and board.details["power_source"] == "board_power"
    assert board.details["asic_power_watts"] == 16.0 and second.details["asic_power_watts"] == 21.0
    assert second.parent == board.id and second.power_watts is None
    assert board.temperature_celsius == 34.8 and second.temperature_celsius == 36.8
    assert board.fan_percent == 38.0 and board.details["fan_rpm"] == 1882
    assert [(p.pid, p.user) for p in board.processes] == [(7001, "alice")]
    assert [(p.pid, p.user) for p in second.processes] == [(7001, "alice"), (8123, "looked-up")]
    assert second.processes[1].command == "./build/test/tt_metal/unit_tests"
    assert any("processes[3] lacks a pid" in w for w in backend.warnings)


def test_pre_3_0_5_file_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "tmp"  # where the backend's private directories go
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    backend, exe = _backend(tmp_path, monkeypatch, {
        STDOUT_ARGS: route(stderr=ARGPARSE_ERROR, rc=2),
        FILE_ARGS: route(write_file="snapshot-2.2-file-smbus-tx-wormhole-n150.json", saved_notice=True)})
    (chip,) = backend.sample()
    (chip,) = backend.sample()
    assert chip.temperature_celsius == 45.5 and chip.power_watts == 24.0
    assert chip.firmware_version == "2.21.0.0"  # arc_fw: no bundle version in tt-smi 2.x
    # The unknown flag is tried once; afterwards straight to a private snapshot file.
    assert _calls(exe) == [STDOUT_ARGS, FILE_ARGS, FILE_ARGS]
    # Each read's private directory, and the snapshot file in it, is removed after the read:
    # nothing is left behind by a process that never closes its backend.
    assert os.listdir(temp) == []
    backend.close()


def test_snapshot_announced_in_a_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = tmp_path / "tt_smi" / "07-30-2024_10:12:44_snapshot.json"
    saved.parent.mkdir()
    saved.write_text((TENSTORRENT / P150_N150).read_text())
    backend, exe = _backend(tmp_path, monkeypatch, {
        STDOUT_ARGS: route(saved_notice=True, notice_path=str(saved)),
        FILE_ARGS: route(write_file=P150_N150)})
    assert len(backend.sample()) == 2
    assert len(backend.sample()) == 2
    assert _calls(exe) == [STDOUT_ARGS, FILE_ARGS]


def test_progress_bar_and_colour_on_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route("stdout-3.0.5-progress-and-ansi.txt")})
    assert [d.details["board_type"] for d in backend.sample()] == ["p150a", "n150"]


def test_no_devices_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route("no-devices.txt", rc=1)})
    assert backend.sample() == [] and backend.warnings == []


def test_non_zero_exit_is_an_error_even_with_a_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route(P150_N150, rc=1, stderr="chip 1 reset\n")})
    with pytest.raises(BackendError) as info:
        backend.sample()
    assert str(info.value) == "tt-smi -s --snapshot_no_tty exited with status 1: chip 1 reset"


def test_a_traceback_mentioning_no_devices_is_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    crash = "Traceback (most recent call last):\n  ...\nRuntimeError: No Tenstorrent devices detected\n"
    backend, _ = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route(stderr=crash, rc=1)})
    with pytest.raises(BackendError, match="exited with status 1: Traceback"):
        backend.sample()


def test_bad_rows_are_skipped_and_the_rest_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route("snapshot-bad-rows.json")})
    good, odd = backend.sample()
    assert good.id == "tenstorrent:0100018311542017" and good.power_watts == 26.0
    assert odd.id == "tenstorrent:bus:0000:82:00.0"  # board id "zz-not-hex": the bus id identifies it
    assert odd.power_watts is None and odd.temperature_celsius is None
    assert sum("is not an object" in w for w in backend.warnings) == 2


def test_chip_without_telemetry_is_degraded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route("snapshot-5.3-na-cells.json")})
    n150, p150, blind = backend.sample()
    assert n150.health == "ok" and n150.temperature_celsius == pytest.approx(46.5625)
    assert p150.health == "degraded"  # DRAM not trained
    assert p150.power_watts is None and p150.temperature_celsius is None
    assert blind.id == "tenstorrent:index:2" and blind.health == "degraded"
    assert any("no telemetry" in w for w in backend.warnings)
    assert any("neither board id nor bus id" in w for w in backend.warnings)


def test_stuck_heartbeat_marks_the_chip_degraded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    backend, _ = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route(P150_N150)}, clock=lambda: now[0])
    assert {d.health for d in backend.sample()} == {"ok"}
    now[0] += 1.0
    assert {d.health for d in backend.sample()} == {"ok"}  # too soon to tell
    now[0] += HEARTBEAT_STALL_SECONDS
    devices = backend.sample()
    assert {d.health for d in devices} == {"degraded"}
    assert devices[0].details["heartbeat_stalled"] is True
    assert any("heartbeat stuck at 20493" in w for w in backend.warnings)


@pytest.mark.parametrize(("spec", "message"), [
    (route("garbage.txt"), "unusable tt-smi output"),
    (route("snapshot-truncated.json"), "truncated"),
    (route(text='{"time": "now", "device_info": "none"}'), "no device_info list"),
    (route(text="Error: PCI error on device 0\n", rc=1), "exited with status 1: Error: PCI error"),
    (route(die=True), r"was killed by signal SIGKILL \(9\)"),
    (route(text='{"device_info": ["x", 1]}'), "no decodable device"),
])
def test_unusable_output_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          spec: dict, message: str) -> None:
    backend, _ = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: spec})
    with pytest.raises(BackendError, match=message):
        backend.sample()


def test_hung_tt_smi_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, exe = _backend(tmp_path, monkeypatch, {STDOUT_ARGS: route(hang=True)}, timeout=0.6)
    started = time.monotonic()
    with pytest.raises(BackendError, match="did not finish within 0.6 s"):
        backend.sample()
    assert time.monotonic() - started < 3.0
    leftovers = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(exe) in (proc.info["cmdline"] or []):
                leftovers.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    assert leftovers == []

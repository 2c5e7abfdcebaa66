"""The Gaudi backend against generated hl-smi stand-ins (values, fallbacks, failures)."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil
import pytest

from allsmi.backend_api import BackendError, BackendTimeout, BackendUnavailable
from allsmi.backends.gaudi.csv_output import ALL_FIELDS, CORE_FIELDS
from allsmi.backends.gaudi import ENV_VAR, GaudiBackend
from allsmi.schema.units import MIB
from tests.contract.scenarios_gaudi import GAUDI, write_standin

G3_UUID = "01P4-HL3090A0-18-U4V193-22-07-{:02d}"


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Write an hl-smi stand-in and point ALLSMI_HL_SMI at it."""
    def make(fixture: str = "gaudi3-8x-1.22", **kwargs: Any) -> Path:
        exe = write_standin(tmp_path / "bin", fixture, **kwargs)
        monkeypatch.setenv(ENV_VAR, str(exe))
        return exe
    return make


@pytest.fixture
def backends() -> Iterator[list[GaudiBackend]]:
    """Backends created through this list are closed even when a test fails."""
    made: list[GaudiBackend] = []
    yield made
    for backend in made:
        backend.close()


#: Children that existed before the current test (another suite's), ignored by the checks.
_FOREIGN: set[int] = set()


@pytest.fixture(autouse=True)
def _baseline_children() -> None:
    _FOREIGN.clear()
    _FOREIGN.update(p.pid for p in psutil.Process().children(recursive=True))


def _children() -> list[psutil.Process]:
    """Our process's descendants, started by these tests."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in _FOREIGN]


def _zombies() -> list[int]:
    found = []
    for proc in _children():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def _wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _open(backends: list[GaudiBackend], timeout: float = 5.0, **options: Any) -> GaudiBackend:
    backend = GaudiBackend(timeout_seconds=timeout,
                           options={"interval_seconds": 0.2, **options},
                           restart_backoff=(0.05, 0.4))
    backends.append(backend)
    backend.open()
    return backend


@pytest.mark.parametrize("mode", ["loop", "oneshot"])
def test_values_and_units_gaudi3(standin, backends, mode: str) -> None:
    standin()
    backend = _open(backends, mode=mode)
    assert backend.mode == mode
    assert backend.fields == ALL_FIELDS
    devices = backend.sample()
    assert [d.index for d in devices] == list(range(8))
    dev = devices[2]
    assert dev.id == dev.uuid == G3_UUID.format(2)
    assert (dev.vendor, dev.kind, dev.backend, dev.health) == ("intel", "gpu", "gaudi", "ok")
    assert dev.name == "HL-325L" and dev.bus_id == "0000:43:00.0"
    assert dev.driver_version == "1.22.1-97ec1a4"
    assert dev.firmware_version == "hl-gaudi3-1.22.0-fw-61.4.2-sec-2"
    assert dev.utilization_percent == 100.0
    assert dev.memory_total_bytes == 131072 * MIB
    assert dev.memory_used_bytes == 127488 * MIB
    assert dev.temperature_celsius == 71.0
    assert dev.power_watts == 843.0 and dev.power_limit_watts == 850.0
    assert dev.clock_mhz == 1600.0 and devices[0].clock_mhz == 800.0
    assert dev.energy_joules is None and dev.fan_percent is None
    assert dev.details == {"clock_max_soc_mhz": 1600.0, "module_id": 0, "serial": "AO40020262",
                           "ecc_uncorrected_total": 0, "ecc_corrected_total": 0}
    assert devices[5].details["ecc_corrected_total"] == 2
    assert backend.warnings == []


def test_field_set_falls_back_field_by_field(standin, backends) -> None:
    standin("gaudi2-8x-1.15", listing="hl-smi-L-gaudi2.txt")
    backend = _open(backends)
    dropped = {"power.max", "clocks.current.soc", "clocks.max.soc"}
    assert backend.fields == tuple(f for f in ALL_FIELDS if f not in dropped)
    devices = backend.sample()
    assert len(devices) == 8
    dev = devices[4]
    assert dev.name == "HL-225" and dev.memory_total_bytes == 98304 * MIB
    assert dev.memory_used_bytes == 90112 * MIB and dev.power_watts == 410.0
    assert dev.power_limit_watts is None and dev.clock_mhz is None
    assert dev.firmware_version == "hl-gaudi2-1.15.0-fw-49.0.0-sec-9"
    assert dev.details["serial"] == "AM50016134"


def test_rejection_that_names_no_field_tests_each_field(standin, backends) -> None:
    standin("gaudi2-8x-1.15", listing="hl-smi-L-gaudi2.txt", reject_style="anonymous")
    backend = _open(backends, mode="oneshot")
    assert backend.missing_fields == ("power.max", "clocks.current.soc", "clocks.max.soc")
    assert backend.fields == CORE_FIELDS + ("module_id", "serial", "ecc.errors.uncorrected.aggregate.total",
                                            "ecc.errors.corrected.aggregate.total")
    devices = backend.sample()
    assert len(devices) == 8 and devices[0].details["serial"] == "AM50016130"
    assert devices[0].power_watts == 84.0


@pytest.mark.parametrize("style", ["named", "invalid"])
def test_an_hl_smi_without_driver_version_still_reports_every_device(standin, backends, style: str) -> None:
    # Older hl-smi exits 1 with "invalid query field" for driver_version: every device is
    # still reported, that field null, and the first sample's message says which fields lack.
    standin("gaudi3-8x-1.22", unknown_fields=["driver_version"], reject_style=style)
    backend = _open(backends, mode="oneshot")
    assert backend.missing_fields == ("driver_version",)
    devices = backend.sample()
    assert len(devices) == 8
    assert all(d.driver_version is None for d in devices)
    assert devices[0].power_watts == 226.0 and devices[0].power_limit_watts == 850.0
    assert any("does not know the field(s) driver_version" in w for w in backend.warnings)


def test_a_tool_with_only_a_few_fields_reports_those(standin, backends) -> None:
    standin(unknown_fields=[f for f in ALL_FIELDS if f not in ("index", "uuid", "power.draw")])
    backend = _open(backends, mode="oneshot")
    assert backend.fields == ("index", "uuid", "power.draw")
    assert backend.sample()[0].memory_total_bytes is None


def test_a_tool_that_rejects_every_field_is_a_clear_error(standin, backends) -> None:
    standin(unknown_fields=list(ALL_FIELDS))
    with pytest.raises(BackendError, match="accepts none of index, bus_id, uuid"):
        _open(backends)


def test_a_crash_during_field_negotiation_is_not_retried(standin, backends) -> None:
    standin(exit_code=3)
    with pytest.raises(BackendError, match="exited with status 3: hl-smi: Failed to initialize HLML"):
        _open(backends)


def test_na_cells_become_none(standin, backends) -> None:
    standin("gaudi2-4x-na-cells", listing=None)
    backend = _open(backends, mode="oneshot")
    devices = {d.index: d for d in backend.sample()}
    assert devices[0].power_watts is None and devices[0].utilization_percent == 0.0
    assert devices[1].id == "gaudi:0000:1a:00.0" and devices[1].uuid is None
    assert devices[1].utilization_percent is None and devices[1].memory_used_bytes is None
    assert devices[1].temperature_celsius is None and devices[1].power_watts == 87.0
    assert "serial" not in devices[1].details and "ecc_corrected_total" not in devices[1].details
    assert all(getattr(devices[2], f) is None for f in (
        "utilization_percent", "memory_used_bytes", "memory_total_bytes",
        "temperature_celsius", "power_watts"))
    assert devices[3].name is None and devices[3].driver_version is None
    assert all(d.health == "ok" and d.firmware_version is None for d in devices.values())
    assert any("firmware versions unavailable" in w for w in backend.warnings)


def test_garbage_rows_are_skipped_with_warnings_others_kept(standin, backends) -> None:
    standin("gaudi3-8x-garbage-mixed")
    backend = _open(backends, mode="oneshot")
    devices = backend.sample()
    assert [d.index for d in devices] == [0, 1, 2, 3, 4, 5, 6, 7]
    # Device 3's row is unusable but hl-smi -L lists it: degraded, identity kept, no values.
    assert devices[3].health == "degraded" and devices[3].uuid == "01P4-HL3090A0-18-U4V193-22-07-03"
    assert devices[3].bus_id == "0000:44:00.0" and devices[3].power_watts is None
    assert devices[3].firmware_version is not None  # from -L
    assert all(d.health == "ok" for d in devices if d.index != 3)
    assert devices[5].index == 5 and devices[5].power_watts is None
    assert devices[5].utilization_percent == 88.0
    assert devices[4].power_watts == 224.0
    text = "\n".join(backend.warnings)
    assert "hl-smi: warning" in text and "7 cells where 17" in text
    assert "unreadable power.draw value 'ERR!'" in text
    assert "listed by hl-smi -L but has no -Q reading row" in text


def test_listed_device_without_row_takes_its_row_when_one_arrives(standin, backends, tmp_path) -> None:
    """A device -L lists without a -Q row is degraded; once its row comes it is ok, one device."""
    rows = (GAUDI / "gaudi3-8x-1.22.csv").read_text().splitlines()
    seven = tmp_path / "seven.csv"
    seven.write_text("\n".join(r for r in rows if not r.startswith("6, ")) + "\n")
    standin("gaudi3-8x-1.22", fixture_file=str(seven))
    backend = _open(backends, mode="oneshot")
    first = {d.index: d for d in backend.sample()}
    assert len(first) == 8 and first[6].health == "degraded" and first[6].memory_used_bytes is None
    seven.write_text("\n".join(rows) + "\n")  # hl-smi reads the device again
    second = backend.sample()
    assert [d.index for d in second] == list(range(8))
    assert len({d.id for d in second}) == 8 and all(d.health == "ok" for d in second)
    assert second[6].memory_used_bytes is not None


def test_an_over_long_line_in_loop_mode_is_named_in_the_warnings(standin, backends, tmp_path) -> None:
    """The loop child's line over the length limit is dropped unread and said, not silent; the
    whole rows around it are kept."""
    rows = (GAUDI / "gaudi3-8x-1.22.csv").read_text().splitlines()
    long = tmp_path / "long.csv"
    long.write_text("\n".join(rows[:3] + ["x" * 100_000] + rows[3:]) + "\n")
    standin("gaudi3-8x-1.22", fixture_file=str(long))
    backend = _open(backends)
    assert backend.mode == "loop"
    warnings: list[str] = []
    assert _wait_until(lambda: (backend.sample(), warnings.extend(backend.warnings))
                       and any("over the length limit" in w for w in warnings))
    assert any("a line of 100000 bytes" in w for w in warnings), warnings
    assert all(d.health == "ok" for d in backend.sample())


def test_truncated_output_keeps_the_whole_rows(standin, backends) -> None:
    standin("gaudi3-8x-truncated", raw=True)
    backend = _open(backends, mode="oneshot")
    devices = backend.sample()
    # Seven whole rows; device 7's row is cut off, and -L lists it: degraded, never dropped.
    assert [d.health for d in devices] == ["ok"] * 7 + ["degraded"]
    assert devices[7].index == 7 and devices[7].utilization_percent is None


def test_nonzero_exit_is_a_backend_error(standin, backends) -> None:
    standin(exit_code=9)
    with pytest.raises(BackendError, match="driver not loaded"):
        _open(backends)


def test_garbage_only_is_a_backend_error(standin, backends) -> None:
    standin(fixture_file=str(GAUDI / "garbage-only.txt"), raw=True)
    with pytest.raises(BackendError, match="no usable rows"):
        _open(backends)


def test_a_hung_tool_times_out_and_is_killed(standin, backends) -> None:
    standin(hang="always")
    started = time.monotonic()
    with pytest.raises(BackendTimeout, match="timed out"):
        _open(backends, timeout=0.5)
    assert time.monotonic() - started < 3
    assert _wait_until(lambda: not _children(), 2)


def test_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nope"))
    backend = GaudiBackend()
    probe = backend.probe()
    assert not probe.available and ENV_VAR in probe.reason
    with pytest.raises(BackendUnavailable, match=ENV_VAR):
        backend.open()
    backend.close()


def test_bad_options_are_errors(standin, backends) -> None:
    standin()
    with pytest.raises(BackendError, match="mode"):
        _open(backends, mode="sometimes")
    with pytest.raises(BackendError, match="interval_seconds"):
        _open(backends, interval_seconds=0)


@pytest.mark.parametrize("loop", ["reject", "ignore"])
def test_unusable_loop_mode_falls_back_to_oneshot(standin, backends, loop: str) -> None:
    standin(loop=loop)
    backend = _open(backends)
    warnings: list[str] = []
    # A child that rejects -l is noticed in open(); one that prints a frame and
    # exits 0 (ignores -l) is noticed by the first sample after it exits.
    for _ in range(50):
        devices = backend.sample()
        warnings.extend(backend.warnings)
        assert len(devices) == 8 and all(d.health == "ok" for d in devices)
        if backend.mode == "oneshot":
            break
        time.sleep(0.02)
    assert backend.mode == "oneshot" and backend.stream is None
    assert any("loop mode unusable" in w for w in warnings)
    assert len(backend.sample()) == 8


def test_silent_loop_child_falls_back_to_oneshot(standin, backends) -> None:
    standin(hang="loop")
    backend = _open(backends, timeout=0.5)
    assert backend.mode == "oneshot"
    assert len(backend.sample()) == 8
    assert _wait_until(lambda: not _children(), 2)  # the silent loop child is gone


def test_stale_loop_data_degrades_devices_then_recovers(standin, backends) -> None:
    standin(hang="after_first_frame")
    backend = _open(backends, timeout=0.5)
    assert backend.mode == "loop"
    assert all(d.health == "ok" for d in backend.sample())
    time.sleep(0.8)  # more than three 0.2 s intervals without a row
    stale = backend.sample()
    assert len(stale) == 8
    for dev in stale:
        assert dev.health == "degraded" and dev.id == dev.uuid
        assert dev.utilization_percent is None and dev.power_watts is None
        assert dev.memory_used_bytes is None and dev.temperature_celsius is None
    assert any("no fresh hl-smi data" in w for w in backend.warnings)
    # the silent child is killed after 3 intervals + timeout and restarted
    assert backend.stream is not None
    assert _wait_until(lambda: backend.stream.generation >= 2, 5)
    assert _wait_until(lambda: all(d.health == "ok" for d in backend.sample()), 3)


def test_a_device_missing_from_the_output_is_degraded(standin, backends, tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    shutil.copy(GAUDI / "gaudi3-8x-1.22.csv", rows)
    standin(fixture_file=str(rows))
    backend = _open(backends, mode="oneshot")
    assert len(backend.sample()) == 8
    lines = rows.read_text().splitlines(keepends=True)
    rows.write_text("".join(lines[:3] + lines[4:]))
    devices = backend.sample()
    assert len(devices) == 8
    gone = devices[3]
    assert gone.id == G3_UUID.format(3) and gone.health == "degraded"
    assert gone.utilization_percent is None and gone.power_watts is None
    assert gone.name == "HL-325L"
    assert all(d.health == "ok" for d in devices if d.index != 3)
    assert any(G3_UUID.format(3) in w and "degraded" in w for w in backend.warnings)


def test_restart_with_backoff_never_mixes_frames(standin, backends) -> None:
    standin(die_after_frames=1, die_generations=2, stamp=True)
    backend = _open(backends)
    stream = backend.stream
    assert stream is not None
    seen: set[float] = set()
    warnings: list[str] = []
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline and (stream.generation < 3 or len(seen) < 6):
        devices = backend.sample()
        warnings.extend(backend.warnings)
        values = {d.utilization_percent for d in devices if d.health == "ok"}
        assert len(values) <= 1, f"one sample mixed frames: {values}"
        seen |= values
        time.sleep(0.05)
    assert stream.generation >= 3
    assert {v // 10 for v in seen if v is not None} >= {1, 2, 3}  # data from every child
    text = "\n".join(warnings)
    assert "exited with status 3" in text and "lost connection" in text
    assert "dropped its unfinished frame" in text and "restarting with back-off" in text
    assert backend.mode == "loop"


def test_stderr_flood_does_not_stall_the_loop(standin, backends) -> None:
    standin(stderr_noise=200_000, stamp=True)
    backend = _open(backends)
    first = backend.sample()[0].utilization_percent
    assert _wait_until(lambda: backend.sample()[0].utilization_percent != first, 3)


def test_processes_from_the_table_view(standin, backends) -> None:
    standin(table="hl-smi-table-gaudi3-processes.txt")
    backend = _open(backends, processes=True)
    devices = backend.sample()
    assert devices[0].processes == ()
    assert [(p.pid, p.command, p.memory_bytes) for p in devices[1].processes] == [
        (41237, "python3", 44032 * MIB)]
    assert {p.pid for p in devices[2].processes} == {41238, 41240}
    assert devices[7].processes[0].memory_bytes is None


def test_processes_failure_is_only_a_warning(standin, backends) -> None:
    standin(table=None)
    backend = _open(backends, processes=True)
    devices = backend.sample()
    assert len(devices) == 8 and all(d.processes is None for d in devices)  # unknown, not "nobody"
    assert any("processes unavailable" in w for w in backend.warnings)


def test_no_zombies_after_many_cycles_and_close_leaves_nothing(standin, backends) -> None:
    standin(die_after_frames=2, die_generations=4)
    threads_before = set(threading.enumerate())
    oneshot = _open(backends, mode="oneshot")
    loop = _open(backends)
    for _ in range(25):
        assert len(oneshot.sample()) == 8
        try:
            loop.sample()
        except BackendError as exc:  # the loop child crashed and, on a loaded machine, its
            assert "restarting it" in str(exc)  # successor had no frame yet: said, and restarted
        # A loop child that just died is a zombie until the reader thread sees EOF and
        # reaps it: none may *persist* (accumulate over cycles).
        assert _wait_until(lambda: not _zombies(), timeout=2.0), _zombies()
        live = [p.pid for p in _children()]
        assert len(live) <= 1, f"only the loop child may be running: {live}"
    assert loop.stream is not None and loop.stream.generation >= 2
    oneshot.close()
    loop.close()
    loop.close()
    assert loop.stream is None
    assert _children() == []
    assert set(threading.enumerate()) <= threads_before


def test_tool_path_argument_overrides_the_search(standin, backends, monkeypatch) -> None:
    exe = standin()
    monkeypatch.delenv(ENV_VAR)
    backend = GaudiBackend(tool_path=str(exe), options={"mode": "oneshot"})
    backends.append(backend)
    assert backend.probe().details == {"tool": str(exe)}
    backend.open()
    assert len(backend.sample()) == 8
    assert not GaudiBackend(tool_path=str(exe.parent / "missing")).probe().available


def test_process_rows_for_an_unlisted_aip_are_named_in_the_warnings(standin, backends) -> None:
    standin(table="hl-smi-table-gaudi3-process-on-unlisted-aip.txt")
    backend = _open(backends, processes=True)
    devices = backend.sample()
    assert len(devices) == 8 and {p.pid for p in devices[1].processes} == {41237}
    assert all(60001 not in {p.pid for p in d.processes or ()} for d in devices)
    assert any("process rows for device(s) it does not list" in w and "9 (1 row(s))" in w
               for w in backend.warnings), backend.warnings


@pytest.mark.parametrize("mode", ["oneshot", "loop"])
def test_counts_and_ids_that_are_no_whole_number_are_unknown_said_once(standin, backends, tmp_path,
                                                                        mode: str) -> None:
    """module_id and the ECC totals are counts/ids: "-1", "3.7" (never rounded to 4), "3.0",
    "1e3" and "+2" are unknown with one warning each (not repeated every sample), never a value
    in details; the whole numbers beside them are kept."""
    rows = (GAUDI / "gaudi3-8x-1.22.csv").read_text().splitlines()
    cells = [row.split(", ") for row in rows]
    # fields: ... module_id (13), serial (14), ecc uncorrected (15), ecc corrected (16)
    cells[0][13], cells[0][15], cells[0][16] = "-1", "3.7", "-2"
    cells[1][13], cells[1][15], cells[1][16] = "3.0", "1e3", "+2"
    cells[2][16] = "7"
    odd = tmp_path / "odd.csv"
    odd.write_text("\n".join(", ".join(c) for c in cells) + "\n")
    standin("gaudi3-8x-1.22", fixture_file=str(odd))
    backend = _open(backends, mode=mode)
    devices = backend.sample()
    first = list(backend.warnings)
    for dev in devices[:2]:
        assert not {"module_id", "ecc_uncorrected_total", "ecc_corrected_total"} & set(dev.details), dev.details
    assert devices[2].details["ecc_corrected_total"] == 7 and devices[2].details["module_id"] == 0
    refused = [w for w in first if "is not a whole number" in w]
    assert len(refused) == 6, first
    for device, field, raw in ((0, "module_id", "-1"), (0, "ecc.errors.uncorrected.aggregate.total", "3.7"),
                               (1, "module_id", "3.0"), (1, "ecc.errors.corrected.aggregate.total", "+2")):
        assert any(w.startswith(G3_UUID.format(device)) and f"{field} value {raw!r}" in w for w in refused), refused
    again = backend.sample()
    assert not any("is not a whole number" in w for w in backend.warnings), "said once, not every sample"
    assert "module_id" not in again[0].details and again[2].details["ecc_corrected_total"] == 7


def test_impossible_process_rows_are_skipped_and_said_once(standin, backends, tmp_path) -> None:
    table = (GAUDI / "hl-smi-table-gaudi3-processes.txt").read_text()
    odd = table.replace("|   5      52011     C    vllm-worker                              97024MiB   |",
                        "|   5      52011     C    vllm-worker                              -512MiB    |\n"
                        "|   6      -4        C    ghost                                    1MiB       |\n"
                        "|   6.5    52013     C    ghost                                    1MiB       |")
    assert odd != table
    (tmp_path / "odd-table.txt").write_text(odd)
    standin(table=str(tmp_path / "odd-table.txt"))
    backend = _open(backends, processes=True, mode="oneshot")
    devices = backend.sample()
    assert [(p.pid, p.memory_bytes) for p in devices[5].processes] == [(52011, None)]
    assert devices[6].processes == ()
    text = "\n".join(backend.warnings)
    assert "PID '-4'" in text and "AIP '6.5'" in text and "negative memory '-512MiB'" in text, text
    backend.sample()
    assert not any("table view" in w for w in backend.warnings), backend.warnings

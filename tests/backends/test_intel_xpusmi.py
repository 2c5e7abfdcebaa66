"""Memory from ``xpu-smi`` as it really prints it: its device list (``discovery -j``) has no
memory figure at all; memory in use is metric 18 (``GPU Memory Used (MiB)``) of one ``xpu-smi
dump`` running from open() to close() (its header once, then a row per device every second),
of which each sample reads the newest rows; a GPU's size is the ``memory_physical_size_byte``
of its properties (``discovery -d <bdf> -j``), asked once, where sysfs publishes none (upstream
i915 has no ``lmem_total_bytes``)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from allsmi.backends.intel import IntelGpuBackend
from allsmi.backends.intel.dumpstream import MAX_LINE
from allsmi.backends.intel.xpusmi import dump_header, dump_row, parse_discovery
from tests.contract import standin
from tests.contract.scenarios_intel import DUMP_CALL, xpu_smi_routes

from .test_intel import FIXTURES, Clock

MIB = 1024 * 1024
HEADER = "Timestamp, DeviceId, GPU Memory Used (MiB)\n"
CARD1 = "discovery -d 0000:50:00.0 -j"
#: A dump that prints its header and rows once, then stays running and silent.
ONCE_THEN_SILENT = {"every": 3600}


def _backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: dict[str, dict[str, Any]] | None = None,
             without: tuple[str, ...] = ()) -> tuple[IntelGpuBackend, Path, Clock]:
    """The Flex 170 pair (less the files ``without``) with a stand-in ``xpu-smi`` answering as
    the contract scenario's (its dump streaming), except for the calls in ``answers``."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "i915-flex170x2", tree, symlinks=True)
    for name in without:
        (tree / name).unlink()
    bindir = tmp_path / "bin"
    pidfile = str(bindir / "pids")
    routes = xpu_smi_routes(pidfile=pidfile)
    routes.update({call: dict(route, pidfile=pidfile) for call, route in (answers or {}).items()})
    monkeypatch.setenv("ALLSMI_XPU_SMI", str(standin.write_standin(bindir, "xpu-smi", routes, unknown="argparse")))
    clock = Clock()
    backend = IntelGpuBackend(options={"sysfs_root": str(tree / "sys"), "proc_root": str(tree / "proc")},
                              search_dirs=(), clock=clock, sleep=clock.sleep, lookup_user=lambda pid: None)
    return backend, bindir, clock


def _sample(backend: IntelGpuBackend) -> dict[str, Any]:
    return {d.bus_id: d for d in backend.sample()}


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10.0
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _running(bindir: Path) -> list[int]:
    return [pid for pid in standin.pids(bindir / "pids") if standin.alive(pid)]


def test_memory_in_use_comes_from_one_running_dump_started_once(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    backend, bindir, _ = _backend(tmp_path, monkeypatch)
    for _ in range(3):
        devices = _sample(backend)
        # was: None on every real machine (the list has no memory_free_size_byte)
        assert devices["0000:4d:00.0"].memory_used_bytes == round(2332.47 * MIB)  # the dump's MiB, in bytes
        assert devices["0000:50:00.0"].memory_used_bytes == round(517.25 * MIB)
        assert devices["0000:4d:00.0"].uuid == "01000000-0000-004d-0000-000856c08086"
        assert devices["0000:4d:00.0"].memory_total_bytes == 17179869184  # sysfs lmem_total_bytes
        assert backend.warnings == []
    made = standin.calls(bindir)
    # one dump for every sample (started by the first), never a dump per sample; the list each time
    assert made.count(DUMP_CALL) == 1 and made.count("discovery -j") == 3, made
    assert CARD1 not in made, "both sizes are in sysfs: no properties asked"
    assert _running(bindir), "the dump runs between samples"
    backend.close()
    _wait(lambda: not _running(bindir), "close() kills and reaps the dump")


def test_a_sample_reads_the_newest_rows_without_waiting_for_new_ones(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The dump prints its rows once and then nothing: later samples take the rows it printed
    (fresh still) at once, never wait out the dump's interval or the timeout for more."""
    backend, _, _ = _backend(tmp_path, monkeypatch, {DUMP_CALL: dict(
        ONCE_THEN_SILENT, file=str(FIXTURES / "xpu-smi-dump-memory-used-flex170x2.csv"))})
    backend.timeout_seconds = 30.0
    assert _sample(backend)["0000:50:00.0"].memory_used_bytes == round(517.25 * MIB)
    started = time.monotonic()
    assert _sample(backend)["0000:50:00.0"].memory_used_bytes == round(517.25 * MIB)
    assert time.monotonic() - started < 15.0, "the second sample waited for a dump"
    backend.close()


def test_a_row_older_than_two_intervals_or_the_timeout_is_unknown(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _, clock = _backend(tmp_path, monkeypatch, {DUMP_CALL: dict(
        ONCE_THEN_SILENT, file=str(FIXTURES / "xpu-smi-dump-memory-used-flex170x2.csv"))})
    assert _sample(backend)["0000:4d:00.0"].memory_used_bytes == round(2332.47 * MIB)
    clock.now += 4.0  # within the 5 s timeout: still the newest known
    assert _sample(backend)["0000:4d:00.0"].memory_used_bytes == round(2332.47 * MIB)
    clock.now += 2.0
    devices = _sample(backend)
    assert all(d.memory_used_bytes is None for d in devices.values())  # never the stale number
    assert any("no fresh row from xpu-smi dump -d -1 -m 18 -i 1 for device 0, 1, 2" in w and "limit 5 s" in w
               for w in backend.warnings), backend.warnings
    assert devices["0000:4d:00.0"].uuid is not None  # the list still answered
    backend.close()


def test_a_dump_that_cannot_run_is_said_and_restarted_with_back_off(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    backend, bindir, clock = _backend(tmp_path, monkeypatch, {DUMP_CALL: {"text": "Error: Device not found\n"}})
    devices = _sample(backend)
    assert all(d.memory_used_bytes is None for d in devices.values())
    assert devices["0000:4d:00.0"].uuid is not None  # the list still answered
    said = " ".join(backend.warnings)
    assert "'Error: Device not found' where its 'GPU Memory Used (MiB)' header belongs" in said, said
    assert "xpu-smi dump -d -1 -m 18 -i 1 exited with status 0; restarting it in 1.0 s" in said, said
    for wait, runs in ((0.5, 1), (0.6, 2), (1.0, 2), (1.8, 2), (0.3, 3)):  # waits of 1 s, then 2 s
        clock.now += wait
        _wait(lambda: not (backend.dump and backend.dump.running), "the dump ends")
        devices = _sample(backend)
        assert all(d.memory_used_bytes is None for d in devices.values())
        assert backend.dump is not None and backend.dump.children == runs, wait
    backend.close()


def test_a_dump_that_dies_after_its_rows_is_said_and_restarted_at_once(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = (FIXTURES / "xpu-smi-dump-memory-used-flex170x2.csv").read_text()
    backend, bindir, _ = _backend(tmp_path, monkeypatch, {DUMP_CALL: {
        "text": rows, "stderr": "Error: Level Zero Initialization Error\n", "rc": 1}})
    assert _sample(backend)["0000:4d:00.0"].memory_used_bytes == round(2332.47 * MIB)
    _wait(lambda: not (backend.dump and backend.dump.running), "the dump ends")
    devices = _sample(backend)  # no clock moved: no back-off waited
    assert devices["0000:4d:00.0"].memory_used_bytes == round(2332.47 * MIB)  # its rows are fresh still
    assert any("exited with status 1: Error: Level Zero Initialization Error; restarted" in w
               for w in backend.warnings), backend.warnings
    assert backend.dump is not None and backend.dump.children >= 2
    backend.close()


def test_a_size_sysfs_lacks_is_xpu_smis_physical_size_asked_once(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    backend, bindir, _ = _backend(tmp_path, monkeypatch, without=("sys/class/drm/card1/device/lmem_total_bytes",))
    for _ in range(3):
        devices = _sample(backend)
        # was: None (read from the list, which has no memory_physical_size_byte)
        assert devices["0000:50:00.0"].memory_total_bytes == 14248574976
        assert devices["0000:50:00.0"].memory_used_bytes == round(517.25 * MIB)
    made = standin.calls(bindir)
    assert made.count(CARD1) == 1 and made.count(DUMP_CALL) == 1, made  # a size once; one dump
    backend.close()


def test_a_failed_size_is_said_and_asked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, bindir, _ = _backend(tmp_path, monkeypatch, {CARD1: {"stderr": "Error: Level Zero Initialization Error\n",
                                                                 "rc": 1}},
                                  without=("sys/class/drm/card1/device/lmem_total_bytes",))
    for _ in range(2):
        devices = _sample(backend)
        assert devices["0000:50:00.0"].memory_total_bytes is None
        assert devices["0000:50:00.0"].memory_used_bytes == round(517.25 * MIB)
        assert any("Level Zero Initialization Error" in w and "0000:50:00.0's memory size unknown" in w
                   for w in backend.warnings), backend.warnings
    assert standin.calls(bindir).count(CARD1) == 2
    backend.close()


def test_a_gpu_without_a_dump_row_or_with_more_in_use_than_it_holds_is_unknown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = HEADER + "06:14:46.000,    0, 99999999.00\n"
    backend, _, _ = _backend(tmp_path, monkeypatch, {DUMP_CALL: {"text": dump, "once": 1, "every": 0.2}})
    devices = _sample(backend)
    assert devices["0000:4d:00.0"].memory_used_bytes is None  # more than its 16 GiB
    assert devices["0000:50:00.0"].memory_used_bytes is None  # no row
    assert any("0000:4d:00.0" in w and "exceeds the memory size" in w for w in backend.warnings), backend.warnings
    assert any("no row for GPU 0000:50:00.0" in w for w in backend.warnings), backend.warnings
    backend.close()


def test_garbled_and_over_long_dump_lines_are_skipped_and_said(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    dump = (HEADER + "06:14:46.000,    0, -1.00\n" + "x" * (MAX_LINE + 10) + "\n"
            + "06:14:46.000,    1, 2,00\n06:14:46.000,    0, 1.50\n")  # the good row last: read by then
    backend, _, _ = _backend(tmp_path, monkeypatch, {DUMP_CALL: dict(ONCE_THEN_SILENT, text=dump)})
    devices = _sample(backend)
    assert devices["0000:4d:00.0"].memory_used_bytes == round(1.5 * MIB)
    assert devices["0000:50:00.0"].memory_used_bytes is None
    said = " ".join(backend.warnings)
    assert "'06:14:46.000, 0, -1.00'; skipped" in said and "'06:14:46.000, 1, 2,00'; skipped" in said, said
    assert f"a line of {MAX_LINE + 10} bytes" in said, said
    backend.close()


def test_the_device_list_is_read_as_xpu_smi_prints_it() -> None:
    warnings: list[str] = []
    devices = parse_discovery((FIXTURES / "xpu-smi-discovery-flex170x2.json").read_text(), "xpu-smi discovery -j",
                              warnings)
    assert sorted(devices) == ["0000:4d:00.0", "0000:50:00.0"]  # the virtual function left out
    assert devices["0000:50:00.0"].device_id == 1 and warnings == []


@pytest.mark.parametrize(("line", "row"), [
    ("06:14:46.000,    0, 2332.47", (0, round(2332.47 * MIB))),
    ("06:14:46.000,    0,  N/A", (0, None)),                       # unknown, not 0
    ("\x1b[0m06:14:46.000,    3, 0.50", (3, MIB // 2)),
])
def test_dump_rows(line: str, row: tuple[int, int | None]) -> None:
    header = dump_header(HEADER)
    assert header is not None and dump_row(line, header) == row


@pytest.mark.parametrize("line", [
    "06:14:46.000,    0, -1.00", "06:14:46.000,   -1, 1.00", "06:14:46.000,    x, 1.00",
    "06:14:46.000,    0, 23,5", "06:14:46.000,    0", "Error: Device not found", "",
])
def test_lines_that_are_no_dump_row(line: str) -> None:
    header = dump_header(HEADER)
    assert header is not None
    with pytest.raises(ValueError):
        dump_row(line, header)


@pytest.mark.parametrize("line", [
    "Timestamp, DeviceId, GPU Memory Used (MB)",  # another unit: not taken as MiB
    "Error: Level Zero Initialization Error", HEADER[:20], "",
])
def test_lines_that_are_no_dump_header(line: str) -> None:
    assert dump_header(line) is None

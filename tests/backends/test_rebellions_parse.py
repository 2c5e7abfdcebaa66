"""Parsing rbln-smi JSON: bad rows, N/A cells, ambiguous contexts, multi-die grouping."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from allsmi.support.pidns import pid_view

from allsmi.backends.rebellions.parse import ReportError, build_samples, card_id, load_report
from allsmi.backends._common.owners import process_user
from allsmi.backends.rebellions.processes import rbln_nodes_opened_by
from allsmi.schema import DeviceSample
from allsmi.schema.units import GIB, MIB
from tests.contract.scenarios_rebellions import RBLN_FIXTURES


def _fixture(name: str) -> dict[str, Any]:
    report, notes = load_report((RBLN_FIXTURES / name).read_text(), "rbln-smi -j")
    assert notes == []
    return report


def _build(report: dict[str, Any], nodes: dict[int, frozenset[str]] | None = None,
           users: dict[int, str] | None = None) -> tuple[list[DeviceSample], list[str]]:
    warnings: list[str] = []
    samples = build_samples(report, backend="rebellions", vendor="rebellions", kind="npu",
                            lookup_user=(users or {}).get, lookup_nodes=(nodes or {}).get,
                            warnings=warnings)
    return samples, warnings


def _row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "npu": 0, "name": "RBLN-CA22", "sid": "0000000022510001",
        "uuid": "00000000-0000-4000-8000-000000000001", "device": "rbln0", "status": "normal",
        "fw_ver": "3.0.0", "pci": {"dev": "0x1220", "bus_id": "0000:03:00.0"},
        "temperature": "31C", "card_power": "17521800uW", "pstate": "P14",
        "memory": {"used": "0", "total": "16877879296"}, "util": "0.0"}
    row.update(overrides)
    return row


# --- load_report ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("", "printed nothing"),
    ("Segmentation fault (core dumped)\n", "did not print JSON"),
    ("[1, 2]", "not an object"),
    ('{"KMD_version": "3.0.0"}', "no 'devices' list"),
    ('{"KMD_version": "3.0.0", "devices": {"rbln0": {}}}', "no 'devices' list"),
    ('{"KMD_version": "3.0.0", "devices": [{"npu": 0, "name": "RBL', "truncated"),
])
def test_unusable_output_is_a_report_error(text: str, message: str) -> None:
    with pytest.raises(ReportError, match=message):
        load_report(text, "rbln-smi -j")


def test_text_around_the_json_is_ignored_with_a_note() -> None:
    body = (RBLN_FIXTURES / "rbln-smi-kmd3.0-ca22x4-loaded.json").read_text()
    report, notes = load_report("Warning: rbln-stat is deprecated, use rbln-smi\n" + body + "\nbye\n",
                                "rbln-stat -j")
    assert len(report["devices"]) == 4
    assert notes and "ignored" in notes[0]


def test_the_human_table_is_not_mistaken_for_json() -> None:
    with pytest.raises(ReportError, match="did not print JSON"):
        load_report((RBLN_FIXTURES / "rbln-smi-garbage.txt").read_text(), "rbln-smi -j")


# --- units and N/A -------------------------------------------------------------------------

def test_na_cells_are_unknown_not_zero() -> None:
    (first, second), warnings = _build(_fixture("rbln-smi-kmd2.0-ca12x2-na-cells.json"))
    assert first.temperature_celsius is None and first.power_watts is None
    assert first.utilization_percent is None and first.memory_used_bytes is None
    assert first.memory_total_bytes == 16877879296
    assert second.firmware_version is None and "pstate" not in second.details
    assert second.power_watts == pytest.approx(6.1) and second.temperature_celsius == 25.0
    assert (first.driver_version, first.details["product"]) == ("2.0.1", "ATOM+")
    assert warnings == []  # N/A is a normal answer, not a problem


def test_numbers_instead_of_strings_and_driver_version_key() -> None:
    (device,), warnings = _build(_fixture("rbln-smi-numeric-values.json"))
    assert device.power_watts == pytest.approx(18.109794)  # bare number: the JSON's microwatts
    assert device.temperature_celsius == 33.0 and device.utilization_percent == 1.5
    assert device.memory_total_bytes == 16877879296 and device.memory_used_bytes == 72 * MIB
    assert device.driver_version == "3.0.0"
    assert device.details["virtual_function"] is True  # PCI device 0x1221
    assert [(p.pid, p.memory_bytes) for p in device.processes] == [(8801, 72 * MIB)]
    assert warnings == []


@pytest.mark.parametrize(("cell", "value"), [
    ("17521800uW", 17.5218), ("41200000uW", 41.2), ("43.9W", 43.9), ("350mW", 0.35),
    (17521800, 17.5218), ("N/A", None), ("", None),
])
def test_card_power_units(cell: object, value: float | None) -> None:
    (device,), _ = _build({"devices": [_row(card_power=cell)]})
    assert device.power_watts == value


def test_implausible_and_unreadable_cells_are_unknown_with_warnings() -> None:
    report = {"devices": [_row(card_power="17521800W", temperature="900C", util="-3",
                               memory={"used": "2GiB", "total": "1GiB"})]}
    (device,), warnings = _build(report)
    assert device.power_watts is None and device.temperature_celsius is None
    assert device.utilization_percent is None
    assert device.memory_total_bytes == GIB and device.memory_used_bytes is None
    assert any("card_power" in w for w in warnings) and any("temperature" in w for w in warnings)
    assert any("util" in w for w in warnings) and any("exceeds memory.total" in w for w in warnings)


def test_power_limit_is_read_when_present() -> None:
    (device,), _ = _build({"devices": [_row(power_limit="150000000uW")]})
    assert device.power_limit_watts == 150.0
    (device,), _ = _build({"devices": [_row()]})
    assert device.power_limit_watts is None


def test_status_and_pstate_drive_health() -> None:
    devices, _ = _build({"devices": [
        _row(), _row(uuid="u2", device="rbln1", sid="s2", status="abnormal"),
        _row(uuid="u3", device="rbln2", sid="s3", pstate="P12"),
        _row(uuid="u4", device="rbln3", sid="s4", status="N/A")]})
    assert [d.parent for d in devices] == [None] * 4
    assert [d.health for d in devices] == ["ok", "degraded", "degraded", "unknown"]


# --- bad rows ------------------------------------------------------------------------------

def test_a_bad_device_row_does_not_drop_the_others() -> None:
    devices, warnings = _build(_fixture("rbln-smi-malformed-device-row.json"))
    assert [d.details["device"] for d in devices] == ["rbln0", "rbln3", "rbln4"]
    assert devices[0].power_watts == pytest.approx(18.109794)
    assert devices[2].temperature_celsius == 33.0
    garbled = devices[1]
    assert (garbled.temperature_celsius, garbled.power_watts, garbled.utilization_percent,
            garbled.memory_total_bytes) == (None, None, None, None)
    assert any(w.startswith("device row 1: not an object") for w in warnings)
    assert any(w.startswith("device row 2: no uuid") for w in warnings)
    assert any(w.startswith("device row 5: duplicate id") for w in warnings)
    assert any("rbln3: unreadable memory 'lots'" in w for w in warnings)


def test_a_bad_process_row_does_not_drop_the_others() -> None:
    (first, second), warnings = _build(_fixture("rbln-smi-malformed-process-row.json"))
    # 3101 holds two contexts on rbln0: "1.2GiB" + "0.0B".
    assert [(p.pid, p.memory_bytes) for p in first.processes] == [(3101, round(1.2 * GIB))]
    assert [(p.pid, p.command, p.memory_bytes) for p in second.processes] == [
        (3102, "torchrun", None), (3104, "python3", 512 * MIB)]
    assert any("unreadable pid 'abc'" in w for w in warnings)
    assert any("context row 2: not an object" in w for w in warnings)
    assert any("context row 3: unreadable pid None" in w for w in warnings)
    assert any("unreadable memalloc 'huge'" in w for w in warnings)
    assert any("pid 3103: npu 7 not in the device list" in w for w in warnings)


def test_unknown_memory_in_one_context_makes_the_sum_unknown() -> None:
    report = {"devices": [_row()], "contexts": [
        {"npu": 0, "pid": "10", "process": "a", "memalloc": "1.0GiB"},
        {"npu": 0, "pid": "10", "process": "a", "memalloc": "N/A"}]}
    (device,), _ = _build(report)
    assert device.processes[0].memory_bytes is None  # not an understated 1 GiB


def test_old_context_keys_cmd_and_memory() -> None:
    report = {"devices": [_row(npu="0")], "contexts": [
        {"ctx_id": "1", "npu": "0", "pid": 77, "cmd": "python3 serve.py", "memory": "512MiB"}]}
    (device,), _ = _build(report, users={77: "bob"})
    assert device.processes[0] == device.processes[0].__class__(
        pid=77, user="bob", command="python3 serve.py", memory_bytes=512 * MIB)


@pytest.mark.parametrize("pid", ["0", "-5", "12.7", "\u00b2", "99999999999", True, 3.0])
def test_implausible_pids_are_skipped(pid: object) -> None:
    report = {"devices": [_row()], "contexts": [
        {"npu": 0, "pid": pid, "memalloc": "1MiB"}, {"npu": 0, "pid": "42", "memalloc": "2MiB"}]}
    (device,), warnings = _build(report)
    assert [(p.pid, p.memory_bytes) for p in device.processes] == [(42, 2 * MIB)]
    assert any("unreadable pid" in w for w in warnings)


def test_contexts_that_are_not_a_list_are_a_warning() -> None:
    (device,), warnings = _build({"devices": [_row()], "contexts": {"pid": 1}})
    assert device.processes == () and any("'contexts' is dict" in w for w in warnings)


# --- attribution when npu repeats ----------------------------------------------------------

def test_repeated_npu_is_not_guessed() -> None:
    devices, warnings = _build(_fixture("rbln-smi-kmd3.0-ca22x8-shared-npu.json"))
    assert [d.index for d in devices] == list(range(8))  # sorted, though printed out of order
    assert all(p.pid != 4100 for d in devices for p in d.processes)
    assert [p.pid for p in devices[6].processes] == [5200]  # npu 2 is unique
    assert any("pid 4100: npu 0 matches 3 devices" in w for w in warnings)


def test_repeated_npu_is_resolved_by_the_nodes_a_process_holds() -> None:
    devices, warnings = _build(_fixture("rbln-smi-kmd3.0-ca22x8-shared-npu.json"),
                               nodes={4100: frozenset({"rbln2", "rbln3"})})
    assert [p.pid for p in devices[2].processes] == [4100]
    assert [p.pid for p in devices[3].processes] == [4100]
    assert devices[0].processes == () and devices[1].processes == ()
    assert not any("not attributed" in w for w in warnings)


def test_a_device_key_in_the_context_beats_npu() -> None:
    report = {"devices": [_row(), _row(uuid="u2", device="rbln1", sid="s2")],
              "contexts": [{"npu": 0, "device": "rbln1", "pid": "5", "memalloc": "1MiB"}]}
    devices, _ = _build(report)
    assert devices[0].processes == () and devices[1].processes[0].pid == 5


# --- multi-die -----------------------------------------------------------------------------

def test_a_lone_visible_atom_max_die_still_gets_its_card() -> None:
    devices, _ = _build({"devices": [_row(name="RBLN-CA25", card_power="85300000uW")]})
    card, die = devices
    assert card.id == card_id("0000000022510001") and card.power_watts == 85.3
    assert card.details["dies"] == 1 and card.details["dies_per_card"] == 4
    assert die.parent == card.id and die.power_watts is None


def test_rows_sharing_a_sid_are_dies_of_one_card_whatever_the_name() -> None:
    devices, _ = _build({"devices": [
        _row(name="RBLN-CX99", card_power="60000000uW"),
        _row(name="RBLN-CX99", uuid="u2", device="rbln1", card_power="60000000uW")]})
    assert [d.parent for d in devices] == [None, card_id("0000000022510001"), card_id("0000000022510001")]
    assert sum(d.power_watts or 0 for d in devices) == 60.0


def test_atom_max_die_without_sid_reports_no_board_power() -> None:
    devices, warnings = _build({"devices": [
        _row(name="RBLN-CA25", sid="N/A", card_power="85300000uW"),
        _row(name="RBLN-CA25", sid="N/A", uuid="u2", device="rbln1", card_power="85300000uW")]})
    assert [d.parent for d in devices] == [None, None]
    assert [d.power_watts for d in devices] == [None, None]
    assert any("without a card serial" in w for w in warnings)


def test_card_firmware_is_reported_only_when_dies_agree() -> None:
    rows = [_row(name="RBLN-CA25", fw_ver="3.0.0"),
            _row(name="RBLN-CA25", uuid="u2", device="rbln1", fw_ver="3.0.1")]
    devices, _ = _build({"KMD_version": "3.0.0", "devices": rows})
    assert devices[0].firmware_version is None and devices[0].driver_version == "3.0.0"
    rows[1]["fw_ver"] = "3.0.0"
    devices, _ = _build({"devices": rows})
    assert devices[0].firmware_version == "3.0.0"


def test_id_falls_back_to_bus_id_then_kernel_name() -> None:
    devices, _ = _build({"devices": [
        _row(uuid="N/A"), _row(uuid=None, sid="s2", device="rbln1", pci={"bus_id": "N/A"})]})
    assert [d.id for d in devices] == ["rebellions:pci:0000:03:00.0", "rebellions:dev:rbln1"]
    assert devices[0].uuid is None


def test_report_survives_a_json_round_trip_of_details() -> None:
    devices, _ = _build(_fixture("rbln-smi-kmd3.0-ca25x2-atom-max.json"))
    json.dumps([dict(d.details) for d in devices])


# --- local process lookups -----------------------------------------------------------------

def test_rbln_nodes_opened_by_reads_fd_links(tmp_path: Path) -> None:
    fd_dir = tmp_path / "4242" / "fd"
    fd_dir.mkdir(parents=True)
    os.symlink("/dev/rbln3", fd_dir / "5")
    os.symlink("/dev/rbln12", fd_dir / "6")
    os.symlink("/dev/rsd0", fd_dir / "7")
    os.symlink("/tmp/model.bin", fd_dir / "8")
    assert rbln_nodes_opened_by(4242, proc_root=str(tmp_path)) == frozenset({"rbln3", "rbln12"})
    assert rbln_nodes_opened_by(999999, proc_root=str(tmp_path)) is None


def test_process_user_of_this_process_and_of_a_missing_pid() -> None:
    if not pid_view("/proc").host:
        pytest.skip("outside the host's PID namespace, no owner is read (allsmi/support/pidns.py)")
    import psutil

    assert process_user(os.getpid()) == psutil.Process().username()
    assert process_user(2 ** 22 + 12345) is None  # above the kernel's pid_max


def test_contexts_util_info_is_each_processes_utilization() -> None:
    """rbln-smi's per-context ``util_info`` (% of the die), summed over a process's contexts."""
    (first, second), _ = _build(_fixture("rbln-smi-malformed-process-row.json"))
    assert [(p.pid, p.utilization_percent) for p in first.processes] == [(3101, 35.0)]
    assert [(p.pid, p.utilization_percent) for p in second.processes] == [(3102, 10.0),
                                                                          (3104, 12.0)]
    report = {"devices": [_row()], "contexts": [
        {"npu": 0, "pid": "10", "process": "a", "memalloc": "1.0GiB", "util_info": "20.0"},
        {"npu": 0, "pid": "10", "process": "a", "memalloc": "1.0GiB"}]}
    (device,), _ = _build(report)
    assert device.processes[0].utilization_percent is None  # one context without it: unknown


def test_all_ones_cells_are_unknown_not_values() -> None:
    """UINT32_MAX µW reads as 4294.97 W and UINT64_MAX bytes as 16 EiB, both in range: they are
    the driver's "no reading", so unknown."""
    samples, warnings = _build({"KMD_version": "3.0.0", "devices": [_row(
        card_power="4294967295uW", memory={"used": "0", "total": "18446744073709551615"})]})
    (dev,) = samples
    assert dev.power_watts is None and dev.memory_total_bytes is None
    assert dev.memory_used_bytes == 0 and dev.temperature_celsius == 31.0

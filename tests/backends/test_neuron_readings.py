"""The Neuron backend's readings over the stand-in tools (``tests/contract/scenarios_neuron``):
one application's failed report is unknown on the devices it runs on (also when ``neuron-ls``
does not list it), the largest instance's report is read whole and a longer one is an error that
says so, a garbage-printing monitor is an error naming its output, and an older ``neuron-ls``
without ``neuroncore_ids`` has its cores counted from ``nc_count``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from allsmi.backend_api import BackendError, BackendTimeout
from allsmi.backends._common.stream import DEFAULT_MAX_LINE
from allsmi.backends.neuron import backend as neuron_backend
from allsmi.backends.neuron.parse import load_devices
from allsmi.schema import DeviceSample
from tests.contract import scenarios_neuron
from tests.contract.scenario import ScenarioEnv

NEURON = scenarios_neuron.NEURON
TRN2_LS = "neuron-ls-trn2-4dev-two-apps.json"
#: Device 2 (cores 8-11) runs pid 270001 on cores 8 and 9.
DEVICE_2 = "neuron:0000:b6:00.0"
DEVICE_0 = "neuron:0000:cc:00.0"


def _write(tmp_path: Path, name: str, text: str) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(text)
    return str(path)  # an absolute path: the stand-in route reads it as it is


def _report(name: str = "neuron-monitor-trn2-two-apps.jsonl") -> dict[str, Any]:
    return json.loads((NEURON / name).read_text().splitlines()[0])


def _app(report: dict[str, Any], pid: int) -> dict[str, Any]:
    return next(e for e in report["neuron_runtime_data"] if e["pid"] == pid)["report"]


def _sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listing: str, monitor: str,
            timeout: float = 5.0) -> tuple[dict[str, DeviceSample], list[str]]:
    backend = scenarios_neuron.backend_for(ScenarioEnv(tmp_path, monkeypatch), listing, monitor,
                                           timeout_seconds=timeout)
    backend.open()
    try:
        return {d.id: d for d in backend.sample()}, list(backend.warnings)
    finally:
        backend.close()


def _no_processes(tmp_path: Path) -> str:
    rows = json.loads((NEURON / TRN2_LS).read_text())
    return _write(tmp_path, "ls.json", json.dumps([dict(row, neuron_processes=[]) for row in rows]))


def _counters_fail(app: dict[str, Any]) -> None:
    app["neuroncore_counters"] = {"period": 1.0, "error": "failed to read counters: device busy",
                                  "neuroncores_in_use": {}}


def _memory_fail(app: dict[str, Any]) -> None:
    app["memory_used"] = {"period": 1.0, "error": "failed to read memory"}


def _memory_missing(app: dict[str, Any]) -> None:
    del app["memory_used"]


# --- one application's failed report, neuron-ls not listing it -------------------------------

@pytest.mark.parametrize(("fault", "unknown", "known", "says"), [
    (_counters_fail, "utilization_percent", "memory_used_bytes", "failed to read counters"),
    (_memory_fail, "memory_used_bytes", "utilization_percent", "failed to read memory"),
    (_memory_missing, "memory_used_bytes", "utilization_percent", "no memory_used group"),
])
def test_a_failed_group_is_unknown_on_the_device_holding_the_apps_cores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: Callable[[dict[str, Any]], None],
        unknown: str, known: str, says: str) -> None:
    # neuron-ls lists no process (it ran before the application started, or cannot see it): the
    # cores pid 270001's other group reports (8 and 9) say it runs on device 2.
    report = _report()
    fault(_app(report, 270001))
    monitor = _write(tmp_path, "monitor.jsonl", json.dumps(report) + "\n")
    devices, warnings = _sample(tmp_path, monkeypatch, _no_processes(tmp_path), monitor)
    assert getattr(devices[DEVICE_2], unknown) is None, devices[DEVICE_2]
    if unknown == "utilization_percent":
        assert devices[DEVICE_2].compute_active_percent is None
    assert getattr(devices[DEVICE_2], known) is not None
    # The other devices keep theirs: device 0 runs only pid 268911.
    assert devices[DEVICE_0].utilization_percent == 50.0
    assert devices[DEVICE_0].memory_used_bytes == scenarios_neuron._held(
        "neuron-monitor-trn2-two-apps.jsonl", 268911, range(0, 4))
    assert any(says in w for w in warnings), warnings


def test_an_app_placed_nowhere_with_both_groups_failed_leaves_every_device_unknown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = _report()
    _counters_fail(_app(report, 270001))
    _memory_fail(_app(report, 270001))
    monitor = _write(tmp_path, "monitor.jsonl", json.dumps(report) + "\n")
    devices, _ = _sample(tmp_path, monkeypatch, _no_processes(tmp_path), monitor)
    # Where it runs is unknown: no device's sum can be told (never a made-up 0 on device 2).
    assert [(d.utilization_percent, d.memory_used_bytes) for d in devices.values()] == [(None, None)] * 4


# --- the report's length ----------------------------------------------------------------------

def _largest_instance(tmp_path: Path) -> tuple[str, str, int]:
    """trn2.48xlarge: 16 devices x 8 NeuronCores, one application per core, each with 16
    loaded models (neuron-monitor's ``loaded_models`` shape, from its user guide)."""
    base = _report()
    app = _app(base, 268911)
    model = {"name": "neff", "uuid": "91f2f66e83ea419dace1da07617ad39f", "model_id": 10005,
             "is_running": True, "subgraphs": {"sg_00": {
                 "memory_used_bytes": {"host": 20480, "neuron_device": 21001024, "usage_breakdown": {
                     "host": {"application_memory": 20480, "constants": 0, "dma_buffers": 0, "tensors": 0},
                     "neuron_device": {"constants": 20971520, "model_code": 29504, "runtime_memory": 0,
                                       "tensors": 0}}},
                 "neuroncore_index": 0, "neuron_device_index": 0}}}
    rows, entries = [], []
    for device in range(16):
        cores = list(range(8 * device, 8 * device + 8))
        rows.append({"neuron_device": device, "bdf": f"{0x10 + device:02x}:00.0", "nc_count": 8,
                     "memory_size": 103079215104, "neuroncore_ids": cores,
                     "neuron_processes": [{"pid": 300000 + c, "command": "python serve.py"} for c in cores],
                     "instance_type": "trn2.48xlarge"})
        for core in cores:
            counters = dict(app["neuroncore_counters"],
                            neuroncores_in_use={str(core): {"neuroncore_utilization": 50.0, "flops": 10 ** 12}})
            used = app["memory_used"]["neuron_runtime_used_bytes"]
            breakdown = dict(used["usage_breakdown"],
                             neuroncore_memory_usage={str(core): used["usage_breakdown"]["neuroncore_memory_usage"]["0"]})
            memory = dict(app["memory_used"], loaded_models=[model] * 16,
                          neuron_runtime_used_bytes=dict(used, usage_breakdown=breakdown))
            entries.append({"pid": 300000 + core, "address": "", "neuron_runtime_tag": str(300000 + core),
                            "error": "", "report": {"neuroncore_counters": counters, "memory_used": memory}})
    line = json.dumps(dict(base, neuron_runtime_data=entries))
    return (_write(tmp_path, "ls.json", json.dumps(rows)), _write(tmp_path, "monitor.jsonl", line + "\n"),
            len(line.encode()))


def test_the_largest_instances_report_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listing, monitor, length = _largest_instance(tmp_path)
    devices, _ = _sample(tmp_path, monkeypatch, listing, monitor, timeout=10.0)
    # Over the streams' default limit, and well within the Neuron backend's.
    assert DEFAULT_MAX_LINE < length < neuron_backend.MAX_REPORT_BYTES / 3, length
    assert len(devices) == 16
    per_core = sum(_app(_report(), 268911)["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]
                   ["neuroncore_memory_usage"]["0"].values())
    for dev in devices.values():
        assert dev.utilization_percent == 50.0 and dev.memory_used_bytes == 8 * per_core, dev
        assert [(p.utilization_percent, p.memory_bytes) for p in dev.processes] == [(50.0 / 8, per_core)] * 8


def test_a_report_over_the_limit_is_an_error_saying_it_was_too_long(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = (NEURON / "neuron-monitor-trn2-two-apps.jsonl").read_text().splitlines()[0]
    monkeypatch.setattr(neuron_backend, "MAX_REPORT_BYTES", len(line) - 1, raising=False)
    with pytest.raises(BackendError, match=r"neuron-monitor's report was too long to read: a line of "
                                           rf"{len(line)} bytes, over the limit of {len(line) - 1}") as caught:
        _sample(tmp_path, monkeypatch, TRN2_LS, "neuron-monitor-trn2-two-apps.jsonl", timeout=5.0)
    assert not isinstance(caught.value, BackendTimeout)


# --- a monitor printing garbage -----------------------------------------------------------------

def test_a_monitor_that_keeps_printing_garbage_is_an_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monitor = _write(tmp_path, "garbage.txt", "garbage line\n<html>not json</html>\n")
    with pytest.raises(BackendError, match=r"neuron-monitor printed no readable report within 3 s: "
                                           r"neuron-monitor: not JSON .*'garbage line'") as caught:
        _sample(tmp_path, monkeypatch, TRN2_LS, monitor, timeout=3.0)
    assert not isinstance(caught.value, BackendTimeout)


# --- neuron-ls without neuroncore_ids -----------------------------------------------------------

def test_cores_are_counted_from_nc_count_when_neuroncore_ids_is_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # neuron-ls-older-no-memory.json: device 0 (nc_count 2, no neuroncore_ids) runs pid 4242.
    report = _report()
    app = _app(report, 268911)
    app["neuroncore_counters"]["neuroncores_in_use"] = {"0": {"neuroncore_utilization": 80.0},
                                                        "1": {"neuroncore_utilization": 60.0}}
    per_core = app["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]["neuroncore_memory_usage"]
    for core in list(per_core):
        if core not in ("0", "1"):
            del per_core[core]
    report["neuron_runtime_data"] = [{"pid": 4242, "error": "", "report": app}]
    monitor = _write(tmp_path, "monitor.jsonl", json.dumps(report) + "\n")
    devices, warnings = _sample(tmp_path, monkeypatch, "neuron-ls-older-no-memory.json", monitor)
    held = sum(sum(per_core[c].values()) for c in ("0", "1"))
    first = devices["neuron:0000:00:1e.0"]
    assert (first.details["core_first"], first.details["core_count"]) == (0, 2)
    assert (first.utilization_percent, first.memory_used_bytes) == (70.0, held)
    assert [(p.pid, p.utilization_percent, p.memory_bytes) for p in first.processes] == [(4242, 70.0, held)]
    second = devices["neuron:0000:00:1f.0"]
    assert (second.details["core_first"], second.utilization_percent, second.memory_used_bytes) == (2, 0.0, 0)
    assert not [w for w in warnings if "neuroncore_ids" in w], warnings


@pytest.mark.parametrize(("rows", "cores"), [
    # device 1 missing: device 2's first core number cannot be counted
    ([{"neuron_device": 0, "nc_count": 2}, {"neuron_device": 2, "nc_count": 2}], [(0, 1), ()]),
    # a device before it without a core count
    ([{"neuron_device": 0}, {"neuron_device": 1, "nc_count": 2}], [(), ()]),
    # the listed ids are not the counted numbering: nothing is counted
    ([{"neuron_device": 0, "nc_count": 2}, {"neuron_device": 1, "nc_count": 2, "neuroncore_ids": [8, 9]}],
     [(), (8, 9)]),
    # trn2 with two devices of four logical cores
    ([{"neuron_device": 0, "nc_count": 4}, {"neuron_device": 1, "nc_count": 4}], [(0, 1, 2, 3), (4, 5, 6, 7)]),
])
def test_cores_are_counted_only_where_the_order_tells_them(rows: list[dict[str, Any]],
                                                            cores: list[tuple[int, ...]]) -> None:
    warnings: list[str] = []
    devices = load_devices(json.dumps(rows), "neuron-ls --json-output", warnings)
    assert [d.cores for d in devices] == cores
    unknown = [d.index for d, c in zip(devices, cores) if not c]
    assert [w.split(":")[0] for w in warnings] == [f"neuron device {i}" for i in unknown], warnings


def test_memory_in_use_above_the_devices_total_is_unknown_with_a_warning_not_clamped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # neuron-ls says device 0 has 1 MiB; the report has pid 268911 holding far more on its cores:
    # one of the two is wrong, and the device is not "full" (the old code clamped to the total).
    rows = json.loads((NEURON / TRN2_LS).read_text())
    rows[0]["memory_size"] = 1 << 20
    listing = _write(tmp_path, "ls.json", json.dumps(rows))
    monitor = _write(tmp_path, "monitor.jsonl", json.dumps(_report()) + "\n")
    devices, warnings = _sample(tmp_path, monkeypatch, listing, monitor)
    assert devices[DEVICE_0].memory_total_bytes == 1 << 20
    assert devices[DEVICE_0].memory_used_bytes is None
    assert devices[DEVICE_0].utilization_percent == 50.0
    assert devices[DEVICE_2].memory_used_bytes is not None
    assert any("neuron device 0: memory in use" in w and "above its total" in w for w in warnings), warnings


def test_ecc_counts_that_are_missing_or_negative_are_unknown_not_events() -> None:
    """A device row of neuron_hw_counters without its ECC fields has unknown ECC (no entry),
    never 0 events; a negative count is not an event count."""
    import json

    from allsmi.backends.neuron.parse import parse_monitor
    rows = [{"neuron_device_index": 0},
            {"neuron_device_index": 1, "mem_ecc_uncorrected": -3, "sram_ecc_uncorrected": 2},
            {"neuron_device_index": 2, "mem_ecc_uncorrected": 0, "sram_ecc_uncorrected": 0}]
    report = parse_monitor(json.dumps({"neuron_runtime_data": [], "system_data": {
        "neuron_hw_counters": {"period": 1.0, "error": "", "neuron_devices": rows}}}))
    assert report.ecc_uncorrected == {1: 2, 2: 0}


def test_all_ones_sizes_and_counts_are_unknown() -> None:
    """UINT64_MAX is the driver's "no reading": not a memory size, an ECC count or bytes a
    NeuronCore holds."""
    from allsmi.backends.neuron.parse import parse_monitor
    warnings: list[str] = []
    (dev,) = load_devices(json.dumps([{"neuron_device": 0, "bdf": "00:1e.0", "nc_count": 2,
                                       "memory_size": 18446744073709551615,
                                       "neuroncore_ids": [0, 1]}]), "neuron-ls", warnings)
    assert dev.memory_total_bytes is None
    rows = [{"neuron_device_index": 0, "mem_ecc_uncorrected": 18446744073709551615,
             "sram_ecc_uncorrected": 1}]
    memory = {"neuron_runtime_used_bytes": {"usage_breakdown": {"neuroncore_memory_usage": {
        "0": {"tensors": 18446744073709551615, "model_code": 1024}}}}}
    report = parse_monitor(json.dumps({"neuron_runtime_data": [
        {"pid": 42, "report": {"memory_used": memory}}], "system_data": {
        "neuron_hw_counters": {"period": 1.0, "error": "", "neuron_devices": rows}}}))
    assert report.ecc_uncorrected == {0: 1}
    assert report.runtimes[42].memory is None


# --- one pid in two neuron_runtime_data entries --------------------------------------------

def _split_270001(report: dict[str, Any]) -> list[dict[str, Any]]:
    """pid 270001's entry as two entries of that pid, core 8 in the first and core 9 in the
    second (neuron-monitor prints one entry per Neuron application: one process, two runtimes)."""
    import copy
    entries = report["neuron_runtime_data"]
    position, entry = next((n, e) for n, e in enumerate(entries) if e["pid"] == 270001)
    halves = []
    for core in ("8", "9"):
        half = copy.deepcopy(entry)
        in_use = half["report"]["neuroncore_counters"]["neuroncores_in_use"]
        per_core = half["report"]["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"][
            "neuroncore_memory_usage"]
        for table in (in_use, per_core):
            for key in [k for k in table if k != core]:
                del table[key]
        halves.append(half)
    entries[position:position + 1] = halves
    return halves


def test_one_pid_in_two_entries_holds_the_cores_of_both(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The old code kept only the second entry: device 2 read 70 / 4 = 17.5 % and one core's memory.
    whole = _report()
    held = scenarios_neuron._held("neuron-monitor-trn2-two-apps.jsonl", 270001, range(8, 10))
    report = _report()
    _split_270001(report)
    monitor = _write(tmp_path, "monitor.jsonl", json.dumps(report) + "\n")
    devices, _ = _sample(tmp_path, monkeypatch, str(NEURON / TRN2_LS), monitor)
    expected, _ = _sample(tmp_path / "whole", monkeypatch, str(NEURON / TRN2_LS),
                          _write(tmp_path, "whole.jsonl", json.dumps(whole) + "\n"))
    assert devices[DEVICE_2].utilization_percent == (90 + 70) / 4
    assert devices[DEVICE_2].compute_active_percent == (90 + 70) / 4
    assert devices[DEVICE_2].memory_used_bytes == held
    (process,) = [p for p in devices[DEVICE_2].processes if p.pid == 270001]
    (whole_process,) = [p for p in expected[DEVICE_2].processes if p.pid == 270001]
    assert (process.utilization_percent, process.memory_bytes) == (
        whole_process.utilization_percent, whole_process.memory_bytes) == ((90 + 70) / 4, held)


def test_one_pid_whose_other_entry_failed_is_unknown_not_the_good_entrys_half(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first entry's counters failed: what the pid does on core 8 is unknown, so device 2's
    # utilization is too (the old code showed the second entry's 70 / 4 = 17.5 %).
    report = _report()
    first, _ = _split_270001(report)
    _counters_fail(first["report"])
    monitor = _write(tmp_path, "monitor.jsonl", json.dumps(report) + "\n")
    devices, warnings = _sample(tmp_path, monkeypatch, str(NEURON / TRN2_LS), monitor)
    assert devices[DEVICE_2].utilization_percent is None
    assert devices[DEVICE_2].memory_used_bytes == scenarios_neuron._held(
        "neuron-monitor-trn2-two-apps.jsonl", 270001, range(8, 10))
    assert devices[DEVICE_0].utilization_percent == 50.0
    assert any("failed to read counters" in w for w in warnings), warnings

"""Attribution in the data path: the snapshot JSON and its strict parser, the collector's
attribution step, idle-allocated time in the usage integrator, and the exporter's families."""

from __future__ import annotations

import datetime as dt
import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pytest

from allsmi.attribution import Attributor, AttributionSource, SourceResult
from allsmi.attribution.model import ProcessAttribution
from allsmi.backend_api import Backend, ProbeResult
from allsmi.collection.collector import Collector
from allsmi.config import Config, ConfigError, parse_config
from allsmi.exporter.counters import UsageCounters
from allsmi.exporter.exposition import render_snapshot
from allsmi.output import snapshot_from_dict, to_json
from allsmi.schema import (BackendStatus, DeviceSample, HostSample, ProcessSample, Snapshot,
                           Workload)
from allsmi.usage import UsageIntegrator, idle_threshold_percent

from .exporter.support import device, snapshot

T0 = 1_800_000_000.0
POD = Workload("kubernetes", "ml", "trainer-0", "main")
JOB = Workload("hpc-job", job_id="4242", user="alice")


def _attributed_snapshot() -> Snapshot:
    proc = ProcessSample(7, "alice", "train.py", 1024, job_id="4242", pod_uid=None,
                         container_id="c0ffee")
    return Snapshot(
        timestamp=dt.datetime.fromtimestamp(T0, dt.timezone.utc), host=HostSample("n"),
        devices=(device("GPU-a", workloads=(POD, JOB), processes=(proc,)),
                 device("GPU-b", index=1, workloads=()),
                 device("GPU-c", index=2, workloads=None)),
        backends=(BackendStatus("nvidia", "ok", "", 0.01),),
        attribution=(BackendStatus("kubernetes", "ok", "", 0.002),
                     BackendStatus("hpc-job", "unavailable", "no directory", None)))


# -- JSON and its strict parser -----------------------------------------------------------
def test_json_round_trips_workloads_process_ids_and_statuses() -> None:
    snap = _attributed_snapshot()
    data = json.loads(to_json(snap))
    a, b, c = data["devices"]
    assert a["workloads"] == [
        {"source": "kubernetes", "namespace": "ml", "pod": "trainer-0", "container": "main",
         "job_id": None, "user": None, "share": None},
        {"source": "hpc-job", "namespace": None, "pod": None, "container": None,
         "job_id": "4242", "user": "alice", "share": None}]
    assert b["workloads"] == [] and c["workloads"] is None
    assert a["processes"][0] | {} == {"pid": 7, "user": "alice", "command": "train.py",
                                      "memory_bytes": 1024, "job_id": "4242", "pod_uid": None,
                                      "container_id": "c0ffee", "utilization_percent": None,
                                      "memory_utilization_percent": None,
                                      "encoder_utilization_percent": None,
                                      "decoder_utilization_percent": None}
    assert data["attribution"][1] == {"name": "hpc-job", "status": "unavailable",
                                      "message": "no directory", "duration_seconds": None}
    problems: list[str] = []
    back = snapshot_from_dict(data, problems)
    assert problems == []
    assert back.devices == snap.devices and back.attribution == snap.attribution


def test_withheld_process_details_withhold_workload_users_too() -> None:
    data = json.loads(to_json(_attributed_snapshot(), process_details=False))
    job = data["devices"][0]["workloads"][1]
    assert job["user"] is None and job["job_id"] == "4242"
    assert data["devices"][0]["processes"][0]["job_id"] == "4242"  # ids are not people's names


def test_old_documents_without_the_keys_still_parse() -> None:
    data = json.loads(to_json(_attributed_snapshot()))
    del data["attribution"]
    for dev in data["devices"]:
        del dev["workloads"]
        for proc in dev["processes"]:
            del proc["job_id"], proc["pod_uid"], proc["container_id"]
    problems: list[str] = []
    back = snapshot_from_dict(data, problems)
    assert problems == [] and back.attribution == ()
    assert all(d.workloads is None for d in back.devices)
    assert back.devices[0].processes[0].job_id is None


def test_bad_workloads_and_statuses_are_dropped_and_described() -> None:
    data = json.loads(to_json(_attributed_snapshot()))
    dev = data["devices"][0]
    dev["workloads"] = [
        {"source": "kubernetes", "namespace": 3, "pod": "p", "container": None},  # bad field
        {"source": "made-up", "pod": "x"},                                       # unknown source
        "not an object",
        {"source": "hpc-job", "job_id": "9\x1b[31m", "user": ["x"]},              # escape; bad user
    ]
    dev["processes"][0]["pod_uid"] = 12
    data["devices"][1]["workloads"] = {"a": 1}
    data["attribution"] = [{"name": "kubernetes", "status": "sleeping"}, 7]
    problems: list[str] = []
    back = snapshot_from_dict(data, problems)
    works = back.devices[0].workloads
    assert works == (Workload("kubernetes", None, "p", None),
                     Workload("hpc-job", job_id="9\x1b[31m"))
    assert "\x1b" not in (works[1].job_id or "")  # cleaned at the schema boundary
    assert back.devices[0].processes[0].pod_uid is None
    assert back.devices[1].workloads is None
    assert back.attribution == (BackendStatus("kubernetes", "error", "", None),)
    text = "\n".join(problems)
    for where in ("devices[0].workloads[0].namespace", "devices[0].workloads[1].source",
                  "devices[0].workloads[2]", "devices[0].workloads[3].user",
                  "devices[0].processes[0].pod_uid", "devices[1].workloads",
                  "attribution[0].status", "attribution[1]"):
        assert where in text, (where, text)


def test_workloads_per_device_are_bounded() -> None:
    data = json.loads(to_json(_attributed_snapshot()))
    data["devices"][0]["workloads"] = [{"source": "hpc-job", "job_id": str(i)} for i in range(5000)]
    problems: list[str] = []
    back = snapshot_from_dict(data, problems)
    assert len(back.devices[0].workloads) == 256 and "5000 workloads" in problems[0]


# -- the collector's attribution step ------------------------------------------------------
class _Backend(Backend):
    name = display_name = "fake"

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> list[DeviceSample]:
        return [DeviceSample("GPU-a", "nvidia", "gpu", "fake", index=0, health="ok",
                             processes=(ProcessSample(7), ProcessSample(8))),
                DeviceSample("GPU-b", "nvidia", "gpu", "fake", index=1, health="ok", processes=())]

    def close(self) -> None:
        pass


class _Source(AttributionSource):
    name = "kubernetes"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.hang = False
        self.closed = False

    def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
        if self.hang:
            self.release.wait(30)
        return SourceResult(workloads={"GPU-a": (POD,)},
                            processes={7: ProcessAttribution("11", "uid-1", "cid-1")})

    def close(self) -> None:
        self.closed = True
        self.release.set()


def test_collector_sets_workloads_process_ids_and_statuses() -> None:
    source = _Source()
    with Collector([_Backend()], attributor=Attributor([source], 1.0)) as collector:
        snap = collector.collect_once()
    a, b = snap.devices
    assert a.workloads == (POD,) and b.workloads == ()
    assert [(p.pid, p.job_id, p.pod_uid, p.container_id) for p in a.processes] == [
        (7, "11", "uid-1", "cid-1"), (8, None, None, None)]
    assert [(s.name, s.status) for s in snap.attribution] == [("kubernetes", "ok")]
    assert source.closed  # closed with the collector


def test_a_hung_source_costs_one_deadline_and_a_broken_attributor_only_its_attribution() -> None:
    source = _Source()
    source.hang = True
    collector = Collector([_Backend()], attributor=Attributor([source], 0.3))
    try:
        snap = collector.collect_once()
        assert snap.attribution[0].status == "timeout"
        assert all(d.workloads is None for d in snap.devices) and len(snap.devices) == 2
        again = collector.collect_once()  # not asked again while hung
        assert "still running" in again.attribution[0].message

        class Broken:
            def resolve(self, devices: object, now: float) -> None:
                raise RuntimeError("bug")

            def close(self) -> None:
                pass
        collector.attributor = Broken()  # type: ignore[assignment]
        snap = collector.collect_once()
        assert len(snap.devices) == 2 and snap.devices[0].workloads is None
        assert snap.attribution[0].status == "error" and "bug" in snap.attribution[0].message
    finally:
        source.release.set()
        collector.close()


def test_without_an_attributor_nothing_changes() -> None:
    with Collector([_Backend()]) as collector:
        snap = collector.collect_once()
    assert snap.attribution == () and all(d.workloads is None for d in snap.devices)


# -- idle-allocated time --------------------------------------------------------------------
def _dev(util: float | None, processes: object = (), workloads: object = None) -> DeviceSample:
    return DeviceSample("GPU-a", "nvidia", "gpu", "nvidia", health="ok", utilization_percent=util,
                        processes=processes, workloads=workloads)  # type: ignore[arg-type]


def _snap(t: float, dev: DeviceSample) -> Snapshot:
    return Snapshot(timestamp=dt.datetime.fromtimestamp(T0 + t, dt.timezone.utc),
                    host=HostSample("n"), devices=(dev,))


def _run(points: list[tuple[float, DeviceSample]], threshold: float = 5.0) -> list:
    integ = UsageIntegrator(30, threshold)
    out = []
    for t, dev in points:
        out.extend(integ.update(_snap(t, dev)))
    return out


def test_idle_allocated_is_the_trapezoid_of_held_and_below_threshold() -> None:
    proc = (ProcessSample(1),)
    [a, b, c] = _run([(0, _dev(0.0, proc)), (10, _dev(2.0, proc)), (20, _dev(50.0, proc)),
                      (30, _dev(1.0, ()))])
    assert (a.allocated_seconds, a.idle_allocated_seconds) == (10, 10)
    assert (b.allocated_seconds, b.idle_allocated_seconds) == (10, 5)
    assert (c.allocated_seconds, c.idle_allocated_seconds) == (5, 0)
    first, second = a.split(T0 + 4)
    assert first.idle_allocated_seconds == pytest.approx(4) and second.idle_allocated_seconds == pytest.approx(6)


def test_a_workload_alone_allocates_and_unknown_needs_both_unknown() -> None:
    [held] = _run([(0, _dev(1.0, None, (JOB,))), (10, _dev(1.0, None, (JOB,)))])
    assert held.allocated_seconds == 10 and held.idle_allocated_seconds == 10
    [free] = _run([(0, _dev(1.0, None, ())), (10, _dev(1.0, None, ()))])
    assert free.allocated_seconds == 0 and free.idle_allocated_seconds == 0
    [unknown] = _run([(0, _dev(1.0, None, None)), (10, _dev(1.0, None, None))])
    assert unknown.allocated_seconds is None and unknown.idle_allocated_seconds is None
    [no_util] = _run([(0, _dev(None, (), (POD,))), (10, _dev(None, (), (POD,)))])
    assert no_util.allocated_seconds == 10 and no_util.idle_allocated_seconds is None


@pytest.mark.parametrize("threshold", [0.0, 5.0, 50.0, 100.0])
def test_idle_allocated_never_exceeds_allocated(threshold: float) -> None:
    import random
    rng = random.Random(int(threshold))
    points = []
    for i in range(300):
        processes = rng.choice([(), (ProcessSample(1),), None])
        workloads = rng.choice([None, (), (JOB,)])
        util = rng.choice([None, 0.0, 3.0, 4.99, 5.0, 60.0, 100.0])
        points.append((i * 2.0, _dev(util, processes, workloads)))
    for inc in _run(points, threshold):
        if inc.idle_allocated_seconds is not None:
            assert inc.allocated_seconds is not None
            assert 0 <= inc.idle_allocated_seconds <= inc.allocated_seconds + 1e-9
    if threshold == 0.0:
        assert all(not inc.idle_allocated_seconds for inc in _run(points, threshold))


def test_threshold_setting_default_range_and_errors(tmp_path: Path) -> None:
    assert idle_threshold_percent(Config()) == 5.0
    assert idle_threshold_percent(parse_config("[accounting]\nidle_threshold_percent = 12.5\n")) == 12.5
    for text, key in (("[accounting]\nidle_threshold_percent = 101\n", "idle_threshold_percent"),
                      ("[accounting]\nidle_threshold_percent = true\n", "idle_threshold_percent"),
                      ("[accounting]\nidle_threshold = 3\n", "idle_threshold")):
        path = tmp_path / "c.toml"
        path.write_text("\n" + text)
        with pytest.raises(ConfigError) as err:
            idle_threshold_percent(parse_config(path.read_text(), path))
        assert err.value.line == 3 and err.value.key == f"accounting.{key}" and err.value.path == path


def test_bad_threshold_exits_2_from_the_cli(tmp_path: Path) -> None:
    from .conftest import run_allsmi
    path = tmp_path / "c.toml"
    path.write_text("[accounting]\nidle_threshold_percent = -1\n")
    result = run_allsmi("snapshot", "--simulate", "mixed", "--config", str(path))
    assert result.returncode == 2 and str(path) in result.stderr and "line 2" in result.stderr
    assert "idle_threshold_percent" in result.stderr and result.stdout == ""


# -- the exporter ------------------------------------------------------------------------------
def test_exporter_counts_idle_allocated_and_omits_it_when_unknown() -> None:
    counters = UsageCounters(max_gap_seconds=30, idle_threshold_percent=10.0)
    for t, util in ((0, 0.0), (10, 0.0), (20, 80.0)):
        counters.update(snapshot([device("GPU-a", utilization_percent=util),
                                  device("GPU-u", index=1, processes=None, workloads=None)], T0 + t))
    totals = counters.devices()
    assert totals["GPU-a"].idle_allocated_seconds == pytest.approx(15.0)
    assert totals["GPU-a"].allocated_seconds == pytest.approx(20.0)
    assert totals["GPU-u"].idle_allocated_seconds is None and totals["GPU-u"].allocated_seconds is None


def test_workload_info_series_and_user_only_with_processes() -> None:
    snap = _attributed_snapshot()
    text = render_snapshot(snap)
    lines = [line for line in text.splitlines() if line.startswith("allsmi_device_workload_info{")]
    assert lines == [
        'allsmi_device_workload_info{uuid="GPU-a",resource_group="training",source="kubernetes",'
        'namespace="ml",pod="trainer-0",container="main",job_id="",user=""} 1.0',
        'allsmi_device_workload_info{uuid="GPU-a",resource_group="training",source="hpc-job",'
        'namespace="",pod="",container="",job_id="4242",user=""} 1.0']
    with_users = render_snapshot(snap, processes=True)
    assert 'job_id="4242",user="alice"} 1.0' in with_users


def test_workload_exposition_passes_promtool() -> None:
    from .exporter.test_promtool import promtool_check
    snap = _attributed_snapshot()
    weird = Workload("simulated", 'ns"\\\n', "p\u00e9", None, "1", "bob")
    devices = (replace(snap.devices[0], workloads=(POD, JOB, weird, POD)),) + snap.devices[1:]
    promtool_check(render_snapshot(replace(snap, devices=devices), processes=True))

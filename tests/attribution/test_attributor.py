"""The attributor: isolation per source, no pile-up, merging without double counting, settings."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from allsmi.collection import registry
from allsmi.attribution import (Attributor, SimulatedSource, SourceResult, Workload,
                                attribution_settings, build_attributor, build_sources)
from allsmi.attribution.runner import AttributionSource
from allsmi.config import Config, ConfigError, parse_config

from .helpers import SIM_NOW, find, mixed_devices

DEVICES = mixed_devices()


class Hanging(AttributionSource):
    name = "hanging"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def collect(self, devices, now):
        self.calls += 1
        self.release.wait(30)
        return SourceResult()

    def close(self) -> None:
        self.release.set()


class Broken(AttributionSource):
    name = "broken"

    def collect(self, devices, now):
        raise KeyError("bug")


class Fixed(AttributionSource):
    def __init__(self, name: str, workloads) -> None:
        self.name = name
        self.workloads = workloads

    def collect(self, devices, now):
        return SourceResult(self.workloads)


def test_a_source_s_bug_is_one_line_once_not_a_traceback_each_cycle(caplog) -> None:
    import logging
    with caplog.at_level(logging.DEBUG, logger="allsmi.attribution.runner"), \
            Attributor([Broken()], timeout_seconds=1.0) as attributor:
        for _ in range(4):
            assert attributor.resolve(DEVICES).statuses[0].status == "error"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert errors[0].startswith("attribution source broken failed: KeyError: 'bug' (raised at ")
    assert "test_attributor.py:" in errors[0]


def test_a_hung_source_costs_one_deadline_and_is_not_asked_again() -> None:
    hanging = Hanging()
    dev = DEVICES[0].id
    other = Fixed("hpc-job", {dev: (Workload("hpc-job", job_id="1"),)})
    with Attributor([hanging, Broken(), other], timeout_seconds=0.3) as attributor:
        for cycle in range(3):
            started = time.monotonic()
            result = attributor.resolve(DEVICES)
            assert time.monotonic() - started < 2.0
            assert [s.status for s in result.statuses] == ["timeout", "error", "ok"]
            assert "internal error: KeyError" in result.statuses[1].message
            assert [w.job_id for w in result.device_workloads(dev) or ()] == ["1"]
            if cycle:
                assert "previous call still running" in result.statuses[0].message
        assert hanging.calls == 1  # no pile-up of threads
        hanging.release.set()


def test_holders_seen_by_two_sources_are_listed_once() -> None:
    dev = DEVICES[0].id
    a = Fixed("hpc-job", {dev: (Workload("hpc-job", job_id="77"),)})
    b = Fixed("cgroup", {dev: (Workload("cgroup", job_id="77", user="alice"),
                               Workload("cgroup", job_id="78", user="bob"))})
    result = Attributor([a, b], 5).resolve(DEVICES)
    assert [w.to_dict() for w in result.device_workloads(dev) or ()] == [
        {"source": "hpc-job", "namespace": None, "pod": None, "container": None, "job_id": "77",
         "user": "alice", "share": None},
        {"source": "cgroup", "namespace": None, "pod": None, "container": None, "job_id": "78",
         "user": "bob", "share": None}]


def test_no_source_means_unknown_not_empty() -> None:
    result = Attributor([], 1).resolve(DEVICES)
    assert result.workloads is None and result.statuses == ()
    assert result.device_workloads(DEVICES[0].id) is None


def test_workload_text_is_cleaned_and_empty_is_unknown() -> None:
    work = Workload("kubernetes", namespace="ns\x1b[31m", pod="", container="  ", job_id=None)
    assert work.namespace == "ns [31m" and work.pod is None and work.container is None


def test_simulated_pods_and_jobs_are_deterministic_and_leave_devices_free() -> None:
    first = Attributor([SimulatedSource()], 5).resolve(DEVICES, now=SIM_NOW)
    again = Attributor([SimulatedSource()], 5).resolve(mixed_devices(), now=SIM_NOW)
    assert first.workloads == again.workloads
    held = {d.id for d in DEVICES if first.device_workloads(d.id)}
    assert 0 < len(held) < len(DEVICES)
    kinds = {(w.pod is not None, w.job_id is not None) for d in DEVICES
             for w in first.device_workloads(d.id) or ()}
    assert kinds == {(True, False), (False, True)}  # pods and jobs
    mig = find(DEVICES, "nvidia", 7, part=0)
    assert [w.namespace for w in first.device_workloads(mig.id) or ()] == ["inference"]
    # four H100s share one training job; six hours later it is another job
    jobs = {w.job_id for i in range(4) for w in first.device_workloads(find(DEVICES, "nvidia", i).id) or ()}
    later = Attributor([SimulatedSource()], 5).resolve(DEVICES, now=SIM_NOW + 6 * 3600)
    assert len(jobs) == 1
    assert [w.job_id for w in later.device_workloads(find(DEVICES, "nvidia", 0).id) or ()] != list(jobs)


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return parse_config(text, path)


@pytest.mark.parametrize("text, line, key", [
    ("[attribution]\nkubelet_sock = '/x'\n", 2, "attribution.kubelet_sock"),
    ("[attribution]\ntimeout_seconds = 0\n", 2, "attribution.timeout_seconds"),
    ("[attribution]\nsources = ['slurm']\n", 2, "attribution.sources"),
    ("[attribution]\nhpc_job_dir = ''\n", 2, "attribution.hpc_job_dir"),
    ("[attribution.resource_names]\n\"x.com/gpu\" = \"matrox\"\n", 2, "attribution.resource_names.x.com/gpu"),
    ("[attribution.resource_names]\n\"x.com/gpu\" = { vendor = \"amd\", id = \"serialz\" }\n", 2,
     "attribution.resource_names.x.com/gpu.id"),
    ("[attribution.resource_names]\n\"x.com/gpu\" = { vendor = \"amd\", idd = \"uuid\" }\n", 2,
     "attribution.resource_names.x.com/gpu.idd"),
])
def test_bad_settings_name_file_line_and_key(tmp_path: Path, text: str, line: int, key: str) -> None:
    config = _config(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        attribution_settings(config, {}, registry.declarations())
    assert err.value.path == tmp_path / "config.toml"
    assert err.value.line == line and err.value.key == key, str(err.value)


def test_settings_precedence_environment_over_file(tmp_path: Path) -> None:
    config = _config(tmp_path, "[attribution]\nkubelet_socket = 'k.sock'\nhpc_job_dir = 'jobs'\n"
                               "timeout_seconds = 1.5\nsources = ['hpc-job']\n")
    file_only = attribution_settings(config, {}, registry.declarations())
    assert file_only.kubelet_socket == tmp_path / "k.sock" and file_only.hpc_job_dir == tmp_path / "jobs"
    assert file_only.timeout_seconds == 1.5
    assert [s.name for s in build_sources(file_only)] == ["hpc-job"]
    env = attribution_settings(config, {"ALLSMI_KUBELET_SOCKET": "/run/k.sock",
                                        "ALLSMI_HPC_JOB_DIR": "/run/jobs"}, registry.declarations())
    assert env.kubelet_socket == Path("/run/k.sock") and env.hpc_job_dir == Path("/run/jobs")


def test_default_sources_on_hardware_and_in_simulation() -> None:
    assert build_attributor(Config(), {}).source_names == ("kubernetes", "cgroup")
    assert build_attributor(Config(), {"ALLSMI_HPC_JOB_DIR": "/x"}).source_names == \
        ("kubernetes", "hpc-job", "cgroup")
    assert build_attributor(Config(), {}, simulate=True).source_names == ("simulated",)


class Absent(AttributionSource):
    """Unavailable until ``present`` is set (a kubelet socket that appears later)."""

    name = "absent"
    reprobe_seconds = 0.3

    def __init__(self) -> None:
        self.calls = 0
        self.present = False

    def collect(self, devices, now):
        from allsmi.attribution import SourceUnavailable
        self.calls += 1
        if not self.present:
            raise SourceUnavailable("no socket here")
        return SourceResult()


def test_unavailable_source_is_asked_again_only_after_the_reprobe_interval() -> None:
    source = Absent()
    with Attributor([source], 5) as attributor:
        first = attributor.resolve(DEVICES)
        for _ in range(5):  # within the interval: the last answer, the source not woken
            again = attributor.resolve(DEVICES)
            assert [(s.status, s.message) for s in again.statuses] == [("unavailable", "no socket here")]
        assert first.statuses[0].status == "unavailable"
        assert source.calls == 1
        source.present = True
        deadline = time.monotonic() + 10
        while attributor.resolve(DEVICES).statuses[0].status != "ok":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert source.calls == 2


def test_the_kubelet_source_rests_like_a_backend_and_local_directories_do_not() -> None:
    from allsmi.attribution import CgroupSource, HpcJobSource
    from allsmi.attribution.kubernetes import KubeletSource
    from allsmi.attribution.runner import REPROBE_SECONDS
    from allsmi.collection.collector import REPROBE_SECONDS as BACKENDS
    assert KubeletSource.reprobe_seconds == REPROBE_SECONDS == BACKENDS == 60.0
    assert HpcJobSource.reprobe_seconds == CgroupSource.reprobe_seconds == 0.0

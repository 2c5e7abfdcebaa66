"""The drivers report host pids: the cgroup source reads no ``/proc`` of another PID namespace
(allsmi in a pod without ``hostPID: true``), where those pids name other processes; the
kubelet's holders, which name devices, not pids, keep coming (docs/attribution.md)."""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pytest

from allsmi.attribution import (Attributor, AttributionSource, CgroupSource, ProcessAttribution,
                                SourceResult, Workload)
from allsmi.schema import DeviceSample, ProcessSample

from ..hostactivity.fakeproc import pid_namespace
from .helpers import mixed_devices
from .test_cgroup import PROC

#: A pod's own PID namespace.
OTHER = 4026532571


class Pods(AttributionSource):
    """The kubelet's answer: a pod on the first device."""

    name = "kubernetes"

    def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
        return SourceResult({devices[0].id: (Workload("kubernetes", namespace="ml", pod="a"),)})


def _tree(tmp_path: Path, inode: int | None) -> Path:
    """The fixture tree (pid 1001 in Slurm job 4242) under a /proc of PID namespace
    ``inode`` (``None``: one that does not say)."""
    root = tmp_path / "proc"
    shutil.copytree(PROC, root)
    if inode is not None:
        pid_namespace(root, inode)
    return root


def _devices() -> list[DeviceSample]:
    """Three devices: one with a pod and process 1001, one with 1002 alone, one idle."""
    first, second, idle = (replace(d, processes=()) for d in mixed_devices()[:3])
    return [replace(first, processes=(ProcessSample(1001, "alice"),)),
            replace(second, processes=(ProcessSample(1002, "bob"),)), idle]


@pytest.mark.parametrize("inode, said", [(OTHER, "is not the host's PID namespace"),
                                         (None, "cannot be told to be the host's")])
def test_another_namespace_s_processes_are_unknown_and_the_pods_stay(
        tmp_path: Path, inode: int | None, said: str) -> None:
    devices = _devices()
    with Attributor([Pods(), CgroupSource(_tree(tmp_path, inode))], 5) as attributor:
        result = attributor.resolve(devices)
    kube, cgroup = result.statuses
    assert kube.status == "ok"
    assert cgroup.status == "error" and said in cgroup.message
    assert "hostPID: true" in cgroup.message and "--pid=host" in cgroup.message
    # not job 4242 of whatever process 1001 is in this namespace: unknown
    assert result.process(1001) == ProcessAttribution()
    assert [w.pod for w in result.device_workloads(devices[0].id) or ()] == ["a"]
    # a device whose processes no source could attribute has unknown holders; an idle one has
    # none (the cgroup source speaks only of processes)
    assert result.unknown == frozenset({devices[1].id})


def test_the_host_s_namespace_is_read_as_before(tmp_path: Path) -> None:
    devices = _devices()
    with Attributor([Pods(), CgroupSource(_tree(tmp_path, 0xEFFFFFFC))], 5) as attributor:
        result = attributor.resolve(devices)
    assert result.statuses[1].status == "ok" and not result.unknown
    assert result.process(1001).job_id == "4242"


def test_it_is_logged_once_not_every_cycle(tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    devices = _devices()
    with caplog.at_level(logging.WARNING, logger="allsmi.attribution.cgroup"), \
            Attributor([CgroupSource(_tree(tmp_path, OTHER))], 5) as attributor:
        for _ in range(3):
            assert attributor.resolve(devices).statuses[0].status == "error"
    said = [r for r in caplog.records if "PID namespace" in r.getMessage()]
    assert len(said) == 1


def test_unknown_follows_the_processes_of_each_cycle(tmp_path: Path) -> None:
    """allsmi in a container without --pid=host, no kubelet, no job directory: the cgroup
    source fails every cycle and no source answers. A device is unknown while it has processes
    no source could attribute, and known free again once they end (not the first cycle's
    answer kept for good)."""
    busy = _devices()
    idle = [replace(d, processes=()) for d in busy]
    with Attributor([CgroupSource(_tree(tmp_path, OTHER))], 5) as attributor:
        first = attributor.resolve(busy)
        assert first.unknown == frozenset({busy[0].id, busy[1].id})
        # the processes ended: nothing says anything holds the devices, nor that it is unknown
        assert attributor.resolve(idle).unknown == frozenset()
        # a process starts on the idle device: unknown
        later = [idle[0], idle[1], replace(idle[2], processes=(ProcessSample(1003, "carol"),))]
        assert attributor.resolve(later).unknown == frozenset({busy[2].id})


def test_unknown_follows_the_processes_beside_a_carried_answer(tmp_path: Path) -> None:
    """The same while another source's answer is the very same object cycle after cycle
    (a pod source that answers once, then its answer is kept)."""
    busy = _devices()
    idle = [replace(d, processes=()) for d in busy]
    answer = SourceResult({busy[0].id: (Workload("kubernetes", namespace="ml", pod="a"),)})

    class Same(Pods):
        def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
            return answer

    with Attributor([Same(), CgroupSource(_tree(tmp_path, OTHER))], 5) as attributor:
        assert attributor.resolve(busy).unknown == frozenset({busy[1].id})
        assert attributor.resolve(idle).unknown == frozenset()

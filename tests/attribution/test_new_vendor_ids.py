"""Pods on Neuron, Ascend, Intel GPU and TPU devices attributed through the real gRPC kubelet
(a pod-resources server on a unix socket), with each device plugin's ids as the backends declare
them: NeuronCores by their node-wide number (mapped to the device holding them through the
ranges the Neuron backend reports), Neuron devices by number, ``Ascend910-<N>``, the Intel
plugin's ``card<N>-<share>`` and a TPU chip's index. The devices are the real backends' output
over their contract fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from allsmi.collection import registry
from allsmi.attribution import Attributor, AttributionSettings
from allsmi.attribution.kubernetes import KubeletSource
from allsmi.schema import DeviceSample
from tests.contract import scenarios_ascend, scenarios_intel, scenarios_neuron, scenarios_tpu
from tests.contract.scenario import ScenarioEnv

from .helpers import SIM_NOW, PodResourcesServer, pod


@pytest.fixture
def server() -> Iterator[PodResourcesServer]:
    srv = PodResourcesServer()
    yield srv
    srv.stop()


def _devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[DeviceSample]:
    out: list[DeviceSample] = []
    for module, scenario in ((scenarios_neuron, "trn2-two-apps"), (scenarios_ascend, "910b3-x4-training"),
                             (scenarios_intel, "i915-flex170x2"), (scenarios_tpu, "v5e-4-training")):
        spec = next(s for s in module.SCENARIOS if s.name == scenario)
        backend = spec.build(ScenarioEnv(tmp_path / scenario, monkeypatch))
        backend.open()
        try:
            out.extend(backend.sample())
        finally:
            backend.close()
    return out


def _by(devices: list[DeviceSample], backend: str, index: int) -> DeviceSample:
    return next(d for d in devices if d.backend == backend and d.index == index)


def test_new_vendors_pods_are_attributed_by_their_plugins_ids(server: PodResourcesServer, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    devices = _devices(tmp_path, monkeypatch)
    server.pods = [
        # NeuronCores 4 and 5 are on Neuron device 1 (cores 4-7), core 9 on device 2 (cores 8-11)
        pod("ml", "trainer", {"main": [("aws.amazon.com/neuroncore", ["4", "5"])]}),
        pod("ml", "server", {"main": [("aws.amazon.com/neuroncore", ["9"])]}),
        pod("ml", "whole", {"main": [("aws.amazon.com/neurondevice", ["3"])]}),
        pod("npu", "ascend-job", {"main": [("huawei.com/Ascend910", ["Ascend910-1"])]}),
        pod("gpu", "flex-job", {"main": [("gpu.intel.com/i915", ["card1-0"])]}),
        pod("tpu", "tpu-job", {"main": [("google.com/tpu", ["2"])]}),
        pod("ml", "lost", {"main": [("aws.amazon.com/neuroncore", ["99"])]}),
    ]
    source = KubeletSource(server.socket, AttributionSettings.declared(registry.declarations()),
                           timeout_seconds=5)
    with Attributor([source], timeout_seconds=5) as attributor:
        result = attributor.resolve(devices, now=SIM_NOW)

    def pods(dev: DeviceSample) -> list[str]:
        return sorted(w.pod or "" for w in result.device_workloads(dev.id) or ())

    assert pods(_by(devices, "neuron", 1)) == ["trainer"]
    assert pods(_by(devices, "neuron", 2)) == ["server"]
    assert pods(_by(devices, "neuron", 3)) == ["whole"]
    assert pods(_by(devices, "neuron", 0)) == []
    assert pods(_by(devices, "ascend", 1)) == ["ascend-job"]
    assert pods(_by(devices, "intel", 1)) == ["flex-job"]
    assert pods(_by(devices, "tpu", 2)) == ["tpu-job"]
    # a core number no device holds is named, never guessed onto a device
    (status,) = [s for s in result.statuses if s.name == "kubernetes"]
    assert "aws.amazon.com/neuroncore=99" in status.message

"""Attribution wired end to end: `allsmi snapshot`, `serve` and `doctor` against a real
pod-resources gRPC server on a unix socket (ALLSMI_KUBELET_SOCKET), run as a user runs them."""

from __future__ import annotations

import json
import re
import time
from typing import Iterator

import pytest

from allsmi.attribution._podresources import api_pb2

from ..conftest import run_allsmi
from ..exporter.server import run_serve
from .helpers import PodResourcesServer, find, mixed_devices, pod

DEVICES = mixed_devices()


@pytest.fixture
def kubelet() -> Iterator[PodResourcesServer]:
    srv = PodResourcesServer()
    yield srv
    srv.stop()


def _pods(srv: PodResourcesServer) -> dict[tuple[str, str, str], set[str]]:
    """Pods on devices of several vendors (a MIG slice included), each id as its device plugin
    writes it; returns (namespace, pod, container) -> the device ids it must be shown on."""
    h0, h3 = find(DEVICES, "nvidia", 0), find(DEVICES, "nvidia", 3)
    mig = find(DEVICES, "nvidia", 7, part=1)
    amd = find(DEVICES, "amd", 2)
    gaudi = find(DEVICES, "gaudi", 5)
    rngd = find(DEVICES, "furiosa", 0)
    assert amd.bus_id and mig.uuid
    srv.pods = [
        pod("ml", "trainer-0", {"main": [("nvidia.com/gpu", [h0.id, h3.id])]}),
        pod("serving", "vllm-mig", {"vllm": [("nvidia.com/mig-2g.20gb", [mig.uuid])]}),
        pod("serving", "rocm-llm", {"srv": [("amd.com/gpu", [amd.bus_id])]}),
        pod("habana", "tgi", {"tgi": [("habana.ai/gaudi", [gaudi.id])]}),
        pod("npu", "embed", {"llm": [("furiosa.ai/rngd", [rngd.id])]}),
        pod("kube-system", "no-devices", {"c": []}),
    ]
    srv.allocatable = [api_pb2.ContainerDevices(resource_name="nvidia.com/gpu",
                                                device_ids=[h0.id, h3.id]),
                       api_pb2.ContainerDevices(resource_name="example.com/nic", device_ids=["x"])]
    return {("ml", "trainer-0", "main"): {h0.id, h3.id},
            ("serving", "vllm-mig", "vllm"): {mig.id},
            ("serving", "rocm-llm", "srv"): {amd.id},
            ("habana", "tgi", "tgi"): {gaudi.id},
            ("npu", "embed", "llm"): {rngd.id}}


def test_snapshot_shows_each_pod_on_exactly_its_devices(kubelet: PodResourcesServer) -> None:
    expected = _pods(kubelet)
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json",
                        env={"ALLSMI_KUBELET_SOCKET": str(kubelet.socket)})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    statuses = {a["name"]: a["status"] for a in data["attribution"]}
    assert statuses == {"kubernetes": "ok", "simulated": "ok"}
    seen: dict[tuple[str, str, str], set[str]] = {}
    for dev in data["devices"]:
        assert dev["workloads"] is not None  # sources active: a list on every device
        for work in dev["workloads"]:
            if work["source"] == "kubernetes":
                assert work["job_id"] is None and work["user"] is None
                seen.setdefault((work["namespace"], work["pod"], work["container"]), set()).add(dev["id"])
            else:  # the kubelet replaces the simulated pods; the simulated jobs stay
                assert work["source"] == "simulated" and work["pod"] is None and work["job_id"]
    assert seen == expected


def test_serve_exports_the_matching_workload_series(kubelet: PodResourcesServer) -> None:
    expected = _pods(kubelet)
    server = run_serve(["--simulate", "mixed", "--interval", "0.5"],
                       env={"ALLSMI_KUBELET_SOCKET": str(kubelet.socket)})
    try:
        server.wait_ready()
        deadline = time.monotonic() + 30
        while True:
            text = server.get("/metrics").text
            series = re.findall(r'^allsmi_device_workload_info\{([^}]*)\} 1\.0$', text, re.M)
            if series or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        server.stop()
    seen: dict[tuple[str, str, str], set[str]] = {}
    jobs = 0
    for labels in series:
        values = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        assert set(values) == {"uuid", "resource_group", "source", "namespace", "pod",
                               "container", "job_id", "user"}
        assert values["user"] == ""  # people's names only with --processes
        if values["source"] == "kubernetes":
            seen.setdefault((values["namespace"], values["pod"], values["container"]),
                            set()).add(values["uuid"])
        else:
            jobs += 1
            assert values["source"] == "simulated" and values["job_id"] and not values["pod"]
    assert seen == expected
    assert jobs > 0
    # The join on uuid gives each workload its device's group, as allsmi_device_info has it.
    groups = {}
    for labels in re.findall(r'^allsmi_device_info\{([^}]*)\}', text, re.M):
        values = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        groups[values["uuid"]] = values["resource_group"]
    for labels in series:
        values = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        assert groups[values["uuid"]] == values["resource_group"]


def test_a_hung_kubelet_costs_one_timeout_and_never_the_snapshot(kubelet: PodResourcesServer,
                                                                 tmp_path) -> None:
    _pods(kubelet)
    kubelet.mode = "hang"
    config = tmp_path / "c.toml"
    config.write_text("[attribution]\ntimeout_seconds = 0.5\n")
    started = time.monotonic()
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json", "--config",
                        str(config), env={"ALLSMI_KUBELET_SOCKET": str(kubelet.socket)})
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    data = json.loads(result.stdout)
    statuses = {a["name"]: a for a in data["attribution"]}
    assert statuses["kubernetes"]["status"] == "timeout"
    assert statuses["simulated"]["status"] == "ok"  # the others still answer
    assert all(w["source"] == "simulated" for d in data["devices"] for w in d["workloads"])
    kubelet.mode = "garbage"
    kubelet.release()
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json",
                        env={"ALLSMI_KUBELET_SOCKET": str(kubelet.socket)})
    assert result.returncode == 0, result.stderr
    kube = next(a for a in json.loads(result.stdout)["attribution"] if a["name"] == "kubernetes")
    assert kube["status"] == "error" and kube["message"]


def test_doctor_shows_sources_and_allocatable_resources(kubelet: PodResourcesServer) -> None:
    _pods(kubelet)
    h0, h3 = find(DEVICES, "nvidia", 0), find(DEVICES, "nvidia", 3)
    result = run_allsmi("doctor", "--json", "--simulate", "mixed",
                        env={"ALLSMI_KUBELET_SOCKET": str(kubelet.socket)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {a["name"]: a["status"] for a in report["attribution"]} == {
        "kubernetes": "ok", "simulated": "ok"}
    assert report["kubelet"] == {"socket": str(kubelet.socket), "error": None, "allocatable": [
        {"resource_name": "nvidia.com/gpu", "device_ids": [h0.id, h3.id]}]}  # no NICs
    text = run_allsmi("doctor", "--simulate", "mixed",
                      env={"ALLSMI_KUBELET_SOCKET": str(kubelet.socket)})
    assert text.returncode == 0, text.stderr
    assert "attribution kubernetes" in text.stdout and "nvidia.com/gpu: 2 device(s)" in text.stdout


def test_doctor_without_a_kubelet_says_so() -> None:
    result = run_allsmi("doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["kubelet"] is None
    kube = next(a for a in report["attribution"] if a["name"] == "kubernetes")
    assert kube["status"] == "unavailable" and "socket" in kube["message"]

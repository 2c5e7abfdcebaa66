"""The kubernetes source against a real gRPC server on a unix socket (not a client mock)."""

from __future__ import annotations

import time
from typing import Iterator

import pytest

from allsmi.collection import registry
from allsmi.attribution import (Attributor, AttributionSettings, HpcJobSource, attribution_settings,
                                build_sources)
from allsmi.attribution._podresources import api_pb2
from allsmi.attribution.kubernetes import KubeletSource
from allsmi.config import Config, parse_config

from .helpers import SIM_NOW, PodResourcesServer, find, mixed_devices, pod

DEVICES = mixed_devices()
#: The resource rules and node names the installed backends declare (the CLI hands them in).
DECLARED = registry.declarations()
SETTINGS = AttributionSettings.declared(DECLARED)


@pytest.fixture
def server() -> Iterator[PodResourcesServer]:
    srv = PodResourcesServer()
    yield srv
    srv.stop()


def _cluster(srv: PodResourcesServer) -> dict[str, set[str]]:
    """Pods of several vendors, each as its device plugin writes ids; returns pod -> device ids."""
    h0, h1 = find(DEVICES, "nvidia", 0), find(DEVICES, "nvidia", 1)
    mig = find(DEVICES, "nvidia", 7, part=2)
    amd = find(DEVICES, "amd", 3)
    gaudi = find(DEVICES, "gaudi", 2)
    rngd = find(DEVICES, "furiosa", 1)
    rbln = find(DEVICES, "rebellions", 1)
    tt = find(DEVICES, "tenstorrent", 1)
    assert amd.bus_id and mig.uuid and h1.uuid
    srv.pods = [
        # uuid, and a time-slicing replica of another GPU ("::N")
        pod("ml", "trainer-0", {"main": [("nvidia.com/gpu", [h0.id, f"{h1.uuid}::3"])],
                                "sidecar": [("example.com/nic", ["eth1"])]}),
        pod("serving", "vllm-abc", {"vllm": [("nvidia.com/mig-1g.10gb", [mig.uuid])]}),
        # AMD's plugin names GPUs by PCI bus id (here spelt with an 8-digit domain, upper case)
        pod("serving", "rocm-llm", {"srv": [("amd.com/gpu", ["0000" + amd.bus_id.upper()])]}),
        pod("habana", "tgi", {"tgi": [("habana.ai/gaudi", [gaudi.id])]}),
        pod("npu", "embed", {"llm": [("furiosa.ai/rngd", [rngd.id])],
                             "ocr": [("rebellions.ai/ATOM", ["rbln1"])]}),
        pod("npu", "tt", {"main": [("tenstorrent.com/p150", ["/dev/tenstorrent/1"])]}),
        pod("kube-system", "no-devices", {"c": []}),
    ]
    return {"trainer-0": {h0.id, h1.id}, "vllm-abc": {mig.id}, "rocm-llm": {amd.id},
            "tgi": {gaudi.id}, "embed": {rngd.id, rbln.id}, "tt": {tt.id}}


def test_each_pod_is_on_exactly_the_devices_its_containers_hold(server: PodResourcesServer) -> None:
    expected = _cluster(server)
    source = KubeletSource(server.socket, SETTINGS, timeout_seconds=5)
    with Attributor([source], timeout_seconds=5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    assert [(s.name, s.status, s.message) for s in result.statuses] == [("kubernetes", "ok", "")]
    seen: dict[str, set[str]] = {}
    for dev in DEVICES:
        for work in result.device_workloads(dev.id) or ():
            assert work.source == "kubernetes" and work.job_id is None and work.user is None
            seen.setdefault(work.pod or "", set()).add(dev.id)
    assert seen == expected
    mig = find(DEVICES, "nvidia", 7, part=2)
    assert [w.to_dict() for w in result.device_workloads(mig.id) or ()] == [
        {"source": "kubernetes", "namespace": "serving", "pod": "vllm-abc", "container": "vllm",
         "job_id": None, "user": None, "share": None}]
    # the MIG parent and the other slices hold nothing; a free device is [] (not None)
    assert result.device_workloads(find(DEVICES, "nvidia", 7).id) == ()
    assert result.device_workloads(find(DEVICES, "nvidia", 6).id) == ()
    embed = {(w.container, d) for d in (find(DEVICES, "furiosa", 1).id, find(DEVICES, "rebellions", 1).id)
             for w in result.device_workloads(d) or ()}
    assert embed == {("llm", find(DEVICES, "furiosa", 1).id), ("ocr", find(DEVICES, "rebellions", 1).id)}


def test_ids_matching_no_device_are_reported_not_invented(server: PodResourcesServer) -> None:
    server.pods = [pod("ml", "ghost", {"main": [("nvidia.com/gpu", ["GPU-00000000-dead-beef-0000-000000000000"])]})]
    with Attributor([KubeletSource(server.socket, SETTINGS, timeout_seconds=5)], 5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    status = result.statuses[0]
    assert status.status == "ok" and "1 allocated device id(s) match no device" in status.message
    assert "nvidia.com/gpu=GPU-00000000-dead-beef" in status.message
    assert all(result.device_workloads(d.id) == () for d in DEVICES)


def test_matching_a_huge_answer_never_runs_past_the_timeout(server: PodResourcesServer) -> None:
    """A kubelet answer of millions of ids that name no device (8 MiB, within the 16 MiB the
    source accepts) kept the worker matching them for tens of seconds, far beyond its
    ``timeout_seconds`` (each id scanned every device, and nothing looked at the deadline): the
    source reports a timeout once its time is spent instead (its last answer carried)."""
    from allsmi.attribution.model import SourceTimeout
    server.pods = [pod("ml", "huge", {"main": [("nvidia.com/gpu", ["zz"] * 2_000_000)]})]
    server.pods.append(pod("ml", "real", {"main": [("nvidia.com/gpu", ["0"])]}))
    source = KubeletSource(server.socket, SETTINGS, timeout_seconds=1.0)
    with pytest.raises(SourceTimeout, match="not matched to devices within 1 s"):
        source.collect(DEVICES, SIM_NOW)
    server.pods = server.pods[1:]  # the next answer, of a normal size, is matched as ever
    result = source.collect(DEVICES, SIM_NOW)
    assert [w.pod for w in result.workloads[find(DEVICES, "nvidia", 0).id]] == ["real"]


def test_hang_then_garbage_then_recovery_never_delay_or_break_the_others(
        server: PodResourcesServer, tmp_path) -> None:
    _cluster(server)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "amd3").write_text("555\n")
    timeout = 0.5
    sources = [KubeletSource(server.socket, SETTINGS, timeout_seconds=timeout), HpcJobSource(jobs)]
    # carry_seconds=0: the kubelet's last answer is not carried (tests/accounting/
    # test_attribution_gaps.py covers carrying): what it held is unknown while it fails.
    with Attributor(sources, timeout_seconds=timeout, carry_seconds=0) as attributor:
        assert attributor.resolve(DEVICES).statuses[0].status == "ok"

        server.mode = "hang"
        started = time.monotonic()
        hung = attributor.resolve(DEVICES)
        assert time.monotonic() - started < timeout + 1.5  # the deadline, not the hang
        assert [s.status for s in hung.statuses] == ["timeout", "ok"]
        amd = find(DEVICES, "amd", 3).id
        assert [w.job_id for w in hung.device_workloads(amd) or ()] == ["555"]  # the others go on
        # every device no answer names a holder of has unknown holders, not none
        assert hung.unknown == {d.id for d in DEVICES if d.id != amd}
        server.release()

        server.mode = "garbage"
        deadline = time.monotonic() + 20
        while True:  # the hung call may still be finishing: wait for the garbage answer
            broken = attributor.resolve(DEVICES)
            if broken.statuses[0].status == "error" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert broken.statuses[0].status == "error", broken.statuses
        assert "List failed" in broken.statuses[0].message
        assert broken.statuses[1].status == "ok"
        assert [w.source for w in broken.device_workloads(amd) or ()] == ["hpc-job"]

        server.mode = "answer"
        recovered = attributor.resolve(DEVICES)
        assert [s.status for s in recovered.statuses] == ["ok", "ok"]
        assert {w.source for w in recovered.device_workloads(amd) or ()} == {"kubernetes", "hpc-job"}


def test_absent_socket_is_unavailable_and_leaves_workloads_unknown(tmp_path) -> None:
    with Attributor([KubeletSource(tmp_path / "kubelet.sock", SETTINGS)], 1) as attributor:
        result = attributor.resolve(DEVICES)
    assert result.statuses[0].status == "unavailable"
    assert "no kubelet pod-resources socket" in result.statuses[0].message
    assert result.workloads is None and result.device_workloads(DEVICES[0].id) is None


def test_a_node_without_a_kubelet_does_not_import_the_device_matching(tmp_path) -> None:
    """The ids are matched to devices only once the kubelet answers: a node without one (the
    running dashboard's, most) never imports :mod:`allsmi.attribution.matching` (a fresh
    interpreter; the tests above match through it)."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from allsmi.attribution import Attributor\n"
            "from allsmi.attribution.kubernetes import KubeletSource\n"
            f"with Attributor([KubeletSource({str(tmp_path / 'kubelet.sock')!r})], 1) as attributor:\n"
            "    status = attributor.resolve([]).statuses[0].status\n"
            "print(status, 'allsmi.attribution.matching' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["unavailable", "False"]


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_a_path_that_is_not_a_socket_is_no_kubelet(tmp_path, kind: str) -> None:
    """A directory at the socket's path (what a bind mount of a socket that was not there
    leaves, on a node without Kubernetes) or a file: no kubelet can listen there. The source is
    unavailable, said so, and leaves no device's holders unknown."""
    path = tmp_path / "kubelet.sock"
    path.mkdir() if kind == "directory" else path.write_text("")
    with Attributor([KubeletSource(path, SETTINGS)], 1) as attributor:
        result = attributor.resolve(DEVICES)
    status = result.statuses[0]
    assert (status.status, status.message) == (
        "unavailable", f"{path} is {'a directory' if kind == 'directory' else 'not a socket'}, "
                       "not the kubelet's pod-resources socket")
    assert result.workloads is None and not result.unknown


def test_absent_socket_starts_no_thread_until_the_socket_appears(server: PodResourcesServer, tmp_path) -> None:
    """No socket: answered on the resolving thread (a one-shot snapshot on a node without a
    kubelet starts no thread for it); once the socket is there, asked on its thread."""
    source = KubeletSource(tmp_path / "kubelet.sock", SETTINGS, timeout_seconds=5)
    with Attributor([source], 5) as attributor:
        runner = attributor.runners[0]
        runner.reprobe_seconds = 0.0  # asked again at once (the exporter waits a minute)
        first = attributor.resolve(DEVICES).statuses[0]
        assert (first.status, first.message) == ("unavailable", f"no kubelet pod-resources socket at {source.socket}")
        assert runner._flight.thread is None
        source.socket = server.socket
        assert attributor.resolve(DEVICES).statuses[0].status == "ok"
        assert runner._flight.thread is not None


def test_allocatable_resources_for_doctor(server: PodResourcesServer) -> None:
    server.allocatable = [
        api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-a", "GPU-b"]),
        api_pb2.ContainerDevices(resource_name="example.com/nic", device_ids=["eth0"]),
        api_pb2.ContainerDevices(resource_name="amd.com/gpu", device_ids=["0000:0c:00.0"]),
    ]
    source = KubeletSource(server.socket, SETTINGS, timeout_seconds=5)
    try:
        assert source.allocatable() == [("amd.com/gpu", ("0000:0c:00.0",)),
                                         ("nvidia.com/gpu", ("GPU-a", "GPU-b"))]
    finally:
        source.close()


def test_resource_names_table_maps_a_renamed_resource(server: PodResourcesServer, tmp_path) -> None:
    gpu = find(DEVICES, "nvidia", 3)
    server.pods = [pod("ml", "custom", {"c": [("example.com/big-gpu", ["3"])]})]
    path = tmp_path / "config.toml"
    path.write_text('[attribution.resource_names]\n"example.com/big-gpu" = { vendor = "nvidia", id = "index" }\n')
    config = parse_config(path.read_text(), path)
    settings = attribution_settings(config, {"ALLSMI_KUBELET_SOCKET": str(server.socket)}, DECLARED)
    sources = build_sources(settings)
    assert [s.name for s in sources] == ["kubernetes", "cgroup"]
    with Attributor(sources[:1], 5) as attributor:
        result = attributor.resolve(DEVICES)
    assert [w.pod for w in result.device_workloads(gpu.id) or ()] == ["custom"]


def test_simulation_uses_an_explicit_socket_instead_of_simulated_pods(server: PodResourcesServer) -> None:
    _cluster(server)
    settings = attribution_settings(Config(), {"ALLSMI_KUBELET_SOCKET": str(server.socket)}, DECLARED)
    sources = build_sources(settings, simulate=True)
    assert [s.name for s in sources] == ["kubernetes", "simulated"]
    with Attributor(sources, 5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    workloads = [w for d in DEVICES for w in result.device_workloads(d.id) or ()]
    assert {w.source for w in workloads if w.pod} == {"kubernetes"}  # no simulated pods
    assert any(w.source == "simulated" and w.job_id for w in workloads)  # simulated jobs stay


def test_a_new_backends_declared_resources_and_node_names_are_attributed(
        server: PodResourcesServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Attribution knows no vendor list: a backend it never heard of declares its device
    plugin's resource and node names, and pods on its devices are attributed (a config rule may
    name it too); without its declaration the same pod is skipped as no accelerator."""
    from allsmi.schema.declarations import KubernetesResource, VendorDeclaration
    from allsmi.schema import DeviceSample
    # (a made-up vendor: Intel GPUs are a built-in backend now)
    xpu = VendorDeclaration(backend="xpu", vendor="xpuvendor", kind="gpu", node_names=("xcard",),
                            kubernetes_resources=(KubernetesResource("gpu.example.com/*"),))
    devices = [DeviceSample(id=f"xpu:{i}", vendor="xpuvendor", kind="gpu", backend="xpu", index=i)
               for i in range(2)]
    server.pods = [pod("ml", "max-job", {"train": [("gpu.example.com/x", ["xcard1"])]})]
    for decls, expected in (((*DECLARED, xpu), ("max-job",)), (DECLARED, ())):
        source = KubeletSource(server.socket, AttributionSettings.declared(decls), timeout_seconds=5)
        with Attributor([source], timeout_seconds=5) as attributor:
            result = attributor.resolve(devices, now=SIM_NOW)
        assert result.device_workloads("xpu:0") == ()
        assert tuple(w.pod for w in result.device_workloads("xpu:1") or ()) == expected
    path = tmp_path / "config.toml"
    path.write_text('[attribution.resource_names]\n"example.com/max" = "xpu"\n')
    from allsmi.config import ConfigError, load_config
    config = load_config(path, {})
    rules = attribution_settings(config, {}, (*DECLARED, xpu)).resource_rules
    assert rules[0].pattern == "example.com/max" and rules[0].vendor == "xpu"
    with pytest.raises(ConfigError, match="xpu"):
        attribution_settings(config, {}, DECLARED)


@pytest.mark.parametrize("allocatable", [True, False])
def test_a_replica_id_out_of_range_is_reported_and_changes_no_other_share(
        server: PodResourcesServer, allocatable: bool) -> None:
    """Pods on ``<uuid>::0`` and ``::1`` of a GPU with 2 replicas keep a half each beside a pod
    claiming ``::99999999`` (issue 32, item 5), which is named and given nothing; with or
    without GetAllocatableResources."""
    gpu = find(DEVICES, "nvidia", 1)
    assert gpu.uuid
    ids = [f"{gpu.uuid}::{n}" for n in (0, 1, 99999999)]
    server.pods = [pod("ml", f"p{n}", {"c": [("nvidia.com/gpu", [rid])]})
                   for n, rid in enumerate(ids)]
    if allocatable:
        server.allocatable = [api_pb2.ContainerDevices(resource_name="nvidia.com/gpu",
                                                       device_ids=ids[:2])]
    else:
        server.fail_allocatable = True
    with Attributor([KubeletSource(server.socket, SETTINGS, timeout_seconds=5)], 5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    status = result.statuses[0]
    assert "1 time-slicing replica id(s) out of range" in status.message, status.message
    assert f"{gpu.uuid}::99999999 (ml/p2; out of " in status.message
    shares = {w.pod: w.share for w in result.device_workloads(gpu.id) or ()}
    assert shares == {"p0": 0.5, "p1": 0.5}


def test_a_slow_allocatable_call_never_costs_the_list_answer(server: PodResourcesServer) -> None:
    """Pods on time-slicing replicas make the source ask GetAllocatableResources after List
    (the first cycle, then every 300 s). Each call had the whole ``timeout_seconds`` while the
    runner waits that long for both: a kubelet slow to answer the second made the source time
    out, its List answer lost (the devices unknown). The second call gets what List left."""
    gpu = find(DEVICES, "nvidia", 1)
    assert gpu.uuid
    server.pods = [pod("ml", f"p{n}", {"c": [("nvidia.com/gpu", [f"{gpu.uuid}::{n}"])]})
                   for n in (0, 1)]
    server.hang_allocatable = True
    with Attributor([KubeletSource(server.socket, SETTINGS, timeout_seconds=1)], 1) as attributor:
        began = time.monotonic()
        result = attributor.resolve(DEVICES, now=SIM_NOW)
        took = time.monotonic() - began
        server.release()
    assert result.statuses[0].status == "ok", result.statuses[0]
    assert took < 1.0, took
    # the replicas counted from those held (GetAllocatableResources gave no answer in time)
    assert {w.pod: w.share for w in result.device_workloads(gpu.id) or ()} == {"p0": 0.5, "p1": 0.5}
    assert not result.unknown


def test_a_pod_and_a_job_file_claiming_one_device_are_a_reported_conflict(
        server: PodResourcesServer, tmp_path) -> None:
    """The kubelet gives a GPU to a pod while the job-mapping directory gives it to Slurm job
    77 (issue 32, item 9): both hold it (each billed a part), and both sources' statuses name
    the device and the claimants; a device only one of them names is no conflict."""
    gpu, other = find(DEVICES, "nvidia", 1), find(DEVICES, "nvidia", 2)
    server.pods = [pod("ml", "trainer", {"c": [("nvidia.com/gpu", [gpu.id])]})]
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "nvidia1").write_text("77\n")
    (jobs / "nvidia2").write_text("78\n")
    sources = [KubeletSource(server.socket, SETTINGS, timeout_seconds=5), HpcJobSource(jobs)]
    with Attributor(sources, 5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    assert {w.pod or w.job_id for w in result.device_workloads(gpu.id) or ()} == {"trainer", "77"}
    assert result.conflicts == (gpu.id,)
    for status in result.statuses:
        assert status.status == "ok"
        assert "1 device(s) claimed by holders of different sources at once, each billed a " \
            f"part: {gpu.id} (kubernetes pod ml/trainer, hpc-job job 77)" in status.message, \
            status
        assert other.id not in status.message


def test_devices_given_by_dynamic_resource_allocation_are_held(server: PodResourcesServer,
                                                               tmp_path) -> None:
    """A kubelet with DRA (1.27+; GA in 1.34) lists claimed devices under a container's
    ``dynamic_resources``, not ``devices``: they were ignored, so a GPU a pod held through a
    ResourceClaim looked free. (The NVIDIA driver's ``gpu-<minor>`` is read through the
    driver's minor numbers: tests/attribution/test_plugin_id_forms.py.)"""
    h1, h2 = find(DEVICES, "nvidia", 1), find(DEVICES, "nvidia", 2)
    info = tmp_path / "proc" / "driver" / "nvidia" / "gpus" / "0000:28:00.0"
    info.mkdir(parents=True)
    (info / "information").write_text(f"GPU UUID: \t {h1.uuid}\nDevice Minor: \t 1\n")

    def claimed(driver: str, device: str, cdi: tuple[str, ...] = ()) -> object:
        return api_pb2.ClaimResource(driver_name=driver, pool_name="node1", device_name=device,
                                     cdi_devices=[api_pb2.CDIDevice(name=n) for n in cdi])
    server.pods = [api_pb2.PodResources(namespace="ml", name="dra", containers=[
        api_pb2.ContainerResources(name="main", dynamic_resources=[api_pb2.DynamicResource(
            claim_name="gpus", claim_namespace="ml", claim_resources=[
                claimed("gpu.nvidia.com", "gpu-1"),                 # the NVIDIA DRA driver's name
                claimed("gpu.nvidia.com", "odd-name", (f"k8s.gpu.nvidia.com/gpu={h2.uuid}",)),
                claimed("gpu.nvidia.com", "gpu-99"),                # no such device: said
                claimed("dra.net", "eth0"),                         # not an accelerator
            ])])])]
    settings = AttributionSettings.declared(DECLARED, proc_root=tmp_path / "proc")
    source = KubeletSource(server.socket, settings, timeout_seconds=5)
    with Attributor([source], timeout_seconds=5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    for dev in (h1, h2):
        assert [(w.namespace, w.pod, w.container) for w in result.device_workloads(dev.id) or ()] \
            == [("ml", "dra", "main")]
    status = result.statuses[0]
    assert status.status == "ok"
    assert status.message == "1 allocated device id(s) match no device: DRA gpu.nvidia.com/node1/gpu-99"


def test_a_kubelet_restarting_is_a_failure_not_a_node_without_pods(tmp_path) -> None:
    """The kubelet answered, then its socket is gone for a moment (a kubelet restarting removes
    it and makes it anew): its pods' devices are not free meanwhile (its last answer carried,
    then unknown), and the new socket is asked at once, not a minute later."""
    old = PodResourcesServer()
    new = PodResourcesServer()
    try:
        h0 = find(DEVICES, "nvidia", 0)
        old.pods = new.pods = [pod("ml", "idle-notebook", {"c": [("nvidia.com/gpu", [h0.id])]})]
        jobs = tmp_path / "jobs"
        jobs.mkdir()
        sources = [KubeletSource(old.socket, SETTINGS, timeout_seconds=5), HpcJobSource(jobs)]
        with Attributor(sources, timeout_seconds=5) as attributor:
            assert [w.pod for w in attributor.resolve(DEVICES).device_workloads(h0.id) or ()] \
                == ["idle-notebook"]
            old.server.stop(grace=None)  # the kubelet restarting: no socket for a moment
            old.socket.unlink(missing_ok=True)
            gone = attributor.resolve(DEVICES)
            assert gone.statuses[0].status == "error", gone.statuses[0]
            assert "no kubelet pod-resources socket" in gone.statuses[0].message
            assert [w.pod for w in gone.device_workloads(h0.id) or ()] == ["idle-notebook"]
            attributor.carry_seconds = 0  # its last answer too old to stand in: unknown
            assert h0.id in attributor.resolve(DEVICES).unknown
            new.socket.rename(old.socket)  # the new kubelet's socket, at the same path
            back = attributor.resolve(DEVICES)
            assert back.statuses[0].status == "ok", back.statuses[0]
            assert [w.pod for w in back.device_workloads(h0.id) or ()] == ["idle-notebook"]
            assert not back.unknown
    finally:
        old.stop()
        new.stop()


@pytest.mark.parametrize("vendor, backend, raw", [
    ("huawei", "ascend", "davinci0"), ("huawei", "ascend", "Ascend910-0"),
    ("aws", "neuron", "neuron0"), ("google", "tpu", "/dev/accel0"), ("intel", "gaudi", "hl0"),
    ("intel", "intel", "card0")])
def test_a_resource_named_by_its_vendor_matches_device_node_names(
        server: PodResourcesServer, tmp_path, vendor: str, backend: str, raw: str) -> None:
    """``[attribution.resource_names]`` may name a vendor (``huawei``, ``aws``, ``google``,
    ``intel``) instead of a backend: ids written as device-node names are matched as for the
    backend's own resources (the backends of that vendor's node names)."""
    dev = find(DEVICES, backend, 0)
    server.pods = [pod("ml", "custom", {"c": [("example.com/accel", [raw])]})]
    path = tmp_path / "config.toml"
    path.write_text(f'[attribution.resource_names]\n"example.com/accel" = "{vendor}"\n')
    settings = attribution_settings(parse_config(path.read_text(), path),
                                    {"ALLSMI_KUBELET_SOCKET": str(server.socket)}, DECLARED)
    with Attributor(build_sources(settings)[:1], 5) as attributor:
        result = attributor.resolve(DEVICES)
    assert result.statuses[0].message == ""
    assert [d.id for d in DEVICES
            if any(w.pod == "custom" for w in result.device_workloads(d.id) or ())] == [dev.id]

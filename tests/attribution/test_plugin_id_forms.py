"""Device ids in the other forms real device plugins and job files write them, through the real
gRPC kubelet (a pod-resources server on a unix socket) and a real job-mapping directory: the
ROCm plugin's time-slicing replicas ``<bus id>-slice-<n>``, a partitioned AMD board's
partition 0 named by its PCI address (the board's ``<bus>.0`` too), and numbers that are not
ASCII digits or are thousands of digits long (each took the whole source down), and the NVIDIA
DRA driver's ``gpu-<minor>``, a device minor number and not an index."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from allsmi.attribution import Attributor, AttributionSettings, HpcJobSource
from allsmi.attribution._podresources import api_pb2
from allsmi.attribution.kubernetes import KubeletSource
from allsmi.collection import registry
from allsmi.schema import DeviceSample
from tests.contract import scenarios_amd
from tests.contract.scenario import ScenarioEnv

from .helpers import SIM_NOW, PodResourcesServer, find, mixed_devices, pod

DEVICES = mixed_devices()
SETTINGS = AttributionSettings.declared(registry.declarations())


@pytest.fixture
def server() -> Iterator[PodResourcesServer]:
    srv = PodResourcesServer()
    yield srv
    srv.stop()


def _holders(result, dev: DeviceSample) -> dict[str | None, float | None]:
    return {w.pod or w.job_id: w.share for w in result.device_workloads(dev.id) or ()}


def test_rocm_time_slicing_replicas_are_held_with_their_share(server: PodResourcesServer) -> None:
    """The ROCm device plugin's time-slicing (``gpu.replicas``) hands out ``<bus id>-slice-<n>``:
    no such id matched a device, so the pods sharing an AMD GPU were not attributed and the GPU
    looked free. Each replica is ``1/replicas`` of the GPU, as an NVIDIA ``<uuid>::<n>``."""
    amd = find(DEVICES, "amd", 2)
    assert amd.bus_id
    ids = [f"{amd.bus_id}-slice-{n}" for n in range(4)]
    server.allocatable = [api_pb2.ContainerDevices(resource_name="amd.com/gpu", device_ids=ids)]
    server.pods = [pod("ml", "p0", {"c": [("amd.com/gpu", [ids[0]])]}),
                   pod("ml", "p3", {"c": [("amd.com/gpu", [ids[3]])]})]
    with Attributor([KubeletSource(server.socket, SETTINGS, timeout_seconds=5)], 5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    assert [(s.status, s.message) for s in result.statuses] == [("ok", "")]
    assert _holders(result, amd) == {"p0": 0.25, "p3": 0.25}
    assert all(not result.device_workloads(d.id) for d in DEVICES if d.id != amd.id)


def _cpx_boards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[DeviceSample]:
    """Two MI300X boards in CPX mode as the AMD backend reports them (its contract fixture):
    each board at ``<bus>.0`` and its eight partitions at ``<bus>.0`` to ``<bus>.7``."""
    spec = next(s for s in scenarios_amd.SCENARIOS if s.name == "mi300x-cpx-2-boards")
    backend = spec.build(ScenarioEnv(tmp_path / spec.name, monkeypatch))
    backend.open()
    try:
        return list(backend.sample())
    finally:
        backend.close()


def test_a_partitioned_boards_first_partition_is_the_one_its_address_names(
        server: PodResourcesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a partition mode the ROCm plugin names a board's first partition by the GPU's PCI
    address (``0000:0c:00.0``), which is also the board's own: the pod was put on the whole
    board (all of it allocated to a pod holding an eighth) and partition 0 looked free. A job
    file named by the address is partition 0's as well, as ``<bus>.2`` is partition 2's; a MIG
    GPU's address (its instances share it) still names the whole GPU."""
    devices = _cpx_boards(tmp_path, monkeypatch)
    board = next(d for d in devices if d.parent is None and d.bus_id
                 and d.bus_id.endswith("0c:00.0"))
    parts = {d.bus_id: d for d in devices if d.parent == board.id}
    assert len(parts) == 8 and board.bus_id in parts
    first, third = parts[board.bus_id], parts[board.bus_id[:-1] + "2"]
    server.pods = [pod("ml", "cpx", {"c": [("amd.com/cpx_nps4", [board.bus_id])]})]
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / board.bus_id).write_text("71\n")
    (jobs / third.bus_id).write_text("72\n")  # type: ignore[operator]
    mig_gpu = find(DEVICES, "nvidia", 7)
    (jobs / str(mig_gpu.bus_id)).write_text("73\n")
    sources = [KubeletSource(server.socket, SETTINGS, timeout_seconds=5), HpcJobSource(jobs)]
    with Attributor(sources, 5) as attributor:
        result = attributor.resolve([*devices, *DEVICES], now=SIM_NOW)
    assert [s.status for s in result.statuses] == ["ok", "ok"], result.statuses
    assert _holders(result, first) == {"cpx": None, "71": None}
    assert _holders(result, third) == {"72": None}
    assert result.device_workloads(board.id) == ()
    assert _holders(result, mig_gpu) == {"73": None}


def test_numbers_that_are_not_ascii_or_too_long_name_no_device_and_break_nothing(
        server: PodResourcesServer, tmp_path: Path) -> None:
    """``²`` passed ``str.isdigit`` and failed ``int()``; 5000 digits failed Python's limit on
    converting long numbers: the error left the source (``internal error: ValueError``), every
    pod or job it knew with it. ``٣`` (an Arabic-Indic 3) was taken for index 3. Each is an id
    that names no device now, said in the status; the other holders stay."""
    h0, h3 = find(DEVICES, "nvidia", 0), find(DEVICES, "nvidia", 3)
    bad = ["²", "٣", "9" * 5000, f"{h3.uuid}::{'9' * 5000}", "nvidia" + "9" * 5000, "1:" + "9" * 5000]
    server.pods = [pod("ml", "good", {"c": [("nvidia.com/gpu", [str(h0.uuid)])]}),
                   pod("ml", "odd", {"c": [("nvidia.com/gpu", bad)]})]
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "0").write_text("4242\n")
    for name in ("²", "٣", "7.²"):
        (jobs / name).write_text("1\n")
    sources = [KubeletSource(server.socket, SETTINGS, timeout_seconds=5), HpcJobSource(jobs)]
    with Attributor(sources, 5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    kube, hpc = result.statuses
    assert kube.status == "ok", kube
    # each id said, a long one cut (5000 digits hid every other problem of the message)
    assert kube.message.startswith("5 allocated device id(s) match no device: nvidia.com/gpu=², "
                                   "nvidia.com/gpu=٣, nvidia.com/gpu=999"), kube.message
    assert "(5000 characters), nvidia.com/gpu=nvidia999" in kube.message, kube.message
    assert f"1 time-slicing replica id(s) out of range, not attributed: nvidia.com/gpu={h3.uuid}" \
        f"::999" in kube.message, kube.message
    assert "(5042 characters) (ml/odd; out of 256 replicas" in kube.message, kube.message
    assert hpc.status == "ok" and "3 file(s) name no device" in hpc.message, hpc
    assert _holders(result, h0) == {"good": None, "4242": None}
    assert _holders(result, h3) == {}


def _claim(driver: str, device: str, cdi: tuple[str, ...] = ()) -> object:
    return api_pb2.ClaimResource(driver_name=driver, pool_name="node1", device_name=device,
                                 cdi_devices=[api_pb2.CDIDevice(name=n) for n in cdi])


def test_the_nvidia_dra_drivers_gpu_name_is_its_minor_number_not_its_index(
        server: PodResourcesServer, tmp_path: Path) -> None:
    """The NVIDIA DRA driver names a GPU ``gpu-<minor>`` (``/dev/nvidia<minor>``; its CDI name
    ``k8s.gpu.nvidia.com/device=gpu-<minor>`` too). Minor numbers follow the driver's probe
    order, indices the PCI bus order (on a DGX they differ): ``gpu-1`` was taken for index 1,
    a pod put on another pod's GPU. The driver's ``/proc/driver/nvidia/gpus/<bus>/information``
    says each GPU's minor and uuid; a minor it does not list names no GPU (said), never an
    index's."""
    h1, h2 = find(DEVICES, "nvidia", 1), find(DEVICES, "nvidia", 2)
    gpus = tmp_path / "proc" / "driver" / "nvidia" / "gpus"
    for minor, dev in ((2, h1), (1, h2)):  # the minors of GPUs 1 and 2 crossed
        (gpus / str(dev.bus_id)).mkdir(parents=True)
        (gpus / str(dev.bus_id) / "information").write_text(
            f"Model: \t\t NVIDIA H100\nGPU UUID: \t {dev.uuid}\nBus Location: \t {dev.bus_id}\n"
            f"Device Minor: \t {minor}\nGPU Excluded:\t No\n")
    server.pods = [
        pod_dra("ml", "a", [_claim("gpu.nvidia.com", "gpu-1")]),
        pod_dra("ml", "b", [_claim("gpu.nvidia.com", "odd", ("k8s.gpu.nvidia.com/device=gpu-2",))]),
        pod_dra("ml", "c", [_claim("gpu.nvidia.com", "gpu-3")]),  # no minor 3 listed
    ]
    settings = AttributionSettings.declared(registry.declarations(), proc_root=tmp_path / "proc")
    with Attributor([KubeletSource(server.socket, settings, timeout_seconds=5)], 5) as attributor:
        result = attributor.resolve(DEVICES, now=SIM_NOW)
    status = result.statuses[0]
    assert status.status == "ok"
    assert status.message == "1 allocated device id(s) match no device: DRA gpu.nvidia.com/node1/gpu-3"
    assert _holders(result, h2) == {"a": None}
    assert _holders(result, h1) == {"b": None}
    assert _holders(result, find(DEVICES, "nvidia", 3)) == {}


def pod_dra(namespace: str, name: str, claims: list[object]) -> object:
    return api_pb2.PodResources(namespace=namespace, name=name, containers=[
        api_pb2.ContainerResources(name="main", dynamic_resources=[api_pb2.DynamicResource(
            claim_name="gpus", claim_namespace=namespace, claim_resources=claims)])])

"""Shared helpers: the mixed scenario's devices, and a real pod-resources gRPC server."""

from __future__ import annotations

import shutil
import tempfile
import threading
from concurrent import futures
from pathlib import Path
from typing import Any, Iterable

import grpc

from allsmi.attribution._podresources import api_pb2
from allsmi.backends.simulated import simulated_backends
from allsmi.schema import DeviceSample

SIM_NOW = 1_790_000_000.0  # a fixed instant: the simulation is a pure function of time


def mixed_devices(now: float = SIM_NOW) -> list[DeviceSample]:
    """Every device of the ``mixed`` scenario at ``now`` (MIG instances included)."""
    devices: list[DeviceSample] = []
    for backend in simulated_backends("mixed", clock=lambda: now):
        backend.open()
        devices.extend(backend.sample())
        backend.close()
    return devices


def find(devices: Iterable[DeviceSample], backend: str, index: int, part: int | None = None) -> DeviceSample:
    """The device ``backend``/``index`` (or its ``part``-th partition)."""
    devs = list(devices)
    parent = next(d for d in devs if d.backend == backend and d.index == index and d.parent is None)
    if part is None:
        return parent
    return [d for d in devs if d.parent == parent.id][part]  # by position: MIG devices have no index


def pod(namespace: str, name: str, containers: dict[str, list[tuple[str, list[str]]]]) -> Any:
    """A ``PodResources`` message: container name -> [(resource name, device ids)]."""
    return api_pb2.PodResources(name=name, namespace=namespace, containers=[
        api_pb2.ContainerResources(name=cname, devices=[
            api_pb2.ContainerDevices(resource_name=res, device_ids=ids) for res, ids in groups])
        for cname, groups in containers.items()])


class PodResourcesServer:
    """A real gRPC server implementing the kubelet's pod-resources v1 on a unix socket.

    ``mode`` is ``answer`` (the pods set in :attr:`pods`), ``hang`` (until :meth:`release`)
    or ``garbage`` (bytes that are not a protobuf message).
    """

    def __init__(self) -> None:
        # Unix socket paths are limited to 107 bytes: a short directory, not pytest's tmp_path.
        self.dir = Path(tempfile.mkdtemp(prefix="allsmi-kubelet-"))
        self.socket = self.dir / "kubelet.sock"
        self.pods: list[Any] = []
        self.allocatable: list[Any] = []
        #: GetAllocatableResources answers UNIMPLEMENTED (a kubelet before 1.23's GA)
        self.fail_allocatable = False
        #: GetAllocatableResources hangs (until :meth:`release`) while List answers
        self.hang_allocatable = False
        self.mode = "answer"
        self.calls = 0
        self._release = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "List": grpc.unary_unary_rpc_method_handler(
                self._list, request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
                response_serializer=self._serialize),
            "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(
                self._allocatable, request_deserializer=api_pb2.AllocatableResourcesRequest.FromString,
                response_serializer=self._serialize),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),))
        self.server.add_insecure_port(f"unix:{self.socket}")
        self.server.start()

    @staticmethod
    def _serialize(response: Any) -> bytes:
        return response if isinstance(response, bytes) else response.SerializeToString()

    def _behave(self) -> bytes | None:
        self.calls += 1
        if self.mode == "hang":
            self._release.wait(30)
        if self.mode == "garbage":
            return b"\x0a\x7f\xff\xfe\x00garbage"  # a field 1 of 127 bytes that are not there
        return None

    def _list(self, request: Any, context: Any) -> Any:
        return self._behave() or api_pb2.ListPodResourcesResponse(pod_resources=self.pods)

    def _allocatable(self, request: Any, context: Any) -> Any:
        if self.fail_allocatable:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "GetAllocatableResources")
        if self.hang_allocatable:
            self._release.wait(30)
        return self._behave() or api_pb2.AllocatableResourcesResponse(devices=self.allocatable)

    def hang(self) -> None:
        """Hang every call from now until :meth:`release` (again after an earlier release)."""
        self._release = threading.Event()
        self.mode = "hang"

    def release(self) -> None:
        self._release.set()

    def stop(self) -> None:
        self.release()
        self.server.stop(grace=None)
        shutil.rmtree(self.dir, ignore_errors=True)

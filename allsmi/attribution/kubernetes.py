"""Kubernetes pods from the kubelet's pod-resources gRPC API v1.

``List`` says which device ids of which extended resource each container of
each pod on this node holds; :class:`~allsmi.attribution.matching.DeviceIndex`
turns the ids into allsmi devices, per vendor (``[attribution.resource_names]``
says which resource is whose, and how its ids are written).
``GetAllocatableResources`` (for ``allsmi doctor``) lists what the kubelet can
hand out. grpcio and protobuf come with the ``allsmi[kubernetes]`` extra and
are imported only when a socket exists.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

from allsmi.schema import DeviceSample

from .matching import DeviceIndex
from .model import SourceError, SourceResult, SourceTimeout, SourceUnavailable, Workload
from .runner import REPROBE_SECONDS, AttributionSource
from .settings import DEFAULT_RESOURCE_RULES, AttributionSettings

#: The kubelet answers a few KiB per pod; more than this is not an answer (dcgm-exporter: 16 MiB).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
INSTALL_HINT = "grpcio and protobuf are not installed: pip install 'allsmi[kubernetes]'"


def _grpc() -> tuple[Any, Any, Any]:
    """(grpc, api_pb2, api_pb2_grpc), or :class:`SourceUnavailable` without the extra."""
    try:
        import grpc

        from ._podresources import api_pb2, api_pb2_grpc
    except ImportError as exc:
        raise SourceUnavailable(f"{INSTALL_HINT} ({exc})") from None
    except Exception as exc:  # a protobuf runtime the generated code refuses
        raise SourceUnavailable(f"pod-resources client unusable: {type(exc).__name__}: {exc}; "
                                "pip install 'allsmi[kubernetes]'") from None
    return grpc, api_pb2, api_pb2_grpc


class KubeletSource(AttributionSource):
    """Asks the kubelet which container holds which device."""

    name = "kubernetes"
    #: No socket: asked again after a minute, not every cycle (docs/attribution.md).
    reprobe_seconds = REPROBE_SECONDS

    def __init__(self, socket: Path | str, settings: AttributionSettings | None = None,
                 timeout_seconds: float = 2.0) -> None:
        self.socket = Path(socket)
        self.settings = settings or AttributionSettings(resource_rules=DEFAULT_RESOURCE_RULES)
        self.timeout = timeout_seconds
        self._channel: Any = None
        self._lock = threading.Lock()

    # -- the channel -------------------------------------------------------
    def _stub(self) -> tuple[Any, Any, Any]:
        if not self.socket.exists():
            raise SourceUnavailable(f"no kubelet pod-resources socket at {self.socket}")
        grpc, pb2, pb2_grpc = _grpc()
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(
                    "unix:" + str(self.socket.absolute()),
                    options=[("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
                             ("grpc.enable_retries", 0)])
            channel = self._channel
        return grpc, pb2, pb2_grpc.PodResourcesListerStub(channel)

    def _call(self, method: str, request_type: str) -> Any:
        grpc, pb2, stub = self._stub()
        try:
            return getattr(stub, method)(getattr(pb2, request_type)(), timeout=self.timeout)
        except grpc.RpcError as exc:
            self.close()  # a fresh channel next time (the kubelet may have restarted)
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            name = getattr(code, "name", str(code))
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise SourceTimeout(f"kubelet {method} gave no answer within {self.timeout:g} s") from None
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise SourceError(f"kubelet at {self.socket} does not implement pod-resources v1 "
                                  f"{method} (Kubernetes < 1.20, or the feature gate is off)") from None
            raise SourceError(f"kubelet {method} failed: {name}: {details}") from None
        except ValueError as exc:  # a channel closed under the call
            raise SourceError(f"kubelet {method} aborted: {exc}") from None

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    # -- the source --------------------------------------------------------
    def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
        response = self._call("List", "ListPodResourcesRequest")
        index = DeviceIndex(devices)
        found: dict[str, dict[tuple[str, ...], Workload]] = {}
        unmatched: list[str] = []
        for pod in response.pod_resources:
            for container in pod.containers:
                work = Workload("kubernetes", namespace=pod.namespace, pod=pod.name,
                                container=container.name)
                for group in container.devices:
                    rule = self.settings.rule_for(group.resource_name)
                    if rule is None:
                        continue  # not an accelerator (a NIC, hugepages...)
                    for raw in group.device_ids:
                        targets = index.match(raw, rule.vendor, rule.id_kind)
                        if not targets:
                            unmatched.append(f"{group.resource_name}={raw}")
                        for dev in targets:
                            found.setdefault(dev.id, {}).setdefault(work.key(), work)
        message = ""
        if unmatched:
            message = (f"{len(unmatched)} allocated device id(s) match no device: "
                       f"{', '.join(unmatched[:5])}")
        return SourceResult({dev: tuple(w.values()) for dev, w in found.items()}, {}, message)

    def allocatable(self) -> list[tuple[str, tuple[str, ...]]]:
        """``GetAllocatableResources``: (resource name, device ids) of every accelerator resource.

        Raises :class:`SourceUnavailable` / :class:`SourceError` like :meth:`collect`.
        """
        response = self._call("GetAllocatableResources", "AllocatableResourcesRequest")
        out: dict[str, list[str]] = {}
        for group in response.devices:
            if self.settings.rule_for(group.resource_name) is not None:
                out.setdefault(group.resource_name, []).extend(group.device_ids)
        return [(name, tuple(ids)) for name, ids in sorted(out.items())]

"""Kubernetes pods from the kubelet's pod-resources gRPC API v1.

``List`` says which device ids of which extended resource each container of
each pod on this node holds; :class:`~allsmi.attribution.matching.DeviceIndex`
turns the ids into allsmi devices, per vendor (``[attribution.resource_names]``
says which resource is whose, and how its ids are written).
``GetAllocatableResources`` (for ``allsmi doctor``) lists what the kubelet can
hand out. Devices a container holds through Dynamic Resource Allocation
(``dynamic_resources``) are matched by device name and CDI names, for drivers of a
known vendor's domain (``gpu.nvidia.com``).

Time-slicing (the NVIDIA device plugin's ``sharing.timeSlicing``) hands out replicas of a
device as ids ``<uuid>::<n>``: each replica is a declared ``1/replicas`` share of the device
(``Workload.share``), replicas counted per physical device from ``GetAllocatableResources``
(asked only when replica ids are in use, at most every :data:`ALLOCATABLE_TTL_SECONDS`); a
kubelet that does not answer it falls back to the replicas seen in ``List`` (the highest
``<n>`` + 1), which can only over-state a share when the top replicas are all free. A replica
id that is not among its device's allocatable replicas (or, where none are listed, numbered
:data:`MAX_GUESSED_REPLICAS` or more) is a reported problem (the status message) and gives its pod no share of the device:
one hostile ``::99999999`` cannot shrink the other pods' shares. grpcio and protobuf come with
the ``allsmi[kubernetes]`` extra and are imported only when a socket exists.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from allsmi.schema import DeviceSample

from .model import SourceError, SourceResult, SourceTimeout, SourceUnavailable, Workload
from .runner import REPROBE_SECONDS, AttributionSource
from .settings import AttributionSettings

#: How long the replica counts from GetAllocatableResources are reused (the plugin's
#: configuration changes only when it restarts).
ALLOCATABLE_TTL_SECONDS = 300.0
#: The part of ``timeout_seconds`` kept free after both calls of a cycle (matching the ids, and
#: the hand-over to the runner, which waits ``timeout_seconds`` from before the call began).
DEADLINE_MARGIN = 0.1
#: Without GetAllocatableResources, a replica numbered this or more is out of range.
MAX_GUESSED_REPLICAS = 256
#: The kubelet answers a few KiB per pod; more than this is not an answer (dcgm-exporter: 16 MiB).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: Matching the ids of a List answer looks at the cycle's deadline every this many ids.
CHECK_EVERY = 1024
#: The most of one device id a status message shows.
SHOWN_ID_CHARACTERS = 96
#: With the pip of the interpreter allsmi runs under: a bare ``pip`` may belong to another Python.
INSTALL_COMMAND = f"{sys.executable} -m pip install 'allsmi[kubernetes]'"
INSTALL_HINT = f"grpcio and protobuf are not installed: {INSTALL_COMMAND}"


def _within(deadline: float, read: int, timeout: float) -> None:
    """Raise :class:`SourceTimeout` once ``deadline`` (monotonic) is past: an answer of millions
    of ids (up to :data:`MAX_RESPONSE_BYTES`) never keeps the worker matching them beyond the
    cycle's ``timeout_seconds`` (the source's last answer is carried, as for a slow kubelet)."""
    if time.monotonic() > deadline:
        raise SourceTimeout(f"kubelet List answer: {read} device ids and containers not matched "
                            f"to devices within {timeout:.3g} s; not read")


def _shown(device_id: str) -> str:
    """A device id as a status message names it: a long one cut (it would hide the others)."""
    if len(device_id) <= SHOWN_ID_CHARACTERS:
        return device_id
    return f"{device_id[:SHOWN_ID_CHARACTERS]}\u2026 ({len(device_id)} characters)"


#: The NVIDIA DRA driver's name of a whole GPU: ``gpu-<minor>``, the number of its
#: ``/dev/nvidia<minor>``, which need not be its index (NVML orders GPUs by PCI bus id).
NVIDIA_DRA_GPU = re.compile(r"gpu-[0-9]{1,9}\Z")
#: The most GPU folders (and bytes of each ``information`` file) the minor numbers are read from.
MAX_DRIVER_GPUS = 256
MAX_INFORMATION_BYTES = 16 * 1024


def nvidia_minors(proc_root: Path | str) -> dict[str, str]:
    """``gpu-<minor>`` -> that GPU's uuid, from the NVIDIA driver's
    ``<proc_root>/driver/nvidia/gpus/<bus id>/information`` (``Device Minor:``, ``GPU UUID:``);
    empty where the driver's files are not there (no driver, another machine's ``/proc``)."""
    root = Path(proc_root) / "driver" / "nvidia" / "gpus"
    try:
        names = sorted(os.listdir(root))[:MAX_DRIVER_GPUS]
    except OSError:
        return {}
    from .matching import whole_number
    out: dict[str, str] = {}
    for name in names:
        try:
            with open(root / name / "information", "rb") as file:
                text = file.read(MAX_INFORMATION_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        fields = {key.strip(): value.strip() for key, _, value
                  in (line.partition(":") for line in text.splitlines())}
        minor = whole_number(fields.get("Device Minor", ""))
        if minor is not None and fields.get("GPU UUID"):
            out[f"gpu-{minor}"] = fields["GPU UUID"]
    return out


def _grpc() -> tuple[Any, Any, Any]:
    """(grpc, api_pb2, api_pb2_grpc), or :class:`SourceUnavailable` without the extra."""
    try:
        import grpc

        from ._podresources import api_pb2, api_pb2_grpc
    except ImportError as exc:
        raise SourceUnavailable(f"{INSTALL_HINT} ({exc})") from None
    except Exception as exc:  # a protobuf runtime the generated code refuses
        raise SourceUnavailable(f"pod-resources client unusable: {type(exc).__name__}: {exc}; "
                                f"{INSTALL_COMMAND}") from None
    return grpc, api_pb2, api_pb2_grpc


class KubeletSource(AttributionSource):
    """Asks the kubelet which container holds which device."""

    name = "kubernetes"
    #: No socket: asked again after a minute, not every cycle (docs/attribution.md).
    reprobe_seconds = REPROBE_SECONDS

    def __init__(self, socket: Path | str, settings: AttributionSettings | None = None,
                 timeout_seconds: float = 2.0) -> None:
        self.socket = Path(socket)
        self.settings = settings or AttributionSettings()  # no rules: the CLI passes the backends'
        self.timeout = timeout_seconds
        self._channel: Any = None
        self._lock = threading.Lock()
        #: (resource name, physical id) -> replicas, and when it was asked
        self._replicas: dict[tuple[str, str], set[int]] | None = {}
        self._replicas_at: float | None = None
        #: The kubelet answered once: a socket gone since is a kubelet restarting (it removes
        #: the socket and makes it anew), a failure, not a node without Kubernetes.
        self._answered = False

    # -- the channel -------------------------------------------------------
    def absent(self) -> str | None:
        try:
            mode = os.stat(self.socket).st_mode
        except (OSError, ValueError):  # (also a name the system refuses, such as one too long)
            return f"no kubelet pod-resources socket at {self.socket}"
        if not stat.S_ISSOCK(mode):  # a directory a bind mount of a missing socket leaves
            kind = "a directory" if stat.S_ISDIR(mode) else "not a socket"
            return f"{self.socket} is {kind}, not the kubelet's pod-resources socket"
        return None

    def _stub(self) -> tuple[Any, Any, Any]:
        why = self.absent()
        if why is not None:
            if self._answered:
                self.close()  # a fresh channel to the new kubelet's socket
                raise SourceError(f"{why} (it answered before: the kubelet restarting?)")
            raise SourceUnavailable(why)
        grpc, pb2, pb2_grpc = _grpc()
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(
                    "unix:" + str(self.socket.absolute()),
                    options=[("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
                             ("grpc.enable_retries", 0)])
            channel = self._channel
        return grpc, pb2, pb2_grpc.PodResourcesListerStub(channel)

    def _call(self, method: str, request_type: str, timeout: float | None = None) -> Any:
        grpc, pb2, stub = self._stub()
        timeout = self.timeout if timeout is None else timeout
        try:
            return getattr(stub, method)(getattr(pb2, request_type)(), timeout=timeout)
        except grpc.RpcError as exc:
            self.close()  # a fresh channel next time (the kubelet may have restarted)
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            name = getattr(code, "name", str(code))
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise SourceTimeout(f"kubelet {method} gave no answer within {timeout:.3g} s") from None
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
    def _replica_counts(self, now: float,
                        deadline: float) -> dict[tuple[str, str], set[int]] | None:
        """The allocatable replica numbers per (resource, physical id) from
        GetAllocatableResources, cached; ``None`` when the kubelet does not answer it. The call
        gets only what is left before ``deadline`` (monotonic) of the cycle's one
        ``timeout_seconds``, so that a slow answer never costs the cycle ``List``'s: with
        nothing left it is not made (and asked again next cycle)."""
        if self._replicas_at is not None and 0 <= now - self._replicas_at < ALLOCATABLE_TTL_SECONDS:
            return self._replicas
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        from .matching import split_replica
        counts: dict[tuple[str, str], set[int]] | None = {}
        try:
            for name, ids in self.allocatable(left):
                for raw in ids:
                    base, n = split_replica(raw)
                    if n is not None and counts is not None:
                        counts.setdefault((name, base), set()).add(n)
        except (SourceError, SourceUnavailable):
            counts = None
        self._replicas, self._replicas_at = counts, now
        return counts

    def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
        # Both calls within the runner's one timeout_seconds: GetAllocatableResources gets
        # what List left (docs/attribution.md).
        deadline = time.monotonic() + self.timeout * (1.0 - DEADLINE_MARGIN)
        response = self._call("List", "ListPodResourcesRequest")
        self._answered = True
        # Imported with the kubelet's first answer: a node without one (most) only probes the
        # socket, and the dashboard's memory is held to a budget (0.04 MiB; issue 36).
        from .matching import DeviceIndex, split_replica
        index = DeviceIndex(devices, self.settings.node_names)
        #: (device, workload, the replica held (resource, physical id, number, id) or None)
        claims: list[tuple[DeviceSample, Workload, tuple[str, str, int, str] | None]] = []
        unmatched: list[str] = []  # the first few shown, all counted
        unmatched_count = 0
        minors: dict[str, str] = {}  # the NVIDIA DRA driver's gpu-<minor> names, read once
        read = 0  # ids and containers matched: the deadline is looked at every CHECK_EVERY
        for pod in response.pod_resources:
            for container in pod.containers:
                read += 1
                work = Workload("kubernetes", namespace=pod.namespace, pod=pod.name,
                                container=container.name)
                for group in container.devices:
                    rule = self.settings.rule_for(group.resource_name)
                    if rule is None:
                        continue  # not an accelerator (a NIC, hugepages...)
                    for raw in group.device_ids:
                        read += 1
                        if not read % CHECK_EVERY:
                            _within(deadline, read, self.timeout)
                        targets = index.match(raw, rule.vendor, rule.id_kind)
                        if not targets:
                            unmatched_count += 1
                            if len(unmatched) < 5:
                                unmatched.append(f"{group.resource_name}={_shown(raw)}")
                        base, n = split_replica(raw)
                        replica = None if n is None else (group.resource_name, base, n, raw)
                        claims.extend((dev, work, replica) for dev in targets)
                for name, ids in self._dra_devices(container, minors):
                    targets = next((found for raw in ids
                                    if (found := index.match(raw, name[0], "auto"))), [])
                    if not targets:
                        unmatched_count += 1
                        if len(unmatched) < 5:
                            unmatched.append(f"DRA {name[1]}")
                    claims.extend((dev, work, None) for dev in targets)
                if not read % CHECK_EVERY:
                    _within(deadline, read, self.timeout)
        allocatable = self._replica_counts(now, deadline) if any(c[2] for c in claims) else {}
        # Replicas per (resource, physical id): the allocatable ones, else the highest held + 1.
        seen: dict[tuple[str, str], int] = {}
        bad: list[str] = []
        #: device -> workload key -> (workload, replicas held: [(resource, physical id)] or None)
        found: dict[str, dict[tuple[str, ...], tuple[Workload, list[tuple[str, str]] | None]]] = {}
        for dev, work, replica in claims:
            if replica is not None:
                key, n = replica[:2], replica[2]
                listed = allocatable.get(key) if allocatable else None
                if (n not in listed) if listed else n >= MAX_GUESSED_REPLICAS:
                    within = "the allocatable replicas" if listed else \
                        f"{MAX_GUESSED_REPLICAS} replicas (none listed as allocatable)"
                    bad.append(f"{key[0]}={_shown(replica[3])} ({work.namespace}/"
                               f"{work.pod}; out of {within})")
                    continue  # out of range: no share of the device, the others' unchanged
                seen[key] = max(seen.get(key, 0), n + 1)
            slot = found.setdefault(dev.id, {})
            held, replicas = slot.get(work.key(), (work, []))
            if replicas is not None:
                replicas = replicas + [replica[:2]] if replica is not None \
                    else None  # a whole device: no share
            slot[work.key()] = (held, replicas)
        out: dict[str, tuple[Workload, ...]] = {}
        for dev_id, works in found.items():
            entries = []
            for work, replicas in works.values():
                if replicas:
                    share = sum(1.0 / (len(allocatable[r]) if allocatable and allocatable.get(r)
                                       else seen.get(r, 1)) for r in replicas)
                    work = replace(work, share=min(1.0, share))
                entries.append(work)
            out[dev_id] = tuple(entries)
        problems = []
        if unmatched:
            problems.append(f"{unmatched_count} allocated device id(s) match no device: "
                            f"{', '.join(unmatched)}")
        if bad:
            problems.append(f"{len(bad)} time-slicing replica id(s) out of range, not "
                            f"attributed: {', '.join(bad[:5])}")
        return SourceResult(out, {}, "; ".join(problems))

    def _dra_vendor(self, driver: str) -> str | None:
        """The vendor of a DRA driver (``gpu.nvidia.com``): that of the resource rules whose
        domain is the driver's name or ends it (``nvidia.com/*``); ``None`` for other drivers."""
        labels = driver.lower().split(".")
        for start in range(len(labels) - 1):
            domain = ".".join(labels[start:])
            for rule in self.settings.resource_rules:
                if rule.pattern.lower().split("/", 1)[0] == domain:
                    return rule.vendor
        return None

    def _dra_devices(self, container: Any,
                     minors: dict[str, str]) -> list[tuple[tuple[str, str], list[str]]]:
        """((vendor, driver/pool/device), names to match: the device name, then the CDI device
        names' own parts) of each device that Dynamic Resource Allocation gave ``container``
        (``dynamic_resources``, Kubernetes 1.27+) by a driver of a known vendor. The NVIDIA
        driver's ``gpu-<minor>`` is its GPU's uuid (from the driver's minor numbers, read into
        ``minors`` when first needed), never taken for an index: without it, it names no GPU."""
        out = []
        for claim in getattr(container, "dynamic_resources", ()):
            for res in claim.claim_resources:
                vendor = self._dra_vendor(res.driver_name)
                if vendor is None:
                    continue  # not an accelerator's driver (a NIC...)
                names = [res.device_name] + [c.name.rpartition("=")[2] for c in res.cdi_devices]
                if vendor == "nvidia" and any(NVIDIA_DRA_GPU.match(n) for n in names):
                    if not minors:
                        minors.update(nvidia_minors(self.settings.proc_root))
                        minors.setdefault("", "")  # (read: not again this cycle)
                    names = [minors.get(n, "") if NVIDIA_DRA_GPU.match(n) else n for n in names]
                out.append(((vendor, f"{res.driver_name}/{res.pool_name}/{res.device_name}"),
                            [n for n in names if n]))
        return out

    def allocatable(self, timeout: float | None = None) -> list[tuple[str, tuple[str, ...]]]:
        """``GetAllocatableResources``: (resource name, device ids) of every accelerator resource,
        within ``timeout`` seconds (default ``timeout_seconds``).

        Raises :class:`SourceUnavailable` / :class:`SourceError` like :meth:`collect`.
        """
        response = self._call("GetAllocatableResources", "AllocatableResourcesRequest", timeout)
        out: dict[str, list[str]] = {}
        for group in response.devices:
            if self.settings.rule_for(group.resource_name) is not None:
                out.setdefault(group.resource_name, []).extend(group.device_ids)
        return [(name, tuple(ids)) for name, ids in sorted(out.items())]

"""Honest activity through GPM, GPU Performance Monitoring (Hopper and later).

The headline ``utilization_percent`` (``nvmlDeviceGetUtilizationRates``) is the share of time
*any* kernel ran: one warp on one SM reads 100 %. GPM gives what the silicon did: the share of
SMs busy, warp occupancy, tensor-pipe activity, DRAM bandwidth, PCIe and NVLink traffic.

How it is read (``nvml.h``: ``nvmlGpmSampleAlloc``/``Get``/``Free``, ``nvmlGpmMetricsGet``): each
target (a GPU, or one MIG GPU instance through ``nvmlGpmMigSampleGet``) owns two sample buffers.
Every cycle takes one sample into the spare buffer and asks ``nvmlGpmMetricsGet`` for the metrics
between it and the previous cycle's sample, then the two swap: one sample per target per cycle,
nothing allocated after open (but for a MIG GPU instance listed later, whose targets follow the
layout: :meth:`GpmReader.follow`), both freed on close. The first sample is taken when the backend
opens; NVIDIA asks for samples at least :data:`MIN_INTERVAL_SECONDS` apart, so the first cycle
after open waits out the rest of that (at most 0.1 s, once) and a cycle that comes sooner than that
after the previous one repeats the previous interval's figures instead of sampling.

What is ``None`` and why (each reason is said once per target, in the backend's warnings):

* the driver has no GPM entry points (before R520), or ``nvmlGpmQueryDeviceSupport`` says the
  GPU has none (before Hopper): every activity field, for good;
* a sample call that answers NotSupported or NoPermission: that target, for good;
* any other failure of a call (Timeout, InsufficientResources...): this cycle, and the next
  cycle starts a new interval; GpuIsLost marks the GPU lost as any other call does, and Unknown
  marks it lost for that cycle (as any other call does; at open it only costs the first sample);
* a metric whose own ``nvmlReturn`` is not Success (NotSupported: never asked again), or whose
  value is NaN, infinite or out of range (a percentage outside 0-100, a negative rate): that
  metric, this cycle. Nothing is clamped or guessed.
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from allsmi.backends.nvidia import nvml
from allsmi.backends.nvidia.calls import plain
from allsmi.backends.nvidia.devices import DeviceFault, Gpu, mark_lost
from allsmi.backends.nvidia.nvml import error_code
from allsmi.backends.nvidia.unpack import gpm_layout

#: NVIDIA's minimum distance between the two samples of one interval.
MIN_INTERVAL_SECONDS = 0.1
_MIB = 1024 * 1024
#: The most the first cycle after open waits for its interval.
_MAX_SETTLE_SECONDS = 0.1

#: GPM metric id (``NVML_GPM_METRIC_*``) -> DeviceSample field, and the scale to its unit
#: (``None``: a percentage, 0 to 100; a number: MiB/s to bytes per second).
METRICS: tuple[tuple[int, str, float | None], ...] = (
    (2, "compute_active_percent", None),           # SM_UTIL: share of SMs busy
    (3, "sm_occupancy_percent", None),             # SM_OCCUPANCY: warps over the maximum
    (5, "tensor_active_percent", None),            # ANY_TENSOR_UTIL
    (10, "memory_bandwidth_percent", None),        # DRAM_BW_UTIL
    (20, "pcie_tx_bytes_per_second", _MIB),        # PCIE_TX_PER_SEC, MiB/s
    (21, "pcie_rx_bytes_per_second", _MIB),        # PCIE_RX_PER_SEC, MiB/s
    (60, "interconnect_rx_bytes_per_second", _MIB),  # NVLINK_TOTAL_RX_PER_SEC, MiB/s
    (61, "interconnect_tx_bytes_per_second", _MIB),  # NVLINK_TOTAL_TX_PER_SEC, MiB/s
)
#: The fields GPM fills, all ``None`` where it gives nothing.
FIELDS: tuple[str, ...] = tuple(name for _, name, _ in METRICS)
#: What ``compute_active_percent`` measures when it comes from GPM.
SOURCE = "sm_active"
#: Metric requests kept between reads (see :meth:`GpmReader.borrow`).
KEPT_REQUESTS = 1
#: Codes after which a target is not asked again.
_FOR_GOOD = nvml.NO_VALUE_CODES | {nvml.ERROR_NO_PERMISSION}


@dataclass(eq=False, repr=False)  # never compared or printed: no methods compiled for it
class GpmTarget:
    """One GPU, or one GPU instance of a GPU in MIG mode: its two samples and what it gave."""

    label: str
    gpu_instance_id: int | None = None
    samples: list[Any] = field(default_factory=list)
    """The two allocated buffers: ``[previous, spare]``."""
    taken_at: float | None = None
    """When ``samples[0]`` was taken (monotonic); ``None``: no valid previous sample."""
    intervals: int = 0
    """Intervals computed since open (the first cycle waits for the first one)."""
    last: dict[str, Any] = field(default_factory=dict)
    """The previous interval's fields, repeated by a cycle that comes too soon."""
    metrics: list[tuple[int, str, float | None]] = field(default_factory=lambda: list(METRICS))
    disabled: str | None = None
    said: set[str] = field(default_factory=set)
    """Reasons already put in the warnings (each said once)."""


class MetricsRequest:
    """An ``nvmlGpmMetricsGet`` request (pynvml's layout as a plain ctypes structure: 19 KB with
    nvidia-ml-py 13, room for every metric NVML knows), ``byref`` of it, and the metrics its ids
    are set for. Targets borrow one for a read (:meth:`GpmReader.borrow`) instead of each keeping
    its own: a cycle's reads usually run one after another, so one request serves every GPU."""

    __slots__ = ("struct", "ref", "metrics")

    def __init__(self, pynvml: ModuleType) -> None:
        self.struct = plain(pynvml.c_nvmlGpmMetricsGet_t)()
        self.ref = ctypes.byref(self.struct)
        self.struct.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        self.metrics: list[tuple[int, str, float | None]] = []

    def ask(self, metrics: list[tuple[int, str, float | None]]) -> None:
        """Set the ids and count of ``metrics`` (only where they differ from the last read's)."""
        if metrics != self.metrics:
            self.struct.numMetrics = len(metrics)
            for i, (metric_id, _, _) in enumerate(metrics):
                self.struct.metrics[i].metricId = metric_id
            self.metrics = list(metrics)


class GpmReader:
    """Allocates, reads and frees the GPM samples of every GPU and MIG instance."""

    def __init__(self, pynvml: ModuleType) -> None:
        self.pynvml = pynvml
        self._fn = pynvml._nvmlGetFunctionPointer  # pynvml's lookup, through its cache
        self.targets: list[GpmTarget] = []
        self.requests: list[MetricsRequest] = []
        """Requests not in use, at most :data:`KEPT_REQUESTS` (see :meth:`borrow`)."""
        self._lock = threading.Lock()
        self._closed = False

    # -- open ------------------------------------------------------------------

    def opened(self, gpus: list[Gpu], warnings: list[str]) -> GpmReader:
        """This reader with each GPU's targets (``gpu.gpm``, ``gpu.gpm_instances``), first
        samples taken; the GPUs without GPM are named once per reason in ``warnings``."""
        without: dict[str, list[str]] = {}
        for gpu in gpus:
            if gpu.lost_reason is not None:
                continue
            instances = ([m.gpu_instance_id for m in gpu.migs if m.gpu_instance_id is not None]
                         if gpu.mig_enabled else None)
            try:
                gpu.gpm, gpu.gpm_instances, reason = self.open_gpu(
                    gpu.handle, gpu.label, instances, warnings)
            except DeviceFault as fault:
                mark_lost(gpu, fault)
                continue
            if reason is not None:
                without.setdefault(reason, []).append(gpu.label)
        warnings.extend(f"no compute activity on {', '.join(labels)} ({reason})"
                        for reason, labels in without.items())
        return self

    def open_gpu(self, handle: Any, label: str, gpu_instance_ids: list[int] | None,
                 warnings: list[str]) -> tuple[GpmTarget | None, dict[int, GpmTarget], str | None]:
        """The GPU's target and one per GPU instance (MIG mode), each with its first sample
        taken; or why the GPU has no GPM at all. ``warnings`` gets why a target has none."""
        pynvml = self.pynvml
        reason = self._unsupported(handle)
        if reason is not None:
            return None, {}, reason
        gpu = self._target(GpmTarget(label=label))
        instances: dict[int, GpmTarget] = {}
        for gi in gpu_instance_ids or ():
            if gi not in instances:
                instances[gi] = self._target(GpmTarget(label=f"{label} GPU instance {gi}",
                                                       gpu_instance_id=gi))
        for target in (gpu, *instances.values()):
            if target.disabled is None:
                try:
                    self._take(target, handle, 0)
                    target.taken_at = time.monotonic()
                except pynvml.NVMLError as exc:
                    self._failed(target, exc, warnings, opening=True)
            if target.disabled is not None:  # (said once, however it was found)
                self._say(target, warnings, f"no compute activity ({target.disabled})")
        return gpu, instances, None

    def _unsupported(self, handle: Any) -> str | None:
        pynvml = self.pynvml
        try:
            support = pynvml.nvmlGpmQueryDeviceSupport(handle)
        except AttributeError:
            return "this nvidia-ml-py has no GPM; install nvidia-ml-py 11.525 or later"
        except pynvml.NVMLError as exc:
            if error_code(exc) == nvml.ERROR_FUNCTION_NOT_FOUND:
                return "the driver has no GPM (R520 or later needed)"
            return f"nvmlGpmQueryDeviceSupport: {exc}"
        if not getattr(support, "isSupportedDevice", 0):
            return "GPM not supported on this GPU; it needs Hopper or later"
        return None

    def _target(self, target: GpmTarget) -> GpmTarget:
        pynvml = self.pynvml
        if self._closed:  # (a MIG listing in a read that outlived close(): nothing to free it)
            target.disabled = "the backend was closed"
            return target
        try:
            for _ in range(2):
                target.samples.append(pynvml.nvmlGpmSampleAlloc())
        except pynvml.NVMLError as exc:
            target.disabled = f"nvmlGpmSampleAlloc: {exc}"
        with self._lock:
            self.targets.append(target)
        return target

    def follow(self, gpu: Gpu, kept: set[int], listed: set[int], warnings: list[str]) -> None:
        """After the GPU's MIG instances were listed again (:mod:`.layout`): the target of each
        GPU instance not in ``kept`` (destroyed, perhaps created again under the same id: its
        samples are never diffed against the new one's) is freed, and each instance ``listed``
        without one gets a new one, its first sample taken by its first read (so its activity
        comes from its second). No call on a GPU without GPM."""
        if gpu.gpm is None:
            return
        targets = {gi: t for gi, t in gpu.gpm_instances.items() if gi in kept and gi in listed}
        retired = [t for gi, t in gpu.gpm_instances.items() if targets.get(gi) is not t]
        for gi in sorted(listed - targets.keys()):
            target = targets[gi] = self._target(GpmTarget(label=f"{gpu.label} GPU instance {gi}",
                                                          gpu_instance_id=gi))
            if target.disabled is not None:
                self._say(target, warnings, f"no compute activity ({target.disabled})")
        gpu.gpm_instances = targets  # replaced whole: close() may read the old one meanwhile
        for target in retired:
            self._free(target)

    def _free(self, target: GpmTarget) -> None:
        """Free one target's samples, unless close() took it (and frees it) first."""
        with self._lock:
            if not any(t is target for t in self.targets):
                return
            self.targets = [t for t in self.targets if t is not target]
        self._free_samples(target)

    def _free_samples(self, target: GpmTarget) -> None:
        """Free ``target``'s samples (it keeps none)."""
        samples, target.samples = target.samples, []
        for sample in samples:
            try:
                self.pynvml.nvmlGpmSampleFree(sample)
            except self.pynvml.NVMLError:
                pass  # nothing more can be done with it

    # -- each cycle ------------------------------------------------------------

    def settle(self) -> None:
        """Wait until every target's first sample is :data:`MIN_INTERVAL_SECONDS` old (only
        targets without an interval yet, so only the first cycle after open ever waits)."""
        with self._lock:
            pending = [t.taken_at for t in self.targets
                       if t.disabled is None and t.taken_at is not None and not t.intervals]
        if pending:
            wait = max(pending) + MIN_INTERVAL_SECONDS - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, _MAX_SETTLE_SECONDS))

    def read(self, target: GpmTarget | None, handle: Any, warnings: list[str]) -> dict[str, Any]:
        """The target's activity fields over the interval since its previous sample (empty:
        nothing known). Raises :class:`DeviceFault` when the GPU is lost."""
        if target is None or target.disabled is not None or len(target.samples) != 2:
            return {}
        pynvml = self.pynvml
        now = time.monotonic()
        if target.intervals and target.taken_at is not None \
                and now - target.taken_at < MIN_INTERVAL_SECONDS:
            return dict(target.last)
        try:
            self._take(target, handle, 1)
        except pynvml.NVMLError as exc:
            target.taken_at, target.last = None, {}
            self._failed(target, exc, warnings)
            return {}
        previous_at, target.taken_at = target.taken_at, now
        target.samples.reverse()  # the sample just taken is the previous one of the next cycle
        if previous_at is None:
            return {}  # a new interval starts here
        target.intervals += 1
        target.last = self._metrics(target, target.samples[1], target.samples[0], warnings)
        if not target.metrics:  # every metric NotSupported: stop sampling
            target.disabled = "GPM gives none of the metrics read"
            self._say(target, warnings, f"no compute activity ({target.disabled})")
        return dict(target.last)

    def _take(self, target: GpmTarget, handle: Any, position: int) -> None:
        """``nvmlGpmSampleGet`` (``nvmlGpmMigSampleGet``) into ``samples[position]``: pynvml's
        entry point, called as its wrapper calls it, and its ``NVMLError`` on failure."""
        sample = target.samples[position]
        if target.gpu_instance_id is None:
            ret = self._fn("nvmlGpmSampleGet")(handle, sample)
        else:
            ret = self._fn("nvmlGpmMigSampleGet")(handle, target.gpu_instance_id, sample)
        if ret != nvml.SUCCESS:
            raise self.pynvml.NVMLError(ret)

    def _metrics(self, target: GpmTarget, first: Any, second: Any,
                 warnings: list[str]) -> dict[str, Any]:
        pynvml = self.pynvml
        asked = target.metrics
        if not asked:
            return {}
        request = self.borrow()
        try:
            request.ask(asked)
            struct = request.struct
            struct.sample1, struct.sample2 = first, second
            ret = self._fn("nvmlGpmMetricsGet")(request.ref)
            if ret != nvml.SUCCESS:
                self._failed(target, pynvml.NVMLError(ret), warnings, call="nvmlGpmMetricsGet")
                return {}
            layout = gpm_layout(type(struct), len(asked))
            if layout is not None:
                answers = layout.unpack_from(struct)
                results: Any = zip(answers[0::2], answers[1::2])
            else:
                results = [(m.nvmlReturn, m.value) for m in struct.metrics[:len(asked)]]
        finally:
            self.give_back(request)
        out: dict[str, Any] = {}
        for (metric_id, name, scale), (code, raw) in zip(list(asked), results):
            if code != nvml.SUCCESS:
                if code in nvml.NO_VALUE_CODES:
                    # the next cycle asks for the others only (MetricsRequest.ask)
                    target.metrics.remove((metric_id, name, scale))
                else:
                    self._say(target, warnings, f"GPM metric {metric_id} ({name}) failed: "
                              f"{pynvml.NVMLError(code)}", key=f"metric {metric_id} {code}")
                continue
            value = float(raw)
            if scale is None:
                plausible = 0.0 <= value <= 100.0
            else:
                plausible = math.isfinite(value) and value >= 0.0
                value *= scale
            if not plausible:
                self._say(target, warnings, f"GPM metric {metric_id} ({name}) answered "
                          f"{raw!r}, out of range; reported as unknown",
                          key=f"range {metric_id}")  # said once, whatever the values
                continue
            out[name] = value
        if "compute_active_percent" in out:
            out["compute_active_source"] = SOURCE
        return out

    def borrow(self) -> MetricsRequest:
        """A request for one read, kept or made; hand it back with :meth:`give_back`. One per
        target would hold 19 KB each (eight H100s: 0.15 MiB of the dashboard's memory) for a
        struct that only one read at a time uses while reads run one after another."""
        with self._lock:
            if self.requests:
                return self.requests.pop()
        return MetricsRequest(self.pynvml)

    def give_back(self, request: MetricsRequest) -> None:
        """Keep ``request`` for the next read, unless :data:`KEPT_REQUESTS` are kept already
        (reads that ran in parallel, on a slow library, made the others)."""
        with self._lock:
            if len(self.requests) < KEPT_REQUESTS:
                self.requests.append(request)

    def _failed(self, target: GpmTarget, exc: BaseException, warnings: list[str],
                call: str = "GPM sample", opening: bool = False) -> None:
        """Sort a failed call: GpuIsLost, and in a cycle Unknown, are the GPU's (as any other
        call's: :class:`DeviceFault`); at open, Unknown only costs this first sample."""
        code = error_code(exc)
        if code == nvml.ERROR_GPU_IS_LOST or (code in nvml.DEVICE_FAULT_CODES and not opening):
            raise DeviceFault(code, f"{call}: {exc}")
        if code in _FOR_GOOD:
            target.disabled = f"{call}: {exc}"
            self._say(target, warnings, f"no compute activity ({target.disabled})")
        else:
            self._say(target, warnings, f"{call} failed: {exc}; activity unknown this cycle")

    @staticmethod
    def _say(target: GpmTarget, warnings: list[str], message: str, key: str = "") -> None:
        """``message`` in the warnings the first time its ``key`` (else itself) comes up."""
        if (key or message) not in target.said:
            target.said.add(key or message)
            warnings.append(f"{target.label}: {message}")

    # -- close -----------------------------------------------------------------

    def close(self, gpus: list[Gpu]) -> None:
        """Free every sample, except those of a GPU whose read is still running in a stuck
        driver call (freeing under it could crash the process; those are left, not reused)."""
        busy = {id(t) for gpu in gpus if gpu.pending is not None and not gpu.pending.done()
                for t in (gpu.gpm, *gpu.gpm_instances.values()) if t is not None}
        with self._lock:
            targets, self.targets, self._closed = self.targets, [], True
        for target in targets:
            if id(target) not in busy:
                self._free_samples(target)

"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

Static facts (name, uuid, bus id, index, driver and VBIOS version, ECC mode,
the MIG layout) are read once in :meth:`NvidiaBackend.open`. Each
:meth:`NvidiaBackend.sample` then makes at most ten library calls per GPU on
the default path, and the GPUs are read concurrently on a small thread pool
(ctypes releases the GIL during a library call, and NVML is thread-safe):

==  ============================================  =================================
 1  ``nvmlDeviceGetUtilizationRates``             utilization, memory activity
 2  ``nvmlDeviceGetMemoryInfo_v2`` (v1 fallback)  memory used (without reserved), total
 3  ``nvmlDeviceGetTemperatureV`` (or ``...Temperature``)  GPU temperature
 4  ``nvmlDeviceGetFieldValues``                  power, enforced limit, energy, ECC
 5  ``nvmlDeviceGetClockInfo(SM)``                SM clock
 6  ``nvmlDeviceGetFanSpeed``                     fan
 7  ``nvmlDeviceGetPerformanceState``             P-state
 8  ``nvmlDeviceGetCurrentClocksEventReasons``    clock-event (throttle) reasons
 9  ``nvmlDeviceGetComputeRunningProcesses_v3``   compute processes
10  ``nvmlDeviceGetGraphicsRunningProcesses_v3``  graphics processes
==  ============================================  =================================

The field-value batch asks for ``NVML_FI_DEV_POWER_AVERAGE`` (what
``nvmlDeviceGetPowerUsage`` returns on Ampere and newer, except GA100),
``NVML_FI_DEV_POWER_INSTANT`` (what it returns on older parts),
``NVML_FI_DEV_POWER_CURRENT_LIMIT`` (the enforced limit),
``NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` and, where ECC is on, the four ECC
totals. A field the driver does not know falls back to the dedicated call
(``nvmlDeviceGetPowerUsage``, ``nvmlDeviceGetEnforcedPowerLimit``,
``nvmlDeviceGetTotalEnergyConsumption``).

A call that answers NotSupported (or FunctionNotFound) gives ``None`` and is
never asked again for that device. GpuIsLost marks that one device ``lost``
for good; Unknown marks it ``lost`` for this cycle only. See
``docs/backends/nvidia.md``.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

from allsmi.backend_api import Backend, BackendError, BackendUnavailable, ProbeResult
from allsmi.backends import _nvml
from allsmi.backends._nvml import NvmlAbsent, NvmlBroken, RawProcess, error_code
from allsmi.schema import DetailValue, DeviceSample, ProcessSample
from allsmi.units import milli_to_unit, parse_percent, reject_sentinel

#: NVML field ids (``nvml.h``) read in the per-cycle batch.
FI_ECC_SBE_VOL_TOTAL = 3
FI_ECC_DBE_VOL_TOTAL = 4
FI_ECC_SBE_AGG_TOTAL = 5
FI_ECC_DBE_AGG_TOTAL = 6
FI_TOTAL_ENERGY_CONSUMPTION = 83
FI_POWER_AVERAGE = 185
FI_POWER_INSTANT = 186
FI_POWER_CURRENT_LIMIT = 190

_ECC_FIELDS: dict[int, str] = {
    FI_ECC_SBE_VOL_TOTAL: "ecc_corrected_volatile",
    FI_ECC_DBE_VOL_TOTAL: "ecc_uncorrected_volatile",
    FI_ECC_SBE_AGG_TOTAL: "ecc_corrected_aggregate",
    FI_ECC_DBE_AGG_TOTAL: "ecc_uncorrected_aggregate",
}

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_ENABLE = 1
NVML_PSTATE_UNKNOWN = 32

#: Clock-event (throttle) reason bits; the same under the old "throttle" names.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

DEFAULT_WORKERS = 8
_PROCESS_CAPACITY = 16

#: ``pid -> (user, command)``; either is ``None`` where it cannot be read.
ProcessOwner = Callable[[int], "tuple[str | None, str | None]"]


class _DeviceFault(Exception):
    """A device-level NVML failure (GpuIsLost, Unknown) inside one device's read."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Mig:
    """One MIG instance: static facts from open() and its own skip set."""

    slot: int
    handle: Any
    label: str
    uuid: str | None = None
    name: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    skip: set[str] = field(default_factory=set)


@dataclass
class _Gpu:
    """One physical GPU: handle, static facts and what not to ask again."""

    index: int
    label: str
    handle: Any = None
    uuid: str | None = None
    name: str | None = None
    bus_id: str | None = None
    vbios: str | None = None
    ecc_enabled: bool | None = None
    mig_enabled: bool | None = None
    migs: list[_Mig] = field(default_factory=list)
    skip: set[str] = field(default_factory=set)
    fields: list[int] = field(default_factory=list)
    lost_reason: str | None = None
    process_capacity: dict[str, int] = field(
        default_factory=lambda: {"Compute": _PROCESS_CAPACITY, "Graphics": _PROCESS_CAPACITY})
    pending: Future[tuple[list[DeviceSample], list[str]]] | None = None

    @property
    def id(self) -> str:
        """The uuid; where NVML could not give one, a vendor-qualified bus id or index."""
        if self.uuid:
            return self.uuid
        if self.bus_id:
            return f"nvidia:{self.bus_id}"
        return f"nvidia:index-{self.index}"


class _Reader:
    """Makes one device's calls for one cycle and sorts NVML errors.

    NotSupported, FunctionNotFound and NoPermission give ``None`` and put the
    call into the target's skip set, so it costs nothing in later cycles.
    GpuIsLost and Unknown raise :class:`_DeviceFault`. Anything else (a
    timeout, NotFound) gives ``None`` for this cycle and a warning.
    """

    def __init__(self, pynvml: ModuleType, label: str) -> None:
        self.pynvml = pynvml
        self.label = label
        self.warnings: list[str] = []

    def call(self, skip: set[str], key: str, fn: Callable[..., Any], *args: Any) -> Any:
        if key in skip:
            return None
        try:
            return fn(*args)
        except self.pynvml.NVMLError as exc:
            self.failed(skip, key, exc)
            return None

    def failed(self, skip: set[str], key: str, exc: BaseException) -> None:
        code = error_code(exc)
        if code in _nvml.NO_VALUE_CODES:
            skip.add(key)
        elif code in _nvml.DEVICE_FAULT_CODES:
            raise _DeviceFault(code, f"{key}: {exc}")
        elif code == _nvml.ERROR_NO_PERMISSION:
            skip.add(key)
            self.warnings.append(
                f"{self.label}: {key} needs more privilege (NVML NoPermission); reported as unknown")
        else:
            self.warnings.append(f"{self.label}: {key} failed: {exc}")


class _ProcessOwners:
    """User and command line of a pid through psutil, cached per process start time."""

    _MAX_ENTRIES = 4096

    def __init__(self) -> None:
        self._cache: dict[int, tuple[float, str | None, str | None]] = {}
        self._lock = threading.Lock()

    def __call__(self, pid: int) -> tuple[str | None, str | None]:
        import psutil

        try:
            proc = psutil.Process(pid)
            started = proc.create_time()
        except (psutil.Error, OSError, ValueError):
            return None, None
        with self._lock:
            cached = self._cache.get(pid)
        if cached is not None and cached[0] == started:
            return cached[1], cached[2]
        try:
            user: str | None = proc.username()
        except (psutil.Error, OSError, KeyError):
            user = None
        try:
            command: str | None = " ".join(proc.cmdline()) or proc.name()
        except (psutil.Error, OSError):
            command = None
        with self._lock:
            if len(self._cache) >= self._MAX_ENTRIES:
                self._cache.clear()
            self._cache[pid] = (started, user, command)
        return user, command


class NvidiaBackend(Backend):
    """NVIDIA GPUs and their MIG instances, read through NVML.

    Options (``[backends.nvidia]``): ``workers`` (threads reading GPUs
    concurrently, default 8), ``processes`` (list processes, default true),
    ``pcie_throughput`` (also read PCIe TX/RX, which samples a 20 ms window
    per direction; default false).
    """

    name = "nvidia"
    vendor = "nvidia"
    kind = "gpu"

    def __init__(self, *, timeout_seconds: float = 5.0,
                 options: Mapping[str, Any] | None = None,
                 process_owner: ProcessOwner | None = None) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._process_owner: ProcessOwner = process_owner or _ProcessOwners()
        self._pynvml: ModuleType | None = None
        self._gpus: list[_Gpu] | None = None
        self._driver_version: str | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._process_reader: _nvml.ProcessListReader | None = None
        self._open_warnings: list[str] = []
        # What the installed driver offers; flipped off on FunctionNotFound.
        self._memory_v2 = True
        self._temperature_v = True
        self._event_reasons = True

    # -- life cycle --------------------------------------------------------

    def probe(self) -> ProbeResult:
        """Whether NVML loads and sees a GPU. Never raises.

        NVML stays initialised afterwards: it is initialised once per process
        and shared by every instance (see :func:`allsmi.backends._nvml.ensure_init`).
        """
        details: dict[str, str] = {}
        try:
            details["nvidia-ml-py"] = metadata.version("nvidia-ml-py")
        except metadata.PackageNotFoundError:
            pass
        try:
            pynvml = _nvml.ensure_init()
        except (NvmlAbsent, NvmlBroken) as exc:
            return ProbeResult(False, str(exc), details)
        except Exception as exc:  # probe never raises, whatever the bindings do
            return ProbeResult(False, f"NVML probe failed: {exc!r}", details)
        try:
            count = pynvml.nvmlDeviceGetCount()
            for key, fn in (("driver_version", pynvml.nvmlSystemGetDriverVersion),
                            ("nvml_version", pynvml.nvmlSystemGetNVMLVersion)):
                try:
                    value = _nvml.text(fn())
                except pynvml.NVMLError:
                    value = None
                if value:
                    details[key] = value
        except pynvml.NVMLError as exc:
            _, message = _nvml.describe_init_failure(exc)
            return ProbeResult(False, f"nvmlDeviceGetCount: {message}", details)
        except Exception as exc:  # probe never raises, whatever the library does
            return ProbeResult(False, f"NVML probe failed: {exc!r}", details)
        details["gpus"] = str(count)
        if count == 0:
            return ProbeResult(False, "NVML found no NVIDIA GPU", details)
        return ProbeResult(True, "", details)

    def open(self) -> None:
        """Initialise NVML (once per process), enumerate GPUs and read static facts."""
        try:
            pynvml = _nvml.ensure_init()
        except NvmlAbsent as exc:
            raise BackendUnavailable(str(exc)) from exc
        except NvmlBroken as exc:
            raise BackendError(str(exc)) from exc
        except Exception as exc:
            raise BackendError(f"initialising NVML failed: {exc!r}") from exc
        self._pynvml = pynvml
        self._memory_v2 = hasattr(pynvml, "nvmlMemory_v2")
        self._temperature_v = hasattr(pynvml, "nvmlDeviceGetTemperatureV")
        self._event_reasons = hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            absent, message = _nvml.describe_init_failure(exc)
            raise (BackendUnavailable if absent else BackendError)(
                f"nvmlDeviceGetCount: {message}") from exc
        try:
            self._driver_version = _nvml.text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self._driver_version = None
        self._process_reader = _nvml.ProcessListReader(pynvml)
        self._open_warnings = []
        self._gpus = [self._open_gpu(index) for index in range(count)]
        workers = min(count, self._workers())
        self._pool = (ThreadPoolExecutor(max_workers=workers, thread_name_prefix="allsmi-nvml")
                      if workers > 1 else None)

    def close(self) -> None:
        """Drop the handles and the thread pool. NVML itself stays initialised for the process."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self._gpus = None

    def sample(self) -> Sequence[DeviceSample]:
        """Every GPU, each followed by its MIG instances."""
        self.warnings = list(self._open_warnings)
        self._open_warnings = []
        gpus = self._gpus
        if gpus is None:
            raise BackendError("the NVIDIA backend was not opened")
        if self._pool is None:
            results = [self._read_gpu(gpu) for gpu in gpus]
        else:
            results = self._read_concurrently(gpus, self._pool)
        samples: list[DeviceSample] = []
        for devices, warnings in results:
            samples.extend(devices)
            self.warnings.extend(warnings)
        return samples

    # -- open ----------------------------------------------------------------

    def _workers(self) -> int:
        value = self.options.get("workers", DEFAULT_WORKERS)
        try:
            return max(1, int(value))
        except (TypeError, ValueError):
            self._open_warnings.append(f"option workers={value!r} is not a number; using "
                                       f"{DEFAULT_WORKERS}")
            return DEFAULT_WORKERS

    def _open_gpu(self, index: int) -> _Gpu:
        pynvml = self._nvml()
        gpu = _Gpu(index=index, label=f"GPU {index}")
        reader = _Reader(pynvml, gpu.label)
        try:
            try:
                gpu.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as exc:
                gpu.lost_reason = f"no handle: {exc}"
                self._open_warnings.append(f"{gpu.label}: cannot open ({exc})")
                return gpu
            handle, skip = gpu.handle, gpu.skip
            gpu.uuid = _nvml.text(reader.call(skip, "uuid", pynvml.nvmlDeviceGetUUID, handle))
            gpu.name = _nvml.text(reader.call(skip, "name", pynvml.nvmlDeviceGetName, handle))
            pci = reader.call(skip, "pci_info", pynvml.nvmlDeviceGetPciInfo, handle)
            gpu.bus_id = _nvml.text(getattr(pci, "busId", None)) if pci is not None else None
            nvml_index = reader.call(skip, "index", pynvml.nvmlDeviceGetIndex, handle)
            if isinstance(nvml_index, int) and nvml_index >= 0:
                gpu.index = nvml_index
            gpu.vbios = _nvml.text(
                reader.call(skip, "vbios", pynvml.nvmlDeviceGetVbiosVersion, handle))
            # ECC mode changes only across a GPU reset, so it is static here.
            ecc = reader.call(skip, "ecc_mode", pynvml.nvmlDeviceGetEccMode, handle)
            gpu.ecc_enabled = None if ecc is None else ecc[0] == NVML_FEATURE_ENABLED
            mig = reader.call(skip, "mig_mode", pynvml.nvmlDeviceGetMigMode, handle)
            gpu.mig_enabled = None if mig is None else mig[0] == NVML_DEVICE_MIG_ENABLE
            if gpu.mig_enabled:
                gpu.migs = self._open_migs(gpu, reader)
        except _DeviceFault as fault:
            self._mark_lost(gpu, fault)
        gpu.fields = [FI_POWER_AVERAGE, FI_POWER_INSTANT, FI_POWER_CURRENT_LIMIT,
                      FI_TOTAL_ENERGY_CONSUMPTION]
        if gpu.ecc_enabled:
            gpu.fields.extend(_ECC_FIELDS)
        self._open_warnings.extend(reader.warnings)
        return gpu

    def _open_migs(self, gpu: _Gpu, reader: _Reader) -> list[_Mig]:
        pynvml = self._nvml()
        slots = reader.call(gpu.skip, "mig_count", pynvml.nvmlDeviceGetMaxMigDeviceCount,
                            gpu.handle) or 0
        migs: list[_Mig] = []
        for slot in range(slots):
            try:
                handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
            except pynvml.NVMLError as exc:
                if error_code(exc) in _nvml.DEVICE_FAULT_CODES:
                    raise _DeviceFault(error_code(exc), f"MIG slot {slot}: {exc}") from exc
                # NotFound / InvalidArgument: an empty slot; later slots may be used
                continue
            mig = _Mig(slot=slot, handle=handle, label=f"{gpu.label} MIG {slot}")
            mig.uuid = _nvml.text(reader.call(mig.skip, "uuid", pynvml.nvmlDeviceGetUUID, handle))
            mig.name = _nvml.text(reader.call(mig.skip, "name", pynvml.nvmlDeviceGetName, handle))
            gi = reader.call(mig.skip, "gpu_instance_id", pynvml.nvmlDeviceGetGpuInstanceId, handle)
            ci = reader.call(mig.skip, "compute_instance_id",
                             pynvml.nvmlDeviceGetComputeInstanceId, handle)
            mig.gpu_instance_id = gi if isinstance(gi, int) else None
            mig.compute_instance_id = ci if isinstance(ci, int) else None
            migs.append(mig)
        return migs

    def _nvml(self) -> ModuleType:
        if self._pynvml is None:
            raise BackendError("the NVIDIA backend was not opened")
        return self._pynvml

    # -- sample ----------------------------------------------------------------

    def _read_concurrently(self, gpus: list[_Gpu], pool: ThreadPoolExecutor
                           ) -> list[tuple[list[DeviceSample], list[str]]]:
        for gpu in gpus:
            # a read still stuck in the driver from an earlier cycle is not stacked up
            if gpu.pending is None:
                gpu.pending = pool.submit(self._read_gpu, gpu)
        wait([g.pending for g in gpus if g.pending is not None], timeout=self.timeout_seconds)
        results = []
        for gpu in gpus:
            pending = gpu.pending
            if pending is not None and pending.done():
                gpu.pending = None
                results.append(pending.result())
            else:
                results.append(self._unanswered(gpu))
        return results

    def _unanswered(self, gpu: _Gpu) -> tuple[list[DeviceSample], list[str]]:
        message = f"{gpu.label}: NVML did not answer within {self.timeout_seconds:g} s"
        devices = [self._device(gpu, health="unknown", details={"error": message})]
        devices.extend(self._mig_device(gpu, mig, health="unknown") for mig in gpu.migs)
        return devices, [message]

    def _read_gpu(self, gpu: _Gpu) -> tuple[list[DeviceSample], list[str]]:
        """One GPU and its MIG instances; never raises."""
        pynvml = self._nvml()
        reader = _Reader(pynvml, gpu.label)
        if gpu.lost_reason is None:
            try:
                return self._read_gpu_values(gpu, reader), reader.warnings
            except _DeviceFault as fault:
                self._mark_lost(gpu, fault)
                reason = str(fault)
            except Exception as exc:  # one device's surprise never drops the others
                reader.warnings.append(f"{gpu.label}: unexpected failure: {exc!r}")
                return ([self._device(gpu, health="unknown", details={"error": repr(exc)})]
                        + [self._mig_device(gpu, m, health="unknown") for m in gpu.migs],
                        reader.warnings)
        else:
            reason = gpu.lost_reason
        devices = [self._device(gpu, health="lost", details={"error": reason})]
        devices.extend(self._mig_device(gpu, mig, health="lost") for mig in gpu.migs)
        return devices, reader.warnings

    @staticmethod
    def _mark_lost(gpu: _Gpu, fault: _DeviceFault) -> None:
        # GpuIsLost stays lost until the backend is reopened; Unknown may pass.
        if fault.code == _nvml.ERROR_GPU_IS_LOST:
            gpu.lost_reason = str(fault)

    def _read_gpu_values(self, gpu: _Gpu, r: _Reader) -> list[DeviceSample]:
        pynvml = self._nvml()
        handle, skip = gpu.handle, gpu.skip
        details: dict[str, DetailValue] = {}
        if gpu.mig_enabled is not None:
            details["mig_mode"] = gpu.mig_enabled

        util = r.call(skip, "utilization", pynvml.nvmlDeviceGetUtilizationRates, handle)
        utilization = parse_percent(reject_sentinel(util.gpu)) if util is not None else None
        if util is not None:
            details["memory_activity_percent"] = parse_percent(reject_sentinel(util.memory))

        used, total, reserved, version = self._memory(r, skip, handle)
        if reserved is not None:
            details["memory_reserved_bytes"] = reserved
        if version is not None:
            details["memory_info_version"] = version

        temperature = self._temperature(r, skip, handle)
        fields = self._field_values(r, gpu)

        power_mw = fields.get(FI_POWER_AVERAGE, fields.get(FI_POWER_INSTANT))
        if (power_mw is None and FI_POWER_AVERAGE not in gpu.fields
                and FI_POWER_INSTANT not in gpu.fields):
            power_mw = r.call(skip, "power_usage", pynvml.nvmlDeviceGetPowerUsage, handle)
        limit_mw = fields.get(FI_POWER_CURRENT_LIMIT)
        if limit_mw is None and FI_POWER_CURRENT_LIMIT not in gpu.fields:
            limit_mw = r.call(skip, "enforced_power_limit",
                              pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        energy_mj = fields.get(FI_TOTAL_ENERGY_CONSUMPTION)
        if energy_mj is None and FI_TOTAL_ENERGY_CONSUMPTION not in gpu.fields:
            energy_mj = r.call(skip, "total_energy",
                               pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        for fid, key in _ECC_FIELDS.items():
            if fid in fields:
                details[key] = int(fields[fid])

        clock = _number(r.call(skip, "clock_sm", pynvml.nvmlDeviceGetClockInfo, handle,
                               NVML_CLOCK_SM))
        fan = _number(r.call(skip, "fan_speed", pynvml.nvmlDeviceGetFanSpeed, handle))
        if fan is not None and fan > 100.0:
            # NVML allows a fan to run above its nominal maximum
            details["fan_speed_raw_percent"] = fan
            fan = 100.0

        pstate = r.call(skip, "performance_state", pynvml.nvmlDeviceGetPerformanceState, handle)
        if isinstance(pstate, int) and 0 <= pstate < NVML_PSTATE_UNKNOWN:
            details["pstate"] = f"P{pstate}"
        reasons = self._clock_event_reasons(r, skip, handle)
        if reasons is not None:
            details["clocks_event_reasons_mask"] = reasons
            details["clocks_event_reasons"] = tuple(
                name for bit, name in CLOCK_EVENT_REASONS if reasons & bit)

        if self.options.get("pcie_throughput", False):
            for key, counter in (("pcie_tx", NVML_PCIE_UTIL_TX_BYTES),
                                 ("pcie_rx", NVML_PCIE_UTIL_RX_BYTES)):
                value = _number(r.call(skip, key, pynvml.nvmlDeviceGetPcieThroughput,
                                       handle, counter))
                if value is not None:
                    details[f"{key}_kilobytes_per_second"] = value

        own, per_mig = self._processes(r, gpu)
        devices = [self._device(
            gpu, health="ok", details=details,
            utilization_percent=utilization,
            memory_used_bytes=used, memory_total_bytes=total,
            temperature_celsius=temperature,
            power_watts=milli_to_unit(_number(power_mw)),
            power_limit_watts=milli_to_unit(_number(limit_mw)),
            energy_joules=milli_to_unit(_number(energy_mj)),
            clock_mhz=clock, fan_percent=fan, processes=own)]
        for mig in gpu.migs:
            mig_used, mig_total, mig_reserved, _ = self._memory(r, mig.skip, mig.handle)
            mig_details: dict[str, DetailValue] = {}
            if mig_reserved is not None:
                mig_details["memory_reserved_bytes"] = mig_reserved
            devices.append(self._mig_device(
                gpu, mig, health="ok", details=mig_details,
                memory_used_bytes=mig_used, memory_total_bytes=mig_total,
                processes=None if own is None else per_mig.get(mig.slot, ())))
        return devices

    def _memory(self, r: _Reader, skip: set[str], handle: Any
                ) -> tuple[int | None, int | None, int | None, int | None]:
        """``(used, total, reserved, version)`` in bytes; v2 where the driver has it."""
        pynvml = self._nvml()
        if "memory" in skip:
            return None, None, None, None
        info = None
        version = None
        if self._memory_v2:
            try:
                info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                version = 2
            except pynvml.NVMLError as exc:
                if error_code(exc) in (_nvml.ERROR_FUNCTION_NOT_FOUND,
                                       _nvml.ERROR_ARGUMENT_VERSION_MISMATCH):
                    self._memory_v2 = False  # the driver predates the v2 call
                else:
                    r.failed(skip, "memory", exc)
                    return None, None, None, None
        if info is None:
            info = r.call(skip, "memory", pynvml.nvmlDeviceGetMemoryInfo, handle)
            version = 1 if info is not None else None
        if info is None:
            return None, None, None, None
        total = int(info.total)
        used = int(info.used)
        reserved = int(info.reserved) if version == 2 else None
        if total <= 0:
            # unified-memory parts (GB10) report no dedicated memory
            return None, None, None, version
        if used > total:
            r.warnings.append(f"{r.label}: NVML memory used {used} exceeds total {total}")
            return None, total, reserved, version
        return used, total, reserved, version

    def _temperature(self, r: _Reader, skip: set[str], handle: Any) -> float | None:
        pynvml = self._nvml()
        if "temperature" in skip:
            return None
        value = None
        if self._temperature_v:
            try:
                value = pynvml.nvmlDeviceGetTemperatureV(handle, NVML_TEMPERATURE_GPU)
            except pynvml.NVMLError as exc:
                if error_code(exc) in (_nvml.ERROR_FUNCTION_NOT_FOUND,
                                       _nvml.ERROR_ARGUMENT_VERSION_MISMATCH):
                    self._temperature_v = False  # the driver predates TemperatureV
                else:
                    r.failed(skip, "temperature", exc)
                    return None
        if value is None and not self._temperature_v:
            value = r.call(skip, "temperature", pynvml.nvmlDeviceGetTemperature, handle,
                           NVML_TEMPERATURE_GPU)
        return _number(reject_sentinel(value))

    def _clock_event_reasons(self, r: _Reader, skip: set[str], handle: Any) -> int | None:
        pynvml = self._nvml()
        if "clock_event_reasons" in skip:
            return None
        if self._event_reasons:
            try:
                return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
            except pynvml.NVMLError as exc:
                if error_code(exc) != _nvml.ERROR_FUNCTION_NOT_FOUND:
                    r.failed(skip, "clock_event_reasons", exc)
                    return None
                self._event_reasons = False  # older driver: the "throttle" name
        value = r.call(skip, "clock_event_reasons",
                       pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
        return int(value) if value is not None else None

    def _field_values(self, r: _Reader, gpu: _Gpu) -> dict[int, int | float]:
        """The batched fields that answered; unsupported ones leave ``gpu.fields`` for good."""
        pynvml = self._nvml()
        asked = list(gpu.fields)
        if not asked:
            return {}
        entries = r.call(gpu.skip, "field_values", pynvml.nvmlDeviceGetFieldValues,
                         gpu.handle, asked)
        if entries is None:
            if "field_values" in gpu.skip:
                gpu.fields.clear()  # no batch call at all: the dedicated calls take over
            return {}
        values: dict[int, int | float] = {}
        for position, fid in enumerate(asked):
            entry = entries[position]
            ret = int(entry.nvmlReturn)
            if ret == _nvml.SUCCESS:
                value = _nvml.field_value(entry)
                if value is not None:
                    values[fid] = value
            elif ret in (_nvml.ERROR_NOT_SUPPORTED, _nvml.ERROR_INVALID_ARGUMENT,
                         _nvml.ERROR_FUNCTION_NOT_FOUND):
                # INVALID_ARGUMENT: a field id newer than the driver
                gpu.fields.remove(fid)
            elif ret in _nvml.DEVICE_FAULT_CODES:
                raise _DeviceFault(ret, f"field {fid}: {pynvml.NVMLError(ret)}")
            elif ret == _nvml.ERROR_NO_PERMISSION:
                gpu.fields.remove(fid)
                r.warnings.append(f"{r.label}: NVML field {fid} needs more privilege "
                                  "(NoPermission); reported as unknown")
            else:
                r.warnings.append(f"{r.label}: NVML field {fid} failed: "
                                  f"{pynvml.NVMLError(ret)}")
        if FI_POWER_AVERAGE in values and FI_POWER_INSTANT in gpu.fields:
            gpu.fields.remove(FI_POWER_INSTANT)  # the average is what nvidia-smi shows
        return values

    def _processes(self, r: _Reader, gpu: _Gpu
                   ) -> tuple[tuple[ProcessSample, ...] | None, dict[int, tuple[ProcessSample, ...]]]:
        """The GPU's own processes, and those inside each MIG instance (by slot).

        ``None`` when no list could be read (disabled, unsupported, no permission):
        who uses the GPU is then unknown, not "nobody".
        """
        if not self.options.get("processes", True) or self._process_reader is None:
            return None, {}
        merged: dict[int, RawProcess] = {}
        listed_any = False
        for kind in ("Compute", "Graphics"):
            listed = r.call(gpu.skip, f"{kind.lower()}_processes", self._process_reader.read,
                            gpu.handle, kind, gpu.process_capacity[kind])
            if listed is None:
                continue
            listed_any = True
            gpu.process_capacity[kind] = max(_PROCESS_CAPACITY, len(listed) * 2 + 5)
            for proc in listed:
                if proc.pid <= 0:
                    r.warnings.append(f"{r.label}: NVML listed an invalid pid {proc.pid}")
                    continue
                merged[proc.pid] = _merge_process(merged.get(proc.pid), proc)
        if not listed_any:
            return None, {}
        own: list[ProcessSample] = []
        per_mig: dict[int, list[ProcessSample]] = {}
        for proc in sorted(merged.values(), key=lambda p: p.pid):
            user, command = self._process_owner(proc.pid)
            sample = ProcessSample(pid=proc.pid, user=user, command=command,
                                   memory_bytes=proc.memory_bytes)
            mig = _owning_mig(gpu.migs, proc)
            if mig is None:
                own.append(sample)
            else:
                per_mig.setdefault(mig.slot, []).append(sample)
        return tuple(own), {slot: tuple(procs) for slot, procs in per_mig.items()}

    # -- building samples --------------------------------------------------------

    def _device(self, gpu: _Gpu, *, health: str,
                details: Mapping[str, DetailValue] | None = None, **values: Any) -> DeviceSample:
        return DeviceSample(
            id=gpu.id, vendor=self.vendor, kind=self.kind, backend=self.name,
            index=gpu.index, uuid=gpu.uuid, name=gpu.name, bus_id=gpu.bus_id,
            driver_version=self._driver_version, firmware_version=gpu.vbios,
            health=health, details=dict(details or {}), **values)

    def _mig_device(self, gpu: _Gpu, mig: _Mig, *, health: str,
                    details: Mapping[str, DetailValue] | None = None,
                    **values: Any) -> DeviceSample:
        extra: dict[str, DetailValue] = {"mig_slot": mig.slot,
                                         "gpu_instance_id": mig.gpu_instance_id,
                                         "compute_instance_id": mig.compute_instance_id}
        extra.update(details or {})
        return DeviceSample(
            id=mig.uuid or f"{gpu.id}/mig-{mig.slot}", vendor=self.vendor, kind=self.kind,
            backend=self.name, index=None, uuid=mig.uuid, name=mig.name, bus_id=gpu.bus_id,
            driver_version=self._driver_version, firmware_version=gpu.vbios,
            parent=gpu.id, health=health, details=extra, **values)


def _number(value: object) -> float | None:
    """A float from an NVML integer, ``None`` for None or an all-ones sentinel."""
    value = reject_sentinel(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _merge_process(old: RawProcess | None, new: RawProcess) -> RawProcess:
    """One entry per pid when a process is in both the compute and graphics lists."""
    if old is None:
        return new
    memories = [m for m in (old.memory_bytes, new.memory_bytes) if m is not None]
    return RawProcess(
        pid=old.pid,
        memory_bytes=max(memories) if memories else None,
        gpu_instance_id=old.gpu_instance_id if old.gpu_instance_id is not None
        else new.gpu_instance_id,
        compute_instance_id=old.compute_instance_id if old.compute_instance_id is not None
        else new.compute_instance_id,
    )


def _owning_mig(migs: list[_Mig], proc: RawProcess) -> _Mig | None:
    if proc.gpu_instance_id is None:
        return None
    for mig in migs:
        if mig.gpu_instance_id == proc.gpu_instance_id and (
                proc.compute_instance_id is None
                or mig.compute_instance_id == proc.compute_instance_id):
            return mig
    return None

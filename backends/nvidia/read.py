"""NVML reads whose entry points depend on the driver version.

Newer entry points are tried first (``nvmlDeviceGetMemoryInfo_v2``,
``nvmlDeviceGetTemperatureV``, ``nvmlDeviceGetCurrentClocksEventReasons``, the
field-value batch); on FunctionNotFound or ArgumentVersionMismatch (an older
driver) the older call takes over for the rest of the process, and a value no
entry point provides is ``None``, never a failure.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from allsmi.backends.nvidia import nvml
from allsmi.backends.nvidia.calls import Calls
from allsmi.backends.nvidia.nvml import SUCCESS, error_code
from allsmi.backends.nvidia.devices import (
    FI_POWER_AVERAGE,
    FI_POWER_INSTANT,
    NVML_PCIE_UTIL_RX_BYTES,
    NVML_PCIE_UTIL_TX_BYTES,
    NVML_TEMPERATURE_GPU,
    DeviceFault,
    Gpu,
    number,
    Reader,
)
from allsmi.schema.units import UINT_SENTINELS, reject_sentinel


class DriverReads:
    """The reads whose entry point depends on the installed driver; remembers which worked."""

    def __init__(self, pynvml: ModuleType) -> None:
        self.pynvml = pynvml
        # What the installed driver offers; flipped off on FunctionNotFound.
        self.memory_v2 = hasattr(pynvml, "nvmlMemory_v2") and hasattr(pynvml, "c_nvmlMemory_v2_t")
        self.temperature_v = hasattr(pynvml, "nvmlDeviceGetTemperatureV") and hasattr(
            pynvml, "c_nvmlTemperature_v1_t")
        self.event_reasons = hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
        self.calls = Calls(pynvml)

    def older(self, name: str) -> Callable[..., Any]:
        """pynvml's wrapper ``name`` of an older driver's entry point (deprecated in nvidia-ml-py
        13, to be dropped): where this nvidia-ml-py has none, a call answering FunctionNotFound
        (that value ``None``), as a driver without the entry point does."""
        fn = getattr(self.pynvml, name, None)
        if fn is not None:
            return fn
        error = self.pynvml.NVMLError

        def missing(*_args: Any) -> Any:
            raise error(nvml.ERROR_FUNCTION_NOT_FOUND)
        return missing

    def utilization(self, r: Reader, skip: set[str], handle: Any) -> tuple[int, int] | None:
        """``nvmlDeviceGetUtilizationRates``: ``(gpu, memory)`` percent as NVML answers them."""
        if "utilization" in skip:
            return None
        try:
            ret, out = self.calls.utilization(handle)
        except self.pynvml.NVMLError as exc:
            r.failed(skip, "utilization", exc)
            return None
        if ret != SUCCESS:
            r.failed(skip, "utilization", self.calls.error(ret))
            return None
        return out.gpu, out.memory

    def uint(self, r: Reader, skip: set[str], key: str, name: str, handle: Any,
             *args: int) -> int | None:
        """A call answering one unsigned int (``nvmlDeviceGetClockInfo``,
        ``nvmlDeviceGetPerformanceState``, ``nvmlDeviceGetFanSpeed``), as :meth:`Reader.call`
        answers pynvml's wrapper of it."""
        if key in skip:
            return None
        try:
            ret, out = self.calls.uint(name, handle, *args)
        except self.pynvml.NVMLError as exc:
            r.failed(skip, key, exc)
            return None
        if ret != SUCCESS:
            r.failed(skip, key, self.calls.error(ret))
            return None
        return out.value

    def memory(self, r: Reader, skip: set[str], handle: Any
                ) -> tuple[int | None, int | None, int | None, int | None]:
        """``(used, total, reserved, version)`` in bytes; v2 where the driver has it."""
        pynvml = self.pynvml
        if "memory" in skip:
            return None, None, None, None
        info = None
        version = None
        if self.memory_v2:
            try:
                ret, info = self.calls.memory_v2(handle)
                if ret != SUCCESS:
                    info = None
                    raise self.calls.error(ret)
                version = 2
            except pynvml.NVMLError as exc:
                if error_code(exc) in (nvml.ERROR_FUNCTION_NOT_FOUND,
                                       nvml.ERROR_ARGUMENT_VERSION_MISMATCH):
                    self.memory_v2 = False  # the driver predates the v2 call
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

    def temperature(self, r: Reader, skip: set[str], handle: Any) -> float | None:
        pynvml = self.pynvml
        if "temperature" in skip:
            return None
        value = None
        if self.temperature_v:
            try:
                ret, out = self.calls.temperature_v(handle, NVML_TEMPERATURE_GPU)
                if ret != SUCCESS:
                    raise self.calls.error(ret)
                value = out.temperature
                if (value & 0xFFFFFFFF) in UINT_SENTINELS:
                    return None  # a signed int here: the unsigned call's all-ones reads as -1
            except pynvml.NVMLError as exc:
                if error_code(exc) in (nvml.ERROR_FUNCTION_NOT_FOUND,
                                       nvml.ERROR_ARGUMENT_VERSION_MISMATCH):
                    self.temperature_v = False  # the driver predates TemperatureV
                else:
                    r.failed(skip, "temperature", exc)
                    return None
        if value is None and not self.temperature_v:
            value = r.call(skip, "temperature", self.older("nvmlDeviceGetTemperature"), handle,
                           NVML_TEMPERATURE_GPU)
        return number(reject_sentinel(value))

    def clock_event_reasons(self, r: Reader, skip: set[str], handle: Any) -> int | None:
        pynvml = self.pynvml
        if "clock_event_reasons" in skip:
            return None
        if self.event_reasons:
            try:
                ret, out = self.calls.clock_event_reasons(handle)
                if ret != SUCCESS:
                    raise self.calls.error(ret)
                return int(out.value)
            except pynvml.NVMLError as exc:
                if error_code(exc) != nvml.ERROR_FUNCTION_NOT_FOUND:
                    r.failed(skip, "clock_event_reasons", exc)
                    return None
                self.event_reasons = False  # older driver: the "throttle" name
        value = r.call(skip, "clock_event_reasons",
                       self.older("nvmlDeviceGetCurrentClocksThrottleReasons"), handle)
        return int(value) if value is not None else None

    def pcie_throughput(self, r: Reader, skip: set[str], handle: Any) -> dict[str, float]:
        """PCIe TX and RX (KB/s over NVML's 20 ms window; the ``pcie_throughput`` option)."""
        out: dict[str, float] = {}
        for key, counter in (("pcie_tx", NVML_PCIE_UTIL_TX_BYTES),
                             ("pcie_rx", NVML_PCIE_UTIL_RX_BYTES)):
            value = number(r.call(skip, key, self.pynvml.nvmlDeviceGetPcieThroughput, handle, counter))
            if value is not None:
                out[f"{key}_kilobytes_per_second"] = value
        return out

    def field_values(self, r: Reader, gpu: Gpu) -> dict[int, int | float]:
        """The batched fields that answered; unsupported ones leave ``gpu.fields`` for good."""
        pynvml = self.pynvml
        asked = list(gpu.fields)
        if not asked:
            return {}
        batch = gpu.field_batch
        if batch is None or batch.ids != asked:
            batch = gpu.field_batch = nvml.FieldValueBatch(pynvml, asked)
        entries = r.call(gpu.skip, "field_values", batch.read, gpu.handle)
        if entries is None:
            if "field_values" in gpu.skip:
                gpu.fields.clear()  # no batch call at all: the dedicated calls take over
            return {}
        values: dict[int, int | float] = {}
        for fid, (ret, value) in zip(asked, entries):
            if ret == nvml.SUCCESS:
                if value is not None:
                    values[fid] = value
            elif ret in (nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT,
                         nvml.ERROR_FUNCTION_NOT_FOUND):
                # INVALID_ARGUMENT: a field id newer than the driver
                gpu.fields.remove(fid)
            elif ret in nvml.DEVICE_FAULT_CODES:
                raise DeviceFault(ret, f"field {fid}: {pynvml.NVMLError(ret)}")
            elif ret == nvml.ERROR_NO_PERMISSION:
                gpu.fields.remove(fid)
                r.warnings.append(f"{r.label}: NVML field {fid} needs more privilege "
                                  "(NoPermission); reported as unknown")
            else:
                r.warnings.append(f"{r.label}: NVML field {fid} failed: "
                                  f"{pynvml.NVMLError(ret)}")
        if FI_POWER_AVERAGE in values and FI_POWER_INSTANT in gpu.fields:
            gpu.fields.remove(FI_POWER_INSTANT)  # the average is what nvidia-smi shows
        return values


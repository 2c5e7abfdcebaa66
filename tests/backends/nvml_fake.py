"""A fake NVML shared library behind the real pynvml module.

pynvml stays in the path: its wrappers build the real ctypes structs and
call through function pointers that it looks up with ``getattr`` on the
loaded library object. :class:`FakeNvml` puts an object in place of that
library (``pynvml.nvmlLib``) whose attributes are ``CFUNCTYPE``-wrapped
Python functions. Each one receives the raw pointers pynvml passes, checks
struct versions where NVML does, writes the answer into the caller's memory
and returns an ``nvmlReturn_t`` code. A symbol the fake leaves out is
"missing from the driver": pynvml raises ``NVMLError_FunctionNotFound``.

Configurable: any number of GPUs (from the JSON profiles in
``fixtures/nvidia/profiles``), MIG instances (created and destroyed while a test runs:
:meth:`FakeNvml.create_mig`, :meth:`FakeNvml.destroy_mig`; MIG mode switched by setting
``mig_mode``), per-call latency, NotSupported
per symbol or field, GpuIsLost / Unknown per GPU, a missing library, an old
driver (no ``nvmlDeviceGetMemoryInfo_v2``, process info v2 or v1 only, no
power fields), processes in both the compute and graphics lists, and the
"not available" memory sentinel. Every call is counted per symbol and per
GPU.
"""

from __future__ import annotations

import ctypes
import json
import threading
import time
import traceback
from collections import Counter
from ctypes import (CFUNCTYPE, POINTER, c_char, c_int, c_int32, c_uint,
                    c_ulonglong, c_void_p, cast, memmove, sizeof)
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import pynvml
import pytest

PROFILES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia" / "profiles"

SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
GPU_IS_LOST = 15
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999
NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF
#: What the driver expects in a versioned struct's ``version`` member, as nvml.h's
#: NVML_STRUCT_VERSION builds it: the struct size in the low bits, the version above.
MEMORY_V2_VERSION = sizeof(pynvml.c_nvmlMemory_v2_t) | 2 << 24
TEMPERATURE_V1_VERSION = sizeof(pynvml.c_nvmlTemperature_v1_t) | 1 << 24
NO_INSTANCE = 0xFFFFFFFF

_ERROR_TEXT = {
    SUCCESS: b"Success", INVALID_ARGUMENT: b"Invalid Argument", NOT_SUPPORTED: b"Not Supported",
    4: b"Insufficient Permissions", NOT_FOUND: b"Not Found",
    INSUFFICIENT_SIZE: b"Insufficient Size", 10: b"Timeout", GPU_IS_LOST: b"GPU is lost",
    ARGUMENT_VERSION_MISMATCH: b"Argument version mismatch", UNKNOWN: b"Unknown Error",
}


@dataclass
class FakeProcess:
    """A process in a fake process list; ``used_memory=None`` sends NVML's sentinel."""

    pid: int
    used_memory: int | None
    gpu_instance_id: int = NO_INSTANCE
    compute_instance_id: int = NO_INSTANCE
    #: SM / memory / encoder / decoder utilization (percent): with ``sm_util`` set, every
    #: per-process utilization call records one new sample of these, stamped with the fake's
    #: clock (so each call has exactly one fresh sample per active process)
    sm_util: int | None = None
    mem_util: int = 0
    enc_util: int = 0
    dec_util: int = 0


@dataclass
class FakeMig:
    """One MIG instance of a fake GPU."""

    slot: int
    uuid: str
    name: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total: int
    memory_reserved: int
    memory_used: int
    #: GPU instance slices (the "3" of 3g.40gb) and compute slices (the "1" of 1c.3g.40gb; 0: all)
    gpu_slices: int = 1
    compute_slices: int = 0
    #: GPM metric id -> value over an interval for this GPU instance (``nvmlGpmMigSampleGet``);
    #: ``None``: the instance answers NotSupported
    gpm: dict[int, float] | None = None


@dataclass
class FakeGpu:
    """One fake GPU. ``None`` for a value means the device answers NotSupported."""

    index: int
    uuid: str
    bus_id: str
    name: str
    vbios: str
    memory_total: int
    memory_reserved: int
    memory_used: int
    util_gpu: int | None
    util_memory: int | None
    temperature: int | None
    power_average_mw: int | None
    power_instant_mw: int | None
    power_limit_mw: int | None
    energy_mj: int | None
    clocks: dict[str, int]
    fan: int | None
    pstate: int | None
    clock_event_reasons: int | None
    ecc: dict[str, Any] | None
    mig_mode: int | None
    migs: list[FakeMig] = field(default_factory=list)
    pcie_tx_kbps: int = 0
    pcie_rx_kbps: int = 0
    encoder_util: int = 0
    decoder_util: int = 0
    compute: list[FakeProcess] = field(default_factory=list)
    graphics: list[FakeProcess] = field(default_factory=list)
    #: symbols (e.g. "nvmlDeviceGetFanSpeed") or fields ("field:83") that answer NotSupported
    not_supported: set[str] = field(default_factory=set)
    #: symbols that answer NoPermission
    no_permission: set[str] = field(default_factory=set)
    #: symbols that answer this return code (a GPM call failing with Timeout, Unknown...)
    fail: dict[str, int] = field(default_factory=dict)
    #: GPM (Hopper and later): metric id -> the value ``nvmlGpmMetricsGet`` computes between
    #: two samples of this GPU (what the GPU did in the interval ending at the later sample:
    #: each sample records the values at the time it is taken). ``None``: no GPM on this GPU
    #: (``nvmlGpmQueryDeviceSupport`` says unsupported, the sample calls NotSupported)
    gpm: dict[int, float] | None = None
    #: GPM metric id -> the per-metric ``nvmlReturn`` it answers instead of a value
    gpm_metric_errors: dict[int, int] = field(default_factory=dict)
    lost: bool = False
    unknown_error: bool = False
    #: seconds every call on this GPU takes on top of the library-wide latency (a hung driver)
    stall_s: float = 0.0
    #: compute slices of the whole GPU in MIG mode (7 on A100/H100, 4 on A30)
    mig_total_slices: int = 7
    #: per-process utilization samples NVML holds: (pid, timestamp us, sm, mem, enc, dec);
    #: the calls return those newer than lastSeenTimeStamp, NotFound when there are none
    util_samples: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)
    #: the lastSeenTimeStamp of every per-process utilization call, in order
    util_asked: list[int] = field(default_factory=list)
    #: GPU instance id -> how many times a GPU instance was created under it while the test ran
    #: (a GPM sample remembers which one it was taken of)
    gi_generation: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_profile(cls, profile: str, index: int, **overrides: Any) -> FakeGpu:
        """A GPU from ``fixtures/nvidia/profiles/<profile>.json`` with index-derived ids."""
        data = json.loads((PROFILES / f"{profile}.json").read_text())
        migs = [FakeMig(slot=m["slot"],
                        uuid=f"MIG-{index:08x}-{m['slot']:04x}-5000-9000-{m['gpu_instance_id']:012x}",
                        name=m["name"], gpu_instance_id=m["gpu_instance_id"],
                        compute_instance_id=m["compute_instance_id"],
                        memory_total=m["memory_total"], memory_reserved=m["memory_reserved"],
                        memory_used=m["memory_used"], gpu_slices=_slices(m["name"])[0],
                        compute_slices=_slices(m["name"])[1])
                for m in data.pop("mig_instances")]
        gpu = cls(index=index, uuid=f"GPU-{index:08x}-1111-4222-8333-{0xFACE0000 + index:012x}",
                  bus_id=f"{index // 16:08X}:{0x18 + (index % 16) * 8:02X}:00.0", migs=migs, **data)
        return replace(gpu, **overrides)


def _slices(name: str) -> tuple[int, int]:
    """``(gpu slices, compute slices or 0)`` from a MIG profile name ("MIG 1c.3g.40gb")."""
    import re
    found = re.search(r"(?:(\d+)c\.)?(\d+)g\.", name)
    if found is None:
        return 1, 0
    return int(found.group(2)), int(found.group(1) or 0)


def busy_looking(gpu: FakeGpu, sm_active: float = 20.0) -> FakeGpu:
    """``gpu`` pinned at 100 % headline utilization with only ``sm_active`` % of its SMs busy
    (GPM SM activity), the rest of GPM plausible for such a load: the case the headline figure
    hides (one warp spinning, a collective deadlocked)."""
    gpu.util_gpu = 100
    gpu.gpm = {2: sm_active, 3: sm_active / 2, 5: 0.0, 10: 3.5, 20: 12.0, 21: 48.0,
               60: 0.0, 61: 0.0}
    return gpu


def fleet(count: int, profile: str = "rtx-6000-ada", **overrides: Any) -> list[FakeGpu]:
    """``count`` GPUs of one profile."""
    return [FakeGpu.from_profile(profile, i, **overrides) for i in range(count)]


class ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


class ProcessInfoV2(ctypes.Structure):
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong),
                ("gpuInstanceId", c_uint), ("computeInstanceId", c_uint)]


class _Return(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Library:
    """Stands in for the ``CDLL`` object; attributes are the exported symbols."""


class FakeNvml:
    """A configurable fake libnvidia-ml behind pynvml.

    ``driver``: ``"current"`` has every entry point; ``"r470"`` lacks
    ``nvmlDeviceGetMemoryInfo_v2``, the ``_v3`` process calls, the
    ``TemperatureV`` and ``ClocksEventReasons`` names and the power fields;
    ``"r440"`` has in addition only the v1 process calls.
    ``library_missing``: loading libnvidia-ml.so.1 fails.
    ``init_error``: ``nvmlInitWithFlags`` returns this code.
    ``latency_s``: added to every call (slept, so other threads run meanwhile).
    """

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "current",
                 driver_version: str = "550.54.15", latency_s: float = 0.0,
                 library_missing: bool = False, init_error: int | None = None,
                 absent_symbols: set[str] | frozenset[str] = frozenset()) -> None:
        self.gpus = gpus
        self.driver = driver
        self.driver_version = driver_version
        self.latency_s = latency_s
        self.library_missing = library_missing
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        #: the fake's clock for per-process utilization timestamps (seconds; tests may set it)
        self.clock: Callable[[], float] = time.time
        self.device_calls: Counter[int] = Counter()
        self.callback_errors: list[str] = []
        self._lock = threading.Lock()
        self._keep: list[Any] = []
        self._error_strings: dict[int, ctypes.Array[c_char]] = {}
        self._handles: dict[int, tuple[FakeGpu, FakeMig | None]] = {}
        #: GPM samples by address: ``None`` until taken, then (gpu, GPU instance id or None,
        #: sequence number, the metric values when taken, which GPU instance under that id)
        self.gpm_samples: dict[int, tuple[FakeGpu, int | None, int, dict[int, float], int]
                               | None] = {}
        self.gpm_freed = 0
        #: ``nvmlGpmMetricsGet`` calls whose two samples were of two different GPU instances
        #: that had the same id (one destroyed, the other created after it)
        self.gpm_mixed_instances = 0
        self._gpm_sequence = 0
        for gpu in gpus:
            self._handles[self._gpu_handle(gpu)] = (gpu, None)
            for mig in gpu.migs:
                self._handles[self._gpu_handle(gpu) + 1 + mig.slot] = (gpu, mig)
        self.lib = _Library()
        absent = set(absent_symbols) | self._absent_for_driver(driver)
        for name, proto, impl in self._symbols():
            if name not in absent:
                fn = proto(self._thunk(name, impl))
                self._keep.append(fn)
                setattr(self.lib, name, fn)

    # -- installing --------------------------------------------------------

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        """Make pynvml load this fake (or fail to load anything) until the test ends."""
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
        if self.library_missing:
            monkeypatch.setattr(pynvml, "nvmlLib", None)

            def no_library(*_args: Any, **_kwargs: Any) -> Any:
                raise OSError("libnvidia-ml.so.1: cannot open shared object file")

            monkeypatch.setattr(pynvml, "CDLL", no_library)
        else:
            monkeypatch.setattr(pynvml, "nvmlLib", self.lib)
        return self

    # -- counting ----------------------------------------------------------

    def total_calls(self) -> int:
        """Every library call since construction or :meth:`reset_counts`."""
        with self._lock:
            return sum(self.calls.values())

    def reset_counts(self) -> None:
        with self._lock:
            self.calls.clear()
            self.device_calls.clear()

    # -- MIG instances while a test runs ------------------------------------

    @staticmethod
    def destroy_mig(gpu: FakeGpu, slot: int) -> FakeMig:
        """Destroy the MIG instance at ``slot`` (``nvidia-smi mig -dci``, and ``-dgi`` when it
        was its GPU instance's last): its handle answers NotFound from now on."""
        mig = next(m for m in gpu.migs if m.slot == slot)
        gpu.migs = [m for m in gpu.migs if m is not mig]
        return mig

    @staticmethod
    def create_mig(gpu: FakeGpu, mig: FakeMig) -> FakeMig:
        """Create ``mig`` (``nvidia-smi mig -cgi -C``): a new GPU instance under its id unless
        another instance still has that id (then a compute instance in that GPU instance)."""
        assert not any(m.slot == mig.slot for m in gpu.migs), "the slot is taken"
        if not any(m.gpu_instance_id == mig.gpu_instance_id for m in gpu.migs):
            gpu.gi_generation[mig.gpu_instance_id] = (
                gpu.gi_generation.get(mig.gpu_instance_id, 0) + 1)
        gpu.migs = sorted([*gpu.migs, mig], key=lambda m: m.slot)
        return mig

    # -- internals ---------------------------------------------------------

    @staticmethod
    def _gpu_handle(gpu: FakeGpu) -> int:
        return 0x100000 * (gpu.index + 1)

    @staticmethod
    def _absent_for_driver(driver: str) -> set[str]:
        if driver == "current":
            return set()
        old = {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetComputeRunningProcesses_v3",
               "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetTemperatureV",
               "nvmlDeviceGetCurrentClocksEventReasons"}
        old |= {"nvmlDeviceGetProcessesUtilizationInfo"}
        if driver == "r470":
            return old
        if driver == "r440":
            return old | {"nvmlDeviceGetComputeRunningProcesses_v2",
                          "nvmlDeviceGetGraphicsRunningProcesses_v2"}
        raise ValueError(f"unknown fake driver {driver!r}")

    def _thunk(self, name: str, impl: Callable[..., int]) -> Callable[..., int]:
        def thunk(*args: Any) -> int:
            with self._lock:
                self.calls[name] += 1
            if self.latency_s:
                time.sleep(self.latency_s)
            try:
                return impl(*args)
            except _Return as ret:
                return ret.code
            except Exception:  # a bug in the fake must fail the test, not return garbage
                self.callback_errors.append(f"{name}: {traceback.format_exc()}")
                return UNKNOWN
        return thunk

    def _target(self, handle: int | None, symbol: str) -> tuple[FakeGpu, FakeMig | None]:
        if handle is None or handle not in self._handles:
            raise _Return(INVALID_ARGUMENT)
        gpu, mig = self._handles[handle]
        with self._lock:
            self.device_calls[gpu.index] += 1
        if gpu.stall_s:
            time.sleep(gpu.stall_s)
        if gpu.lost:
            raise _Return(GPU_IS_LOST)
        if gpu.unknown_error:
            raise _Return(UNKNOWN)
        if mig is not None and (gpu.mig_mode != 1 or not any(m is mig for m in gpu.migs)):
            # the instance was destroyed (or MIG mode switched off): NVML's handle is stale
            # until the slot's handle is asked for again, which may give the same value
            raise _Return(NOT_FOUND)
        if symbol in gpu.no_permission:
            raise _Return(4)
        if symbol in gpu.fail:
            raise _Return(gpu.fail[symbol])
        if symbol in gpu.not_supported:
            raise _Return(NOT_SUPPORTED)
        return gpu, mig

    def _gpu_only(self, handle: int | None, symbol: str) -> FakeGpu:
        gpu, mig = self._target(handle, symbol)
        if mig is not None:
            raise _Return(NOT_SUPPORTED)  # MIG handles do not answer board-level queries
        return gpu

    @staticmethod
    def _put(ptr: int | None, ctype: Any, value: Any) -> None:
        if not ptr:
            raise _Return(INVALID_ARGUMENT)
        cast(ptr, POINTER(ctype))[0] = value

    @staticmethod
    def _put_text(buf: int | None, size: int, value: str) -> None:
        data = value.encode() + b"\0"
        if not buf:
            raise _Return(INVALID_ARGUMENT)
        if len(data) > size:
            raise _Return(INSUFFICIENT_SIZE)
        memmove(buf, data, len(data))

    @staticmethod
    def _supported(value: int | None) -> int:
        if value is None:
            raise _Return(NOT_SUPPORTED)
        return value

    def _symbols(self) -> list[tuple[str, Any, Callable[..., int]]]:
        H = c_void_p  # noqa: N806 - reads like the C prototypes
        P = c_void_p  # noqa: N806
        proto = lambda *args: CFUNCTYPE(c_int, *args)  # noqa: E731
        s: list[tuple[str, Any, Callable[..., int]]] = []

        def add(name: str, args: tuple[Any, ...], impl: Callable[..., int]) -> None:
            s.append((name, proto(*args), impl))

        # -- library ---------------------------------------------------------
        def init(flags: int) -> int:
            return self.init_error if self.init_error is not None else SUCCESS
        add("nvmlInitWithFlags", (c_uint,), init)
        add("nvmlShutdown", (), lambda: SUCCESS)

        def error_string(code: int) -> int:
            if code not in self._error_strings:
                self._error_strings[code] = ctypes.create_string_buffer(
                    _ERROR_TEXT.get(code, b"Unknown Error"))
            return ctypes.addressof(self._error_strings[code])
        s.append(("nvmlErrorString", CFUNCTYPE(c_void_p, c_int), error_string))

        def driver_version(buf: int, size: int) -> int:
            self._put_text(buf, size, self.driver_version)
            return SUCCESS
        add("nvmlSystemGetDriverVersion", (P, c_uint), driver_version)

        def nvml_version(buf: int, size: int) -> int:
            self._put_text(buf, size, "12." + self.driver_version)
            return SUCCESS
        add("nvmlSystemGetNVMLVersion", (P, c_uint), nvml_version)

        def count(out: int) -> int:
            self._put(out, c_uint, len(self.gpus))
            return SUCCESS
        add("nvmlDeviceGetCount_v2", (P,), count)

        def handle_by_index(index: int, out: int) -> int:
            if index >= len(self.gpus):
                return INVALID_ARGUMENT
            gpu = self.gpus[index]
            if gpu.lost:
                return GPU_IS_LOST
            self._put(out, c_void_p, self._gpu_handle(gpu))
            return SUCCESS
        add("nvmlDeviceGetHandleByIndex_v2", (c_uint, P), handle_by_index)

        # -- identity --------------------------------------------------------
        def text_call(symbol: str, pick: Callable[[FakeGpu, FakeMig | None], str]
                      ) -> Callable[..., int]:
            def impl(handle: int, buf: int, size: int) -> int:
                gpu, mig = self._target(handle, symbol)
                self._put_text(buf, size, pick(gpu, mig))
                return SUCCESS
            return impl
        add("nvmlDeviceGetName", (H, P, c_uint),
            text_call("nvmlDeviceGetName", lambda g, m: m.name if m else g.name))
        add("nvmlDeviceGetUUID", (H, P, c_uint),
            text_call("nvmlDeviceGetUUID", lambda g, m: m.uuid if m else g.uuid))
        add("nvmlDeviceGetVbiosVersion", (H, P, c_uint),
            text_call("nvmlDeviceGetVbiosVersion", lambda g, m: g.vbios))

        def pci_info(handle: int, out: int) -> int:
            gpu, _ = self._target(handle, "nvmlDeviceGetPciInfo_v3")
            info = cast(out, POINTER(pynvml.nvmlPciInfo_t))[0]
            info.busId = gpu.bus_id.encode()
            info.busIdLegacy = gpu.bus_id[4:].encode()
            info.domain = int(gpu.bus_id.split(":")[0], 16)
            info.bus = int(gpu.bus_id.split(":")[1], 16)
            info.device = 0
            info.pciDeviceId = 0x233010DE
            return SUCCESS
        add("nvmlDeviceGetPciInfo_v3", (H, P), pci_info)

        def index_of(handle: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetIndex")
            self._put(out, c_uint, gpu.index)
            return SUCCESS
        add("nvmlDeviceGetIndex", (H, P), index_of)

        # -- scalar readings -------------------------------------------------
        def utilization(handle: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetUtilizationRates")
            util = cast(out, POINTER(pynvml.c_nvmlUtilization_t))[0]
            util.gpu = self._supported(gpu.util_gpu)
            util.memory = self._supported(gpu.util_memory)
            return SUCCESS
        add("nvmlDeviceGetUtilizationRates", (H, P), utilization)

        def memory_v1(handle: int, out: int) -> int:
            gpu, mig = self._target(handle, "nvmlDeviceGetMemoryInfo")
            src: Any = mig or gpu
            mem = cast(out, POINTER(pynvml.c_nvmlMemory_t))[0]
            mem.total = src.memory_total
            mem.used = src.memory_used + src.memory_reserved  # v1 counts reserved as used
            mem.free = src.memory_total - mem.used
            return SUCCESS
        add("nvmlDeviceGetMemoryInfo", (H, P), memory_v1)

        def memory_v2(handle: int, out: int) -> int:
            gpu, mig = self._target(handle, "nvmlDeviceGetMemoryInfo_v2")
            mem = cast(out, POINTER(pynvml.c_nvmlMemory_v2_t))[0]
            if mem.version != MEMORY_V2_VERSION:
                return ARGUMENT_VERSION_MISMATCH
            src: Any = mig or gpu
            mem.total = src.memory_total
            mem.reserved = src.memory_reserved
            mem.used = src.memory_used
            mem.free = src.memory_total - src.memory_reserved - src.memory_used
            return SUCCESS
        add("nvmlDeviceGetMemoryInfo_v2", (H, P), memory_v2)

        def temperature(handle: int, sensor: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetTemperature")
            if sensor != 0:
                return INVALID_ARGUMENT
            self._put(out, c_uint, self._supported(gpu.temperature))
            return SUCCESS
        add("nvmlDeviceGetTemperature", (H, c_uint, P), temperature)

        def temperature_v(handle: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetTemperatureV")
            temp = cast(out, POINTER(pynvml.c_nvmlTemperature_v1_t))[0]
            if temp.version != TEMPERATURE_V1_VERSION:
                return ARGUMENT_VERSION_MISMATCH
            if temp.sensorType != 0:
                return INVALID_ARGUMENT
            temp.temperature = self._supported(gpu.temperature)
            return SUCCESS
        add("nvmlDeviceGetTemperatureV", (H, P), temperature_v)

        def uint_reading(symbol: str, pick: Callable[[FakeGpu], int | None],
                         ctype: Any = c_uint) -> None:
            def impl(handle: int, out: int) -> int:
                gpu = self._gpu_only(handle, symbol)
                self._put(out, ctype, self._supported(pick(gpu)))
                return SUCCESS
            add(symbol, (H, P), impl)

        uint_reading("nvmlDeviceGetPowerUsage",
                     lambda g: g.power_average_mw if g.power_average_mw is not None
                     else g.power_instant_mw)
        uint_reading("nvmlDeviceGetEnforcedPowerLimit", lambda g: g.power_limit_mw)
        uint_reading("nvmlDeviceGetPowerManagementLimit", lambda g: g.power_limit_mw)
        uint_reading("nvmlDeviceGetTotalEnergyConsumption", lambda g: g.energy_mj, c_ulonglong)
        uint_reading("nvmlDeviceGetFanSpeed", lambda g: g.fan)
        uint_reading("nvmlDeviceGetPerformanceState", lambda g: g.pstate)
        uint_reading("nvmlDeviceGetCurrentClocksEventReasons", lambda g: g.clock_event_reasons,
                     c_ulonglong)
        uint_reading("nvmlDeviceGetCurrentClocksThrottleReasons",
                     lambda g: g.clock_event_reasons, c_ulonglong)

        def clock_info(handle: int, clock_type: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetClockInfo")
            names = {0: "graphics", 1: "sm", 2: "memory", 3: "video"}
            if clock_type not in names:
                return INVALID_ARGUMENT
            self._put(out, c_uint, self._supported(gpu.clocks.get(names[clock_type])))
            return SUCCESS
        add("nvmlDeviceGetClockInfo", (H, c_uint, P), clock_info)

        def pcie(handle: int, counter: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetPcieThroughput")
            self._put(out, c_uint, gpu.pcie_tx_kbps if counter == 0 else gpu.pcie_rx_kbps)
            return SUCCESS
        add("nvmlDeviceGetPcieThroughput", (H, c_uint, P), pcie)

        def codec(symbol: str, pick: Callable[[FakeGpu], int]) -> None:
            def impl(handle: int, util: int, period: int) -> int:
                gpu = self._gpu_only(handle, symbol)
                self._put(util, c_uint, pick(gpu))
                self._put(period, c_uint, 167000)
                return SUCCESS
            add(symbol, (H, P, P), impl)
        codec("nvmlDeviceGetEncoderUtilization", lambda g: g.encoder_util)
        codec("nvmlDeviceGetDecoderUtilization", lambda g: g.decoder_util)

        # -- ECC -------------------------------------------------------------
        def ecc_mode(handle: int, current: int, pending: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetEccMode")
            if gpu.ecc is None:
                return NOT_SUPPORTED
            self._put(current, c_uint, int(gpu.ecc["enabled"]))
            self._put(pending, c_uint, int(gpu.ecc["enabled"]))
            return SUCCESS
        add("nvmlDeviceGetEccMode", (H, P, P), ecc_mode)

        def ecc_total(handle: int, error_type: int, counter: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetTotalEccErrors")
            if gpu.ecc is None or not gpu.ecc["enabled"]:
                return NOT_SUPPORTED
            key = ("corrected" if error_type == 0 else "uncorrected") + (
                "_volatile" if counter == 0 else "_aggregate")
            self._put(out, c_ulonglong, gpu.ecc[key])
            return SUCCESS
        add("nvmlDeviceGetTotalEccErrors", (H, c_uint, c_uint, P), ecc_total)

        # -- field values ----------------------------------------------------
        def field_values(handle: int, n: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetFieldValues")
            entries = cast(out, POINTER(pynvml.c_nvmlFieldValue_t))
            for i in range(n):
                entry = entries[i]
                entry.timestamp = int(time.time() * 1e6)
                entry.latencyUsec = 12
                kind, value = self._field(gpu, int(entry.fieldId), int(entry.scopeId))
                if kind is None:
                    entry.nvmlReturn = value
                    continue
                entry.nvmlReturn = SUCCESS
                entry.valueType = kind
                if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
                    entry.value.uiVal = value
                else:
                    entry.value.ullVal = value
            return SUCCESS
        add("nvmlDeviceGetFieldValues", (H, c_int32, P), field_values)

        # -- MIG -------------------------------------------------------------
        def mig_mode(handle: int, current: int, pending: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetMigMode")
            mode = self._supported(gpu.mig_mode)
            self._put(current, c_uint, mode)
            self._put(pending, c_uint, mode)
            return SUCCESS
        add("nvmlDeviceGetMigMode", (H, P, P), mig_mode)

        def max_mig(handle: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetMaxMigDeviceCount")
            if gpu.mig_mode is None:
                return NOT_SUPPORTED
            self._put(out, c_uint, 7 if gpu.mig_mode == 1 else 0)  # (0: MIG mode off)
            return SUCCESS
        add("nvmlDeviceGetMaxMigDeviceCount", (H, P), max_mig)

        def mig_handle(handle: int, slot: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
            if not gpu.mig_mode:
                return INVALID_ARGUMENT
            for mig in gpu.migs:
                if mig.slot == slot:  # the slot's handle, now the instance's there
                    value = self._gpu_handle(gpu) + 1 + slot
                    self._handles[value] = (gpu, mig)
                    self._put(out, c_void_p, value)
                    return SUCCESS
            return NOT_FOUND
        add("nvmlDeviceGetMigDeviceHandleByIndex", (H, c_uint, P), mig_handle)

        def instance_id(symbol: str, attribute: str) -> None:
            def impl(handle: int, out: int) -> int:
                _, mig = self._target(handle, symbol)
                if mig is None:
                    return INVALID_ARGUMENT
                self._put(out, c_uint, getattr(mig, attribute))
                return SUCCESS
            add(symbol, (H, P), impl)
        instance_id("nvmlDeviceGetGpuInstanceId", "gpu_instance_id")
        instance_id("nvmlDeviceGetComputeInstanceId", "compute_instance_id")

        # GPU instance profiles by NVML_GPU_INSTANCE_PROFILE_* index: 1, 2, 3, 4, 7 slices
        # (up to the GPU's total: an A30 has 4), what nvidia-smi mig -lgip lists.
        profile_slices = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}

        def profile_info(symbol: str, versioned: bool) -> None:
            def impl(handle: int, profile: int, out: int) -> int:
                gpu = self._gpu_only(handle, symbol)
                if gpu.mig_mode is None:
                    return NOT_SUPPORTED
                slices = profile_slices.get(profile)
                if slices is None or slices > gpu.mig_total_slices:
                    return NOT_SUPPORTED
                if versioned:
                    info = cast(out, POINTER(pynvml.c_nvmlGpuInstanceProfileInfo_v2_t))[0]
                    if info.version != pynvml.nvmlGpuInstanceProfileInfo_v2:
                        return ARGUMENT_VERSION_MISMATCH
                else:
                    info = cast(out, POINTER(pynvml.c_nvmlGpuInstanceProfileInfo_t))[0]
                info.id = profile
                info.sliceCount = slices
                info.instanceCount = gpu.mig_total_slices // slices
                return SUCCESS
            add(symbol, (H, c_uint, P), impl)
        profile_info("nvmlDeviceGetGpuInstanceProfileInfoV", True)
        profile_info("nvmlDeviceGetGpuInstanceProfileInfo", False)

        def attributes(handle: int, out: int) -> int:
            gpu, mig = self._target(handle, "nvmlDeviceGetAttributes_v2")
            attrs = cast(out, POINTER(pynvml.c_nvmlDeviceAttributes))[0]
            if mig is None:
                attrs.gpuInstanceSliceCount = gpu.mig_total_slices
                attrs.computeInstanceSliceCount = gpu.mig_total_slices
                attrs.memorySizeMB = gpu.memory_total >> 20
            else:
                attrs.gpuInstanceSliceCount = mig.gpu_slices
                attrs.computeInstanceSliceCount = mig.compute_slices or mig.gpu_slices
                attrs.memorySizeMB = mig.memory_total >> 20
            return SUCCESS
        add("nvmlDeviceGetAttributes_v2", (H, P), attributes)

        # -- processes -------------------------------------------------------
        for kind in ("Compute", "Graphics"):
            for suffix, struct in (("_v3", ProcessInfoV2), ("_v2", ProcessInfoV2),
                                   ("", ProcessInfoV1)):
                symbol = f"nvmlDeviceGet{kind}RunningProcesses{suffix}"
                add(symbol, (H, P, P), self._process_list(symbol, kind.lower(), struct))
        add("nvmlDeviceGetProcessUtilization", (H, P, P, c_ulonglong), self._utilization_v0)
        add("nvmlDeviceGetProcessesUtilizationInfo", (H, P), self._utilization_info)
        self._gpm_symbols(add)
        return s

    # -- GPM ---------------------------------------------------------------

    def gpm_live_samples(self) -> int:
        """GPM samples allocated and not yet freed."""
        return len(self.gpm_samples)

    def _gpm_symbols(self, add: Callable[[str, tuple[Any, ...], Callable[..., int]], None]) -> None:
        H = P = c_void_p  # noqa: N806

        def query_support(handle: int, out: int) -> int:
            gpu = self._gpu_only(handle, "nvmlGpmQueryDeviceSupport")
            support = cast(out, POINTER(pynvml.c_nvmlGpmSupport_t))[0]
            if support.version != pynvml.NVML_GPM_SUPPORT_VERSION:
                return ARGUMENT_VERSION_MISMATCH
            support.isSupportedDevice = int(gpu.gpm is not None)
            return SUCCESS
        add("nvmlGpmQueryDeviceSupport", (H, P), query_support)

        def sample_alloc(out: int) -> int:
            block = ctypes.create_string_buffer(16)  # a distinct address per sample
            self._keep.append(block)
            address = ctypes.addressof(block)
            with self._lock:
                self.gpm_samples[address] = None
            self._put(out, c_void_p, address)
            return SUCCESS
        add("nvmlGpmSampleAlloc", (P,), sample_alloc)

        def sample_free(sample: int | None) -> int:
            with self._lock:
                if sample not in self.gpm_samples:
                    return INVALID_ARGUMENT  # never allocated, or freed twice
                del self.gpm_samples[sample]
                self.gpm_freed += 1
            return SUCCESS
        add("nvmlGpmSampleFree", (P,), sample_free)

        def take(sample: int | None, gpu: FakeGpu, instance: int | None,
                 values: dict[int, float] | None) -> int:
            if values is None:
                return NOT_SUPPORTED
            with self._lock:
                if sample not in self.gpm_samples:
                    return INVALID_ARGUMENT
                self._gpm_sequence += 1
                generation = 0 if instance is None else gpu.gi_generation.get(instance, 0)
                self.gpm_samples[sample] = (gpu, instance, self._gpm_sequence, dict(values),
                                            generation)
            return SUCCESS

        def sample_get(handle: int, sample: int | None) -> int:
            gpu = self._gpu_only(handle, "nvmlGpmSampleGet")
            return take(sample, gpu, None, gpu.gpm)
        add("nvmlGpmSampleGet", (H, P), sample_get)

        def mig_sample_get(handle: int, instance: int, sample: int | None) -> int:
            gpu = self._gpu_only(handle, "nvmlGpmMigSampleGet")
            if gpu.gpm is None or not gpu.mig_mode:
                return NOT_SUPPORTED
            mig = next((m for m in gpu.migs if m.gpu_instance_id == instance), None)
            if mig is None:
                return NOT_FOUND
            return take(sample, gpu, instance, mig.gpm)
        add("nvmlGpmMigSampleGet", (H, c_uint, P), mig_sample_get)

        def metrics_get(out: int) -> int:
            request = cast(out, POINTER(pynvml.c_nvmlGpmMetricsGet_t))[0]
            if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
                return ARGUMENT_VERSION_MISMATCH
            first = self.gpm_samples.get(cast(request.sample1, c_void_p).value or 0)
            second = self.gpm_samples.get(cast(request.sample2, c_void_p).value or 0)
            if first is None or second is None or first[:2] != second[:2] \
                    or first[2] >= second[2] or request.numMetrics > len(request.metrics):
                return INVALID_ARGUMENT  # not two samples of one target, in order
            gpu, values = second[0], second[3]
            if first[4] != second[4]:  # what a real driver would diff: counters of two instances
                with self._lock:
                    self.gpm_mixed_instances += 1
            self._target(self._gpu_handle(gpu), "nvmlGpmMetricsGet")
            for i in range(request.numMetrics):
                metric = request.metrics[i]
                metric_id = int(metric.metricId)
                if metric_id in gpu.gpm_metric_errors:
                    metric.nvmlReturn, metric.value = gpu.gpm_metric_errors[metric_id], 0.0
                elif metric_id in values:
                    metric.nvmlReturn, metric.value = SUCCESS, values[metric_id]
                else:
                    metric.nvmlReturn, metric.value = NOT_SUPPORTED, 0.0
            return SUCCESS
        add("nvmlGpmMetricsGet", (P,), metrics_get)

    def _fresh_samples(self, gpu: FakeGpu, since: int) -> list[tuple[int, int, int, int, int, int]]:
        """Record one sample per active process now; the samples newer than ``since``."""
        if gpu.mig_mode == 1:
            raise _Return(NOT_SUPPORTED)  # NVML: not available while MIG is enabled
        gpu.util_asked.append(since)
        now = int(self.clock() * 1e6)
        for proc in gpu.compute + gpu.graphics:
            if proc.sm_util is not None and not any(
                    x[0] == proc.pid and x[1] == now for x in gpu.util_samples):
                gpu.util_samples.append((proc.pid, now, proc.sm_util, proc.mem_util,
                                         proc.enc_util, proc.dec_util))
        return [x for x in gpu.util_samples if x[1] > since]

    def _utilization_v0(self, handle: int, samples: int | None, count_ptr: int, since: int) -> int:
        gpu = self._gpu_only(handle, "nvmlDeviceGetProcessUtilization")
        fresh = self._fresh_samples(gpu, since)
        count = cast(count_ptr, POINTER(c_uint))
        if not fresh:
            count[0] = 0
            return NOT_FOUND
        capacity, count[0] = count[0], len(fresh)
        if not samples or capacity < len(fresh):
            return INSUFFICIENT_SIZE
        array = cast(samples, POINTER(pynvml.c_nvmlProcessUtilizationSample_t))
        for i, (pid, stamp, sm, mem, enc, dec) in enumerate(fresh):
            array[i].pid, array[i].timeStamp = pid, stamp
            array[i].smUtil, array[i].memUtil, array[i].encUtil, array[i].decUtil = sm, mem, enc, dec
        return SUCCESS

    def _utilization_info(self, handle: int, info_ptr: int) -> int:
        gpu = self._gpu_only(handle, "nvmlDeviceGetProcessesUtilizationInfo")
        info = cast(info_ptr, POINTER(pynvml.c_nvmlProcessesUtilizationInfo_v1_t))[0]
        if info.version != pynvml.ProcessesUtilizationInfo_v1:
            return ARGUMENT_VERSION_MISMATCH
        fresh = self._fresh_samples(gpu, int(info.lastSeenTimeStamp))
        if not fresh:
            info.processSamplesCount = 0
            return NOT_FOUND
        capacity, info.processSamplesCount = info.processSamplesCount, len(fresh)
        if not info.procUtilArray or capacity < len(fresh):
            return INSUFFICIENT_SIZE
        for i, (pid, stamp, sm, mem, enc, dec) in enumerate(fresh):
            entry = info.procUtilArray[i]
            entry.pid, entry.timeStamp = pid, stamp
            entry.smUtil, entry.memUtil, entry.encUtil, entry.decUtil = sm, mem, enc, dec
            entry.jpgUtil = entry.ofaUtil = 0
        return SUCCESS

    def _process_list(self, symbol: str, attribute: str, struct: type[ctypes.Structure]
                      ) -> Callable[..., int]:
        def impl(handle: int, count_ptr: int, infos: int | None) -> int:
            gpu, mig = self._target(handle, symbol)
            procs: list[FakeProcess] = getattr(gpu, attribute)
            if mig is not None:
                procs = [p for p in procs if p.gpu_instance_id == mig.gpu_instance_id]
            count = cast(count_ptr, POINTER(c_uint))
            capacity = count[0]
            count[0] = len(procs)
            if not procs:
                return SUCCESS
            if not infos or capacity < len(procs):
                return INSUFFICIENT_SIZE
            array = cast(infos, POINTER(struct))
            for i, proc in enumerate(procs):
                entry = array[i]
                entry.pid = proc.pid
                entry.usedGpuMemory = (NOT_AVAILABLE_ULL if proc.used_memory is None
                                       else proc.used_memory)
                if struct is ProcessInfoV2:
                    entry.gpuInstanceId = proc.gpu_instance_id
                    entry.computeInstanceId = proc.compute_instance_id
            return SUCCESS
        assert sizeof(struct) in (16, 24)
        return impl

    def _field(self, gpu: FakeGpu, field_id: int, scope: int) -> tuple[int | None, int]:
        """``(valueType, value)`` or ``(None, return code)`` for one field."""
        if f"field:{field_id}" in gpu.not_supported:
            return None, NOT_SUPPORTED
        old_driver = self.driver != "current"
        uint, ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        ecc = gpu.ecc if gpu.ecc and gpu.ecc["enabled"] else None
        ecc_keys = {3: "corrected_volatile", 4: "uncorrected_volatile",
                    5: "corrected_aggregate", 6: "uncorrected_aggregate"}
        if field_id in ecc_keys:
            return (ull, ecc[ecc_keys[field_id]]) if ecc else (None, NOT_SUPPORTED)
        if field_id == 83:
            return (ull, gpu.energy_mj) if gpu.energy_mj is not None else (None, NOT_SUPPORTED)
        if field_id in (185, 186, 190):
            if old_driver:
                return None, INVALID_ARGUMENT  # field ids newer than the driver
            if scope != 0:
                return None, NOT_SUPPORTED
            value = {185: gpu.power_average_mw, 186: gpu.power_instant_mw,
                     190: gpu.power_limit_mw}[field_id]
            return (uint, value) if value is not None else (None, NOT_SUPPORTED)
        return None, INVALID_ARGUMENT


"""NVML device model: field ids, per-GPU and per-MIG state, and error sorting per call.

Shared by :mod:`allsmi.backends.nvidia` (the backend) and
:mod:`allsmi.backends._nvml_read` (the driver-version-dependent reads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from allsmi.backends import _nvml
from allsmi.backends._nvml import RawProcess, error_code
from allsmi.schema import DeviceSample
from allsmi.units import reject_sentinel

if TYPE_CHECKING:
    from concurrent.futures import Future

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
    partition_share: float | None = None
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


#: "3g.40gb", "1c.3g.40gb": GPU instance slices, and compute slices where the CI is smaller.
_MIG_PROFILE = re.compile(r"(?:(\d+)c\.)?(\d+)g\.")


def total_slices(pynvml: ModuleType, handle: Any) -> int | None:
    """The GPU's compute slices in MIG mode: the largest ``sliceCount`` of its GPU instance
    profiles (7 on A100/H100, 4 on A30), from ``nvmlDeviceGetGpuInstanceProfileInfo``."""
    best: int | None = None
    versions = [2, 1]
    for profile in range(int(getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0x12))):
        for version in list(versions):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile, version=version)
            except pynvml.NVMLError as exc:
                if error_code(exc) in (_nvml.ERROR_FUNCTION_NOT_FOUND,
                                       _nvml.ERROR_ARGUMENT_VERSION_MISMATCH) and version == 2:
                    versions.remove(2)  # an older driver: the v1 struct from now on
                    continue
                break  # this profile does not exist on this GPU
            slices = int(getattr(info, "sliceCount", 0) or 0)
            if 0 < slices < 0xFFFFFFFF:
                best = max(best or 0, slices)
            break
    return best


def mig_share(pynvml: ModuleType, mig: _Mig, total: int | None) -> float | None:
    """The MIG device's compute slices over the GPU's (3g.40gb on an H100: 3/7), else ``None``.

    The slices come from ``nvmlDeviceGetAttributes`` of the MIG handle (compute
    instance slices, which equal the GPU instance's unless the CI is smaller),
    else from the profile in the MIG device's name.
    """
    if not total:
        return None
    slices = 0
    try:
        attrs = pynvml.nvmlDeviceGetAttributes(mig.handle)
        slices = int(attrs.computeInstanceSliceCount or attrs.gpuInstanceSliceCount or 0)
    except (pynvml.NVMLError, AttributeError):
        pass
    if not 0 < slices <= total and mig.name:
        found = _MIG_PROFILE.search(mig.name)
        if found is not None:
            slices = int(found.group(1) or found.group(2))
    if not 0 < slices <= total:
        return None
    return slices / total

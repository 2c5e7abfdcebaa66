"""NVML device model: field ids, per-GPU state, and error sorting per call.

Used by the backend (:mod:`allsmi.backends.nvidia`), the driver-version-dependent reads
(:mod:`.read`), MIG instances (:mod:`.mig`), process lists (:mod:`.processes`) and the
static facts read at open (:mod:`.static`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from allsmi.backends.nvidia import nvml
from allsmi.backends.nvidia.nvml import error_code
from allsmi.schema import DeviceSample
from allsmi.schema.units import UINT_SENTINELS, WIDE_SENTINELS, milli_to_unit, parse_percent, reject_sentinel, to_int

if TYPE_CHECKING:
    from allsmi.backends.nvidia.gpm import GpmTarget
    from allsmi.backends.nvidia.mig import Mig
    from allsmi.backends.nvidia.nvml import FieldValueBatch
    from allsmi.backends.nvidia.procutil import UtilizationState
    from allsmi.backends.nvidia.schedule import GpuRead

#: NVML field ids (``nvml.h``) read in the per-cycle batch.
FI_ECC_SBE_VOL_TOTAL = 3
FI_ECC_DBE_VOL_TOTAL = 4
FI_ECC_SBE_AGG_TOTAL = 5
FI_ECC_DBE_AGG_TOTAL = 6
FI_TOTAL_ENERGY_CONSUMPTION = 83
FI_POWER_AVERAGE = 185
FI_POWER_INSTANT = 186
FI_POWER_CURRENT_LIMIT = 190

ECC_FIELDS: dict[int, str] = {
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

_REASON_BITS = sum(bit for bit, _ in CLOCK_EVENT_REASONS)
_REASON_NAMES: dict[int, tuple[str, ...]] = {}


def reason_names(mask: int) -> tuple[str, ...]:
    """The names of the clock-event reasons set in ``mask`` (bits without a name left out),
    worked out once per combination (a GPU keeps the same few cycle after cycle)."""
    known = mask & _REASON_BITS
    names = _REASON_NAMES.get(known)
    if names is None:
        names = _REASON_NAMES[known] = tuple(
            name for bit, name in CLOCK_EVENT_REASONS if known & bit)
    return names


PROCESS_CAPACITY = 16


class DeviceFault(Exception):
    """A device-level NVML failure (GpuIsLost, Unknown) inside one device's read."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False, repr=False)  # never compared or printed: no methods compiled for it
class Gpu:
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
    #: The MIG instances as last listed (replaced whole, never changed in place), the most the
    #: GPU can hold in its mode and its compute slices (``None``: not asked yet; 0: unknown),
    #: when they were listed (monotonic; ``None``: at open, before the first cycle) and whether
    #: a read asks for a listing now (:mod:`.layout`)
    migs: list[Mig] = field(default_factory=list)
    mig_slots: int | None = None
    mig_total_slices: int | None = None
    mig_listed_at: float | None = None
    mig_relist: bool = False
    skip: set[str] = field(default_factory=set)
    fields: list[int] = field(default_factory=list)
    #: The buffer ``fields`` are asked into, made on the first read and when ``fields`` shrinks.
    field_batch: FieldValueBatch | None = None
    lost_reason: str | None = None
    process_capacity: dict[str, int] = field(
        default_factory=lambda: {"Compute": PROCESS_CAPACITY, "Graphics": PROCESS_CAPACITY})
    pending: GpuRead[tuple[list[DeviceSample], list[str]]] | None = None
    #: Per-process utilization bookkeeping (:mod:`.procutil`), made on the first read.
    process_utilization: UtilizationState | None = None
    #: GPM samples of the GPU and, in MIG mode, of each GPU instance by its id (:mod:`.gpm`)
    gpm: GpmTarget | None = None
    gpm_instances: dict[int, GpmTarget] = field(default_factory=dict)
    #: The GPU's sample with only its static facts, made on the first read after open: each
    #: cycle's sample is derived from it (``NvidiaBackend._device``).
    template: DeviceSample | None = None

    @property
    def id(self) -> str:
        """The uuid; where NVML could not give one, a vendor-qualified bus id or index."""
        if self.uuid:
            return self.uuid
        if self.bus_id:
            return f"nvidia:{self.bus_id}"
        return f"nvidia:index-{self.index}"


class Reader:
    """Makes one device's calls for one cycle and sorts NVML errors.

    NotSupported, FunctionNotFound and NoPermission give ``None`` and put the
    call into the target's skip set, so it costs nothing in later cycles.
    GpuIsLost and Unknown raise :class:`DeviceFault`. Anything else (a
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
        if code in nvml.NO_VALUE_CODES:
            skip.add(key)
        elif code in nvml.DEVICE_FAULT_CODES:
            raise DeviceFault(code, f"{key}: {exc}")
        elif code == nvml.ERROR_NO_PERMISSION:
            skip.add(key)
            self.warnings.append(
                f"{self.label}: {key} needs more privilege (NVML NoPermission); reported as unknown")
        else:
            self.warnings.append(f"{self.label}: {key} failed: {exc}")


def number(value: object) -> float | None:
    """A float from an NVML integer, ``None`` for None or an all-ones sentinel."""
    if type(value) is int:  # what NVML answers (the same result, without the general checks)
        return None if value in UINT_SENTINELS else float(value)
    value = reject_sentinel(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)




def ecc_count(value: object) -> int | None:
    """An ECC total from the field batch: a whole count (a double value type holding one is
    one); ``None`` for an all-ones "not available" (65535, ``0xFFFF``, is a count), a fraction
    or a negative number."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is int and value in WIDE_SENTINELS:
        return None
    return to_int(value)


def milli(value: object) -> float | None:
    """:func:`allsmi.schema.units.milli_to_unit` of :func:`number` (mW to W, mJ to J)."""
    value = number(value)
    if type(value) is float and -_INF < value < _INF:  # finite: what milli_to_unit divides
        return value / 1000.0
    return milli_to_unit(value)


def percent(value: object) -> float | None:
    """:func:`allsmi.schema.units.parse_percent` of an NVML percentage (``None``: a sentinel, or
    outside 0 to 100)."""
    if type(value) is int:  # what NVML answers (the same result, without the general checks)
        return None if value in UINT_SENTINELS or not 0 <= value <= 100 else float(value)
    return parse_percent(reject_sentinel(value))


_INF = float("inf")


def mark_lost(gpu: Gpu, fault: DeviceFault) -> None:
    """GpuIsLost stays lost until the backend is reopened; Unknown may pass."""
    if fault.code == nvml.ERROR_GPU_IS_LOST:
        gpu.lost_reason = str(fault)

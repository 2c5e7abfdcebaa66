"""Calling amdsmi: status codes, error text, and one device's calls sorted by outcome.

amdsmi raises ``AmdSmiLibraryException`` (with ``err_code``) for a failing C call,
and its own conversions raise ``ValueError`` and friends on garbage. What a
failure means for the device is decided here, once, for static and dynamic reads.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Mapping

from allsmi.backend_api import BackendError, BackendUnavailable

# amdsmi status codes (amdsmi_wrapper.AMDSMI_STATUS_*), the same in 6.x and 7.x.
STATUS_NOT_SUPPORTED = 2
STATUS_NOT_YET_IMPLEMENTED = 3
STATUS_FAIL_LOAD_MODULE = 4
STATUS_FAIL_LOAD_SYMBOL = 5
STATUS_NO_PERM = 10
STATUS_NOT_FOUND = 31
STATUS_DRIVER_NOT_LOADED = 34
STATUS_NO_DATA = 40

#: Answers that mean "this device does not have that reading", not a fault.
NOT_AVAILABLE = frozenset({STATUS_NOT_SUPPORTED, STATUS_NOT_YET_IMPLEMENTED, STATUS_NO_DATA})

#: Every amdsmi function the backend calls, with the reading it gives. Older amdsmi
#: packages lack some (``amdsmi_get_gpu_memory_partition`` arrived in ROCm 6.1,
#: ``amdsmi_get_gpu_kfd_info`` in 6.2): their readings are ``None`` and ``doctor``
#: lists them (probe detail ``missing_functions``).
FUNCTIONS: dict[str, str] = {
    "amdsmi_get_gpu_device_bdf": "bus_id",
    "amdsmi_get_gpu_device_uuid": "uuid",
    "amdsmi_get_gpu_asic_info": "name, details.gfx_version, details.compute_units",
    "amdsmi_get_gpu_board_info": "name (fallback)",
    "amdsmi_get_gpu_driver_info": "driver_version",
    "amdsmi_get_gpu_vbios_info": "firmware_version",
    "amdsmi_get_gpu_compute_partition": "details.compute_partition, partition_share",
    "amdsmi_get_gpu_memory_partition": "details.memory_partition",
    "amdsmi_get_gpu_kfd_info": "details.partition_id",
    "amdsmi_get_gpu_activity": "utilization_percent",
    "amdsmi_get_gpu_memory_usage": "memory_used_bytes",
    "amdsmi_get_gpu_memory_total": "memory_total_bytes",
    "amdsmi_get_gpu_vram_usage": "memory (MiB fallback)",
    "amdsmi_get_temp_metric": "temperature_celsius",
    "amdsmi_get_power_info": "power_watts",
    "amdsmi_get_power_cap_info": "power_limit_watts",
    "amdsmi_get_energy_count": "energy_joules",
    "amdsmi_get_clock_info": "clock_mhz",
    "amdsmi_get_gpu_fan_speed": "fan_percent",
    "amdsmi_get_gpu_fan_speed_max": "fan_percent",
    "amdsmi_get_gpu_total_ecc_count": "details.ecc_*",
    "amdsmi_get_gpu_process_list": "processes",
    "amdsmi_get_gpu_metrics_info": "compute_active_percent, memory_bandwidth_percent, "
                                   "interconnect traffic",
}

#: The enums the calls take, with the readings that need them (missing ones are reported
#: with the functions: such an amdsmi cannot make those calls).
ENUMS: dict[str, str] = {
    "AmdSmiTemperatureType": "temperature_celsius",
    "AmdSmiTemperatureMetric": "temperature_celsius",
    "AmdSmiClkType": "clock_mhz",
    "AmdSmiMemoryType": "memory_used_bytes, memory_total_bytes",
}

#: What each function or enum gives.
READINGS: dict[str, str] = {**FUNCTIONS, **ENUMS}


def missing_functions(module: ModuleType) -> list[str]:
    """The functions of :data:`FUNCTIONS` and the enums of :data:`ENUMS` this amdsmi package
    does not have (:data:`READINGS` names the readings each gives)."""
    return [name for name in READINGS if not callable(getattr(module, name, None))]


def status_code(exc: BaseException) -> int | None:
    """The amdsmi status code an exception carries, else ``None``."""
    code = getattr(exc, "err_code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def describe(exc: BaseException) -> str:
    """A one-line message for an amdsmi exception (or any other)."""
    get_info = getattr(exc, "get_error_info", None)
    if callable(get_info):
        try:
            return str(get_info())
        except Exception:  # noqa: BLE001 - fall back to the generic text
            pass
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def init_failure(exc: BaseException) -> BackendError:
    """The backend error for a failed ``amdsmi_init``: absent stack vs broken stack."""
    code = status_code(exc)
    detail = describe(exc)
    if code == STATUS_DRIVER_NOT_LOADED:
        return BackendUnavailable(f"amdgpu driver not loaded ({detail})")
    if code in (STATUS_FAIL_LOAD_MODULE, STATUS_FAIL_LOAD_SYMBOL):
        return BackendUnavailable(f"amdsmi could not load the ROCm libraries ({detail})")
    if code == STATUS_NOT_FOUND:
        return BackendUnavailable(f"amdsmi found no AMD GPU ({detail})")
    if code == STATUS_NO_PERM:
        return BackendError("permission denied initialising amdsmi: run as root or add the "
                            f"user to the render and video groups ({detail})")
    return BackendError(f"amdsmi_init failed: {detail}")


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one (a failed or odd answer)."""
    return value if isinstance(value, Mapping) else {}


class Calls:
    """Runs one device's amdsmi calls and sorts the failures.

    "Not supported" answers count as answers (the device replied); NO_PERM is
    an answer plus a permission note; a function this amdsmi lacks is no
    answer and no error (version drift); anything else (library errors, and
    ``ValueError`` and friends from amdsmi's own conversions on garbage) is an
    error. A device with errors and no answers is lost; with both, degraded.
    """

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self.answered = 0
        self.errors: dict[str, list[str]] = {}
        """Failed calls grouped by error text, so one cause is reported once."""
        self.denied: list[str] = []

    def __call__(self, what: str, function: str, *args: Any) -> Any:
        fn = getattr(self._module, function, None)
        if not callable(fn):  # older amdsmi packages lack some calls: not available
            return None
        try:
            result = fn(*args)
        except Exception as exc:  # noqa: BLE001 - one bad call must not stop the device
            code = status_code(exc)
            if code in NOT_AVAILABLE:
                self.answered += 1
            elif code == STATUS_NO_PERM:
                self.answered += 1
                self.denied.append(what)
            else:
                self.errors.setdefault(describe(exc), []).append(what)
            return None
        self.answered += 1
        return result

    @property
    def health(self) -> str:
        if not self.errors:
            return "ok"
        return "lost" if self.answered == 0 else "degraded"

    def messages(self, label: str) -> list[str]:
        out = []
        if self.errors and self.answered == 0:
            failed = sum(len(whats) for whats in self.errors.values())
            out.append(f"{label}: not answering ({'; '.join(self.errors)}; {failed} calls failed)")
        elif self.errors:
            out.append(f"{label}: " + "; ".join(
                f"{', '.join(whats)} failed: {error}" for error, whats in self.errors.items()))
        if self.denied:
            out.append(f"{label}: permission denied reading {', '.join(self.denied)} "
                       "(run as root or join the render and video groups)")
        return out

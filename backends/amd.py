"""AMD GPUs through the ``amdsmi`` Python package (ROCm's ``libamd_smi``).

``amdsmi`` is imported lazily, with stdout captured at the file-descriptor
level (see :mod:`allsmi.backends._amdsmi_loader`): without ROCm its import
prints to stdout and raises ``KeyError``, which becomes an "unavailable" probe
with a reason. Static facts are read once in :meth:`AmdBackend.open`; each
:meth:`AmdBackend.sample` reads the rest per processor handle. Units and the
partition rules are documented in ``docs/backends/amd.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

import psutil

from allsmi.backend_api import Backend, BackendError, BackendUnavailable, ProbeResult
from allsmi.backends import _amdsmi_convert as conv
from allsmi.backends._amdsmi_loader import (
    AmdsmiLoadError,
    load_amdsmi,
    package_version,
    quiet_stdout,
)
from allsmi.backends._amdsmi_partitions import PlannedDevice, arrange
from allsmi.fields import MEASUREMENTS
from allsmi.schema import DetailValue, DeviceSample, ProcessSample

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
_NOT_AVAILABLE = frozenset({STATUS_NOT_SUPPORTED, STATUS_NOT_YET_IMPLEMENTED, STATUS_NO_DATA})

ProcessLookup = Callable[[int], "tuple[str | None, str | None]"]
"""``pid -> (user, process name)`` on the host; ``(None, None)`` when unknown."""


def host_process(pid: int) -> tuple[str | None, str | None]:
    """The owner and name of a host process, from psutil."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            try:
                user: str | None = proc.username()
            except (psutil.Error, KeyError):  # KeyError: uid without a passwd entry
                user = None
            try:
                name: str | None = proc.name() or None
            except psutil.Error:
                name = None
    except psutil.Error:
        return None, None
    return user, name


def _status_code(exc: BaseException) -> int | None:
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
    code = _status_code(exc)
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


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class _Calls:
    """Runs one device's amdsmi calls and sorts the failures.

    "Not supported" answers count as answers (the device replied); NO_PERM is
    an answer plus a permission note; anything else (library errors, and
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
        if fn is None:  # older amdsmi packages lack some calls: not available
            return None
        try:
            result = fn(*args)
        except Exception as exc:  # noqa: BLE001 - one bad call must not stop the device
            code = _status_code(exc)
            if code in _NOT_AVAILABLE:
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


@dataclass
class _Readings:
    values: dict[str, Any] = field(default_factory=dict)
    details: dict[str, DetailValue] = field(default_factory=dict)
    #: None until the process list was read: a failed read leaves "who uses it" unknown.
    processes: tuple[ProcessSample, ...] | None = None


class AmdBackend(Backend):
    """AMD Instinct and Radeon GPUs through amdsmi; MI300 partitions as child devices."""

    name = "amd"
    vendor = "amd"
    kind = "gpu"

    def __init__(self, *, timeout_seconds: float = 5.0,
                 options: Mapping[str, Any] | None = None,
                 loader: Callable[[], ModuleType] = load_amdsmi,
                 process_lookup: ProcessLookup = host_process) -> None:
        """``loader`` returns the ``amdsmi`` module (raising :class:`AmdsmiLoadError`
        when absent); ``process_lookup`` resolves a pid to its host user and name.

        amdsmi calls run in-process and cannot be interrupted, so
        ``timeout_seconds`` is left to the collector's per-backend timeout.
        """
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._loader = loader
        self._process_lookup = process_lookup
        self._module: ModuleType | None = None
        self._load_details: dict[str, str] = {}
        self._initialised = False
        self._devices: list[PlannedDevice] = []
        self._static_warnings: list[str] = []

    # -- life cycle ---------------------------------------------------------

    def _load(self) -> ModuleType:
        if self._module is not None:
            return self._module
        try:
            module = self._loader()
        except AmdsmiLoadError as exc:
            first_line = exc.output.strip().splitlines()[0] if exc.output.strip() else ""
            self._load_details = {"loader_output": first_line} if first_line else {}
            raise BackendUnavailable(exc.reason) from exc
        except Exception as exc:  # noqa: BLE001 - an injected loader's failure means absent
            raise BackendUnavailable(f"importing amdsmi failed: {describe(exc)}") from exc
        self._module = module
        return module

    def probe(self) -> ProbeResult:
        """Import amdsmi and count GPUs (init, list, shut down); never raises."""
        details: dict[str, str] = {}
        version = package_version()
        if version:
            details["amdsmi_package"] = version
        if self._initialised:
            details["gpus"] = str(len(self._devices))
            return ProbeResult(True, "", details)
        try:
            module = self._load()
        except BackendUnavailable as exc:
            details.update(self._load_details)
            return ProbeResult(False, str(exc), details)
        try:
            with quiet_stdout():
                count, library = self._count_gpus(module)
        except Exception as exc:  # noqa: BLE001 - probe never raises
            failure = exc if isinstance(exc, BackendError) else init_failure(exc)
            return ProbeResult(False, str(failure), details)
        if library:
            details["library_version"] = library
        details["gpus"] = str(count)
        if count == 0:
            return ProbeResult(False, "amdsmi found no AMD GPU", details)
        return ProbeResult(True, "", details)

    @staticmethod
    def _count_gpus(module: ModuleType) -> tuple[int, str]:
        try:
            module.amdsmi_init(module.AmdSmiInitFlags.INIT_AMD_GPUS)
        except Exception as exc:  # noqa: BLE001 - classified by init_failure
            raise init_failure(exc) from exc
        try:
            try:
                count = len(module.amdsmi_get_processor_handles())
            except Exception as exc:  # noqa: BLE001
                raise BackendError(f"amdsmi could not list the GPUs: {describe(exc)}") from exc
            try:
                v = module.amdsmi_get_lib_version()
                library = f"{v['major']}.{v['minor']}.{v['release']}"
            except Exception:  # noqa: BLE001 - the version is a nicety for doctor
                library = ""
            return count, library
        finally:
            try:
                module.amdsmi_shut_down()
            except Exception:  # noqa: BLE001 - nothing to release if this fails
                pass

    def open(self) -> None:
        """Initialise amdsmi, list the GPUs and read their static facts once."""
        if self._initialised:
            return
        module = self._load()
        init_error: Exception | None = None
        with quiet_stdout():
            try:
                module.amdsmi_init(module.AmdSmiInitFlags.INIT_AMD_GPUS)
            except Exception as exc:  # noqa: BLE001 - classified below
                init_error = exc
        if init_error is not None:
            raise init_failure(init_error) from init_error
        self._initialised = True
        try:
            handles = list(module.amdsmi_get_processor_handles())
        except Exception as exc:  # noqa: BLE001
            self.close()
            raise BackendError(f"amdsmi could not list the GPUs: {describe(exc)}") from exc
        warnings: list[str] = []
        planned = [self._read_static(module, index, handle, warnings)
                   for index, handle in enumerate(handles)]
        self._devices = arrange(planned)
        self._static_warnings = warnings

    def close(self) -> None:
        """Shut amdsmi down if this backend initialised it. Idempotent; never raises."""
        if not self._initialised:
            return
        self._initialised = False
        self._devices = []
        module = self._module
        if module is None:
            return
        try:
            with quiet_stdout():
                module.amdsmi_shut_down()
        except Exception:  # noqa: BLE001 - close never raises
            pass

    # -- static facts -------------------------------------------------------

    @staticmethod
    def _read_static(module: ModuleType, index: int, handle: Any,
                     warnings: list[str]) -> PlannedDevice:
        calls = _Calls(module)
        dev = PlannedDevice(index=index, handle=handle)
        dev.bus_id = conv.text(calls("BDF", "amdsmi_get_gpu_device_bdf", handle))
        dev.uuid = conv.text(calls("uuid", "amdsmi_get_gpu_device_uuid", handle))
        asic = _mapping(calls("ASIC info", "amdsmi_get_gpu_asic_info", handle))
        dev.name = conv.text(asic.get("market_name"))
        if dev.name is None:
            # Some releases leave market_name empty; the board FRU has the product.
            board = _mapping(calls("board info", "amdsmi_get_gpu_board_info", handle))
            dev.name = conv.text(board.get("product_name"))
        driver = _mapping(calls("driver info", "amdsmi_get_gpu_driver_info", handle))
        dev.driver_version = conv.text(driver.get("driver_version"))
        vbios = _mapping(calls("VBIOS info", "amdsmi_get_gpu_vbios_info", handle))
        dev.firmware_version = conv.text(vbios.get("version"))
        dev.compute_partition = conv.text(
            calls("compute partition", "amdsmi_get_gpu_compute_partition", handle))
        dev.memory_partition = conv.text(
            calls("memory partition", "amdsmi_get_gpu_memory_partition", handle))
        kfd = _mapping(calls("KFD info", "amdsmi_get_gpu_kfd_info", handle))
        partition_id = conv.reading(kfd.get("current_partition_id"))
        dev.partition_id = int(partition_id) if partition_id is not None else None

        details = dev.details
        gfx_version = conv.text(asic.get("target_graphics_version"))
        if gfx_version:
            details["gfx_version"] = gfx_version
        compute_units = conv.reading(asic.get("num_compute_units"))
        if compute_units is not None:
            details["compute_units"] = int(compute_units)
        part_number = conv.text(vbios.get("part_number"))
        if part_number:
            details["vbios_part_number"] = part_number
        if dev.compute_partition:
            details["compute_partition"] = dev.compute_partition
        if dev.memory_partition:
            details["memory_partition"] = dev.memory_partition
        label = dev.bus_id or f"GPU {index}"
        warnings.extend(f"static facts of {m}" for m in calls.messages(label))
        return dev

    # -- sampling -----------------------------------------------------------

    def sample(self) -> Sequence[DeviceSample]:
        """Read every device; a failing device is marked lost or degraded, never dropped."""
        if not self._initialised or self._module is None:
            raise BackendError("the amd backend is not open")
        self.warnings = list(self._static_warnings)
        return [self._sample_device(self._module, dev) for dev in self._devices]

    def _sample_device(self, module: ModuleType, dev: PlannedDevice) -> DeviceSample:
        calls = _Calls(module)
        readings = self._read_dynamic(module, calls, dev)
        health = calls.health
        self.warnings.extend(calls.messages(dev.label))
        details: dict[str, DetailValue] = dict(dev.details)
        if dev.partition_id is not None:
            details["partition_id"] = dev.partition_id
        values: dict[str, Any] = {}
        processes: tuple[ProcessSample, ...] | None = None
        if health != "lost":
            values = self._plausible(dev, readings.values)
            details.update(readings.details)
            processes = readings.processes
        return DeviceSample(
            id=dev.id, vendor=self.vendor, kind=self.kind, backend=self.name,
            index=dev.index, uuid=dev.uuid, name=dev.name, bus_id=dev.bus_id,
            driver_version=dev.driver_version, firmware_version=dev.firmware_version,
            parent=dev.parent, health=health, processes=processes, details=details,
            **values)

    def _plausible(self, dev: PlannedDevice, values: dict[str, Any]) -> dict[str, Any]:
        # Out-of-range numbers are garbage from the device, not readings.
        for m in MEASUREMENTS:
            value = values.get(m.field)
            if value is None:
                continue
            if (m.minimum is not None and value < m.minimum) or \
                    (m.maximum is not None and value > m.maximum):
                self.warnings.append(f"{dev.label}: ignored implausible {m.field}={value}")
                values[m.field] = None
        used, total = values.get("memory_used_bytes"), values.get("memory_total_bytes")
        if total is not None and total < 1024 ** 2:
            self.warnings.append(f"{dev.label}: ignored implausible memory_total_bytes={total}")
            values["memory_total_bytes"] = total = None
        if used is not None and total is not None and used > total:
            self.warnings.append(f"{dev.label}: ignored memory used {used} above total {total}")
            values["memory_used_bytes"] = None
        return values

    def _read_dynamic(self, module: ModuleType, calls: _Calls, dev: PlannedDevice) -> _Readings:
        h = dev.handle
        out = _Readings()
        values, details = out.values, out.details

        activity = _mapping(calls("activity", "amdsmi_get_gpu_activity", h))
        values["utilization_percent"] = conv.activity_percent(activity.get("gfx_activity"))
        umc = conv.activity_percent(activity.get("umc_activity"))
        if umc is not None:
            details["memory_activity_percent"] = umc

        values["memory_used_bytes"], values["memory_total_bytes"] = self._vram(module, calls, h)

        temp_type = module.AmdSmiTemperatureType
        current = module.AmdSmiTemperatureMetric.CURRENT
        hotspot = conv.temperature_celsius(
            calls("hotspot temperature", "amdsmi_get_temp_metric", h, temp_type.HOTSPOT, current))
        edge = conv.temperature_celsius(
            calls("edge temperature", "amdsmi_get_temp_metric", h, temp_type.EDGE, current))
        memory_temp = conv.temperature_celsius(
            calls("memory temperature", "amdsmi_get_temp_metric", h, temp_type.VRAM, current))
        # Hotspot (junction) is the primary: MI300 parts have no edge sensor.
        if hotspot is not None:
            values["temperature_celsius"] = hotspot
            details["temperature_sensor"] = "hotspot"
        elif edge is not None:
            values["temperature_celsius"] = edge
            details["temperature_sensor"] = "edge"
        if edge is not None:
            details["edge_temperature_celsius"] = edge
        if memory_temp is not None:
            details["memory_temperature_celsius"] = memory_temp

        if dev.owns_board:
            power_info = _mapping(calls("power", "amdsmi_get_power_info", h))
            power, source = conv.socket_power_watts(power_info)
            values["power_watts"] = power
            if source:
                details["power_source"] = source
            cap = conv.power_cap_watts(_mapping(calls("power cap", "amdsmi_get_power_cap_info", h)))
            values["power_limit_watts"] = cap if cap is not None else conv.power_limit_watts(power_info)
            values["energy_joules"] = conv.energy_joules(
                _mapping(calls("energy", "amdsmi_get_energy_count", h)))

        clock_type = module.AmdSmiClkType
        values["clock_mhz"] = conv.clock_mhz(
            _mapping(calls("GFX clock", "amdsmi_get_clock_info", h, clock_type.GFX)))
        memory_clock = conv.clock_mhz(
            _mapping(calls("memory clock", "amdsmi_get_clock_info", h, clock_type.MEM)))
        if memory_clock is not None:
            details["memory_clock_mhz"] = memory_clock

        speed = calls("fan speed", "amdsmi_get_gpu_fan_speed", h, 0)
        if speed is not None:
            values["fan_percent"] = conv.fan_percent(
                speed, calls("fan speed max", "amdsmi_get_gpu_fan_speed_max", h, 0))

        if dev.owns_board:
            # ECC counters belong to the board's memory, like power: once per board.
            ecc = _mapping(calls("ECC counts", "amdsmi_get_gpu_total_ecc_count", h))
            for key, name in (("correctable_count", "ecc_correctable_total"),
                              ("uncorrectable_count", "ecc_uncorrectable_total"),
                              ("deferred_count", "ecc_deferred_total")):
                count = conv.counter(ecc.get(key))
                if count is not None:
                    details[name] = count

        rows = calls("processes", "amdsmi_get_gpu_process_list", h)
        if isinstance(rows, list):
            out.processes = self._processes(dev, rows)
        return out

    @staticmethod
    def _vram(module: ModuleType, calls: _Calls, h: Any) -> tuple[int | None, int | None]:
        vram = module.AmdSmiMemoryType.VRAM
        # Byte-exact calls first; amdsmi_get_gpu_vram_usage truncates to MiB.
        used = conv.byte_count(calls("memory usage", "amdsmi_get_gpu_memory_usage", h, vram))
        total = conv.byte_count(calls("memory total", "amdsmi_get_gpu_memory_total", h, vram))
        if used is None or total is None:
            usage = _mapping(calls("VRAM usage", "amdsmi_get_gpu_vram_usage", h))
            if used is None:
                used = conv.mib_to_bytes(usage.get("vram_used"))
            if total is None:
                total = conv.mib_to_bytes(usage.get("vram_total"))
        if total == 0:
            total = None
        return used, total

    def _processes(self, dev: PlannedDevice, rows: list[Any]) -> tuple[ProcessSample, ...]:
        by_pid: dict[int, ProcessSample] = {}
        skipped = 0
        for row in rows:
            row = _mapping(row)
            pid = conv.reading(row.get("pid"), conv.SENTINELS_U32)
            if pid is None or pid <= 0 or not float(pid).is_integer():
                skipped += 1
                continue
            pid = int(pid)
            memory = conv.byte_count(_mapping(row.get("memory_usage")).get("vram_mem"))
            if memory is None:
                memory = conv.byte_count(row.get("mem"))
            previous = by_pid.get(pid)
            if previous is not None:
                # One pid listed twice: keep the larger footprint.
                if (memory or 0) > (previous.memory_bytes or 0):
                    by_pid[pid] = ProcessSample(pid=pid, user=previous.user,
                                                command=previous.command, memory_bytes=memory)
                continue
            user, host_name = self._process_lookup(pid)
            command = conv.text(row.get("name")) or host_name
            by_pid[pid] = ProcessSample(pid=pid, user=user, command=command, memory_bytes=memory)
        if skipped:
            self.warnings.append(f"{dev.label}: skipped {skipped} process row(s) without a valid pid")
        return tuple(by_pid.values())

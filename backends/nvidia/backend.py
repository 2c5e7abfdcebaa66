"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

Static facts (name, uuid, bus id, index, driver and VBIOS version, ECC mode, the MIG layout) are
read in :meth:`NvidiaBackend.open` (the MIG layout again later: ``layout.py``). Each
:meth:`NvidiaBackend.sample` then makes at most ten library calls per GPU (eleven with processes:
their activity, ``procutil.py``), on a small thread pool: one thread a cycle while NVML answers
fast, every thread when it is slow or a GPU hangs (``schedule.py``):

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

With GPM (Hopper and later), two more per GPU or MIG GPU instance for the honest activity
figures: ``nvmlGpmSampleGet`` (``nvmlGpmMigSampleGet``) and ``nvmlGpmMetricsGet`` (``gpm.py``).

The field-value batch asks for ``NVML_FI_DEV_POWER_AVERAGE`` (what ``nvmlDeviceGetPowerUsage``
returns on Ampere and newer, except GA100), ``NVML_FI_DEV_POWER_INSTANT`` (what it returns on older
parts), ``NVML_FI_DEV_POWER_CURRENT_LIMIT`` (the enforced limit),
``NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` and, where ECC is on, the four ECC totals. A field the
driver does not know falls back to the dedicated call (``nvmlDeviceGetPowerUsage``,
``nvmlDeviceGetEnforcedPowerLimit``, ``nvmlDeviceGetTotalEnergyConsumption``).

A call that answers NotSupported (or FunctionNotFound) gives ``None`` and is never asked again for
that device. GpuIsLost marks that one device ``lost`` for good; Unknown marks it ``lost`` for this
cycle only. See ``docs/backends/nvidia.md``. """

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from allsmi.backend_api import Backend, BackendError, BackendUnavailable, ProbeResult
from allsmi.backends._common.owners import ProcessOwners
# probe() needs only the binding's loader: the device model and the reads are imported by
# open(), once NVML has loaded (_import_reading), so a machine without NVIDIA pays for neither.
from allsmi.backends.nvidia import DECLARATION, nvml
from allsmi.backends.nvidia.nvml import NvmlAbsent, NvmlBroken
from allsmi.schema import DetailValue, DeviceSample, derive

if TYPE_CHECKING:  # the readers are imported by open(), where there are GPUs to read
    from allsmi.backends.nvidia.devices import (
        ECC_FIELDS, FI_POWER_AVERAGE, FI_POWER_CURRENT_LIMIT, FI_POWER_INSTANT,
        FI_TOTAL_ENERGY_CONSUMPTION, NVML_CLOCK_SM, reason_names, ecc_count,
        NVML_PSTATE_UNKNOWN, DeviceFault, Gpu, Reader, mark_lost, milli, number, percent)
    from allsmi.backends.nvidia.gpm import GpmReader
    from allsmi.backends.nvidia.layout import follow as follow_layout
    from allsmi.backends.nvidia.mig import Mig, MigReads
    from allsmi.backends.nvidia.processes import ProcessOwner, read_processes
    from allsmi.backends.nvidia.procutil import ProcessUtilizationReader
    from allsmi.backends.nvidia.read import DriverReads
    from allsmi.backends.nvidia.schedule import ReaderPool, ReadSchedule
    from allsmi.backends.nvidia.static import open_gpu

def _import_reading() -> None:
    """Bind the device model's and the reads' names here, once NVML has loaded."""
    global ECC_FIELDS, FI_POWER_AVERAGE, FI_POWER_CURRENT_LIMIT, FI_POWER_INSTANT
    global FI_TOTAL_ENERGY_CONSUMPTION, NVML_CLOCK_SM, reason_names, read_processes, DriverReads
    global NVML_PSTATE_UNKNOWN, DeviceFault, Reader, mark_lost, milli, number, percent, ecc_count
    global open_gpu, ProcessUtilizationReader, follow_layout, MigReads
    from allsmi.backends.nvidia.devices import (
        ECC_FIELDS, FI_POWER_AVERAGE, FI_POWER_CURRENT_LIMIT, FI_POWER_INSTANT,
        FI_TOTAL_ENERGY_CONSUMPTION, NVML_CLOCK_SM, reason_names, ecc_count,
        NVML_PSTATE_UNKNOWN, DeviceFault, Reader, mark_lost, milli, number, percent)
    from allsmi.backends.nvidia.layout import follow as follow_layout
    from allsmi.backends.nvidia.mig import MigReads
    from allsmi.backends.nvidia.processes import read_processes
    from allsmi.backends.nvidia.procutil import ProcessUtilizationReader
    from allsmi.backends.nvidia.read import DriverReads
    from allsmi.backends.nvidia.static import open_gpu


class NvidiaBackend(Backend, declared=DECLARATION):
    """NVIDIA GPUs and their MIG instances, read through NVML.

    Options (``[backends.nvidia]``): ``workers`` (threads that may read GPUs
    at once, default 8), ``processes`` (list processes, default true),
    ``pcie_throughput`` (also read PCIe TX/RX, which samples a 20 ms window
    per direction; default false), ``gpm`` (GPM activity, Hopper on; default true).
    """

    fresh_samples = True
    """Each sample is new and kept by nothing here (derived from its GPU's template): the
    collector completes it in place rather than copying it (``allsmi.collection.collector._Completing``)."""

    def __init__(self, *, timeout_seconds: float = 5.0,
                 options: Mapping[str, Any] | None = None,
                 process_owner: ProcessOwner | None = None) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._process_owner: ProcessOwner = process_owner or ProcessOwners()
        self._pynvml: ModuleType | None = None
        self._gpus: list[Gpu] | None = None
        self._driver_version: str | None = None
        self._pool: ReaderPool | None = None
        self._schedule: ReadSchedule[tuple[list[DeviceSample], list[str]]] | None = None
        self._process_reader: nvml.ProcessListReader | None = None
        self._activity_reader: ProcessUtilizationReader | None = None
        self._open_warnings: list[str] = []
        self._driver: DriverReads | None = None
        self._gpm: GpmReader | None = None
        self._want_processes = self._want_pcie = False  # the options, read at open

    # -- life cycle --------------------------------------------------------
    def quick_probe(self) -> ProbeResult | None:
        """Absent without an NVML call: see :func:`allsmi.backends.nvidia.nvml.quick_probe`."""
        return nvml.quick_probe(self.device_nodes)

    def probe(self) -> ProbeResult:
        """Whether NVML loads and sees a GPU. Never raises.

        NVML stays initialised afterwards: it is initialised once per process
        and shared by every instance (see :func:`allsmi.backends.nvidia.nvml.ensure_init`).
        """
        if (quick := self.quick_probe()) is not None:  # nothing NVIDIA: pynvml not even imported
            return quick
        details = nvml.binding_details()
        try:
            pynvml = nvml.ensure_init()
        except NvmlAbsent as exc:
            return ProbeResult(False, str(exc), details)
        except NvmlBroken as exc:
            # Present but refusing (no permission, version mismatch): not "absent".
            # open() raises the same message, so the backend's status is "error".
            details["problem"] = str(exc)
            return ProbeResult(True, "", details)
        except Exception as exc:  # probe never raises, whatever the bindings do
            return ProbeResult(False, f"NVML probe failed: {exc!r}", details)
        try:
            count = pynvml.nvmlDeviceGetCount()
            for key, fn in (("driver_version", pynvml.nvmlSystemGetDriverVersion),
                            ("nvml_version", pynvml.nvmlSystemGetNVMLVersion)):
                try:
                    value = nvml.text(fn())
                except pynvml.NVMLError:
                    value = None
                if value:
                    details[key] = value
        except pynvml.NVMLError as exc:
            _, message = nvml.describe_init_failure(exc)
            return ProbeResult(False, f"nvmlDeviceGetCount: {message}", details)
        except Exception as exc:  # probe never raises, whatever the library does
            return ProbeResult(False, f"NVML probe failed: {exc!r}", details)
        details["gpus"] = str(count)
        if count == 0:
            return ProbeResult(False, "NVML found no NVIDIA GPU", details)
        return ProbeResult(True, "", details)

    def open(self) -> None:
        """Initialise NVML (once per process), enumerate GPUs and read static facts."""
        self._want_processes = self.option("processes")
        self._want_pcie = self.option("pcie_throughput")
        want_gpm, wanted_workers = self.option("gpm"), self.option("workers")
        absent = nvml.quick_absence(self.device_nodes)
        if absent:
            raise BackendUnavailable(absent)
        try:
            pynvml = nvml.ensure_init()
        except NvmlAbsent as exc:
            raise BackendUnavailable(str(exc)) from exc
        except NvmlBroken as exc:
            raise BackendError(str(exc)) from exc
        except Exception as exc:
            raise BackendError(f"initialising NVML failed: {exc!r}") from exc
        self._pynvml = pynvml
        _import_reading()
        self._driver = DriverReads(pynvml)
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            absent, message = nvml.describe_init_failure(exc)
            raise (BackendUnavailable if absent else BackendError)(
                f"nvmlDeviceGetCount: {message}") from exc
        try:
            self._driver_version = nvml.text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self._driver_version = None
        self._process_reader = nvml.ProcessListReader(pynvml)
        self._activity_reader = ProcessUtilizationReader(pynvml)
        self._open_warnings = []
        self._gpus = []
        for index in range(count):
            gpu, warnings = open_gpu(pynvml, index)
            self._gpus.append(gpu)
            self._open_warnings.extend(warnings)
        if want_gpm:
            from allsmi.backends.nvidia.gpm import GpmReader
            self._gpm = GpmReader(pynvml).opened(self._gpus, self._open_warnings)
        workers = min(count, wanted_workers)
        if workers > 1:
            from allsmi.backends.nvidia.schedule import ReaderPool, ReadSchedule
            self._pool = ReaderPool(max_workers=workers, thread_name_prefix="allsmi-nvml")
            self._schedule = ReadSchedule(self._pool, workers, self._read_gpu)

    def close(self) -> None:
        """Drop the handles and the thread pool, free the GPM samples. NVML itself stays
        initialised for the process."""
        schedule, self._pool, self._schedule = self._schedule, None, None
        if schedule is not None:
            schedule.close()  # its first reader's thread and its pool
        gpm, self._gpm = self._gpm, None
        if gpm is not None:
            gpm.close(self._gpus or [])
        self._gpus = None

    @property
    def sample_isolated(self) -> bool:
        """With a reader pool: every NVML call is on a reader, waited for within the timeout."""
        return self._schedule is not None

    def sample(self) -> Sequence[DeviceSample]:
        """Every GPU, each followed by its MIG instances."""
        self.warnings = list(self._open_warnings)
        self._open_warnings = []
        gpus = self._gpus
        if gpus is None:
            raise BackendError("the NVIDIA backend was not opened")
        if self._gpm is not None:
            self._gpm.settle()  # the first cycle after open: its interval is 0.1 s at least
        if self._schedule is None:
            results = [self._read_gpu(gpu) for gpu in gpus]
        else:  # one reader thread while the library is fast, more when it is slow or hangs
            results = [self._unanswered(gpu) if result is None else result for gpu, result in
                       zip(gpus, self._schedule.run(gpus, self.timeout_seconds))]
        samples: list[DeviceSample] = []
        for devices, warnings in results:
            samples.extend(devices)
            self.warnings.extend(warnings)
        return samples

    # -- open ----------------------------------------------------------------

    def _reads(self) -> DriverReads:
        if self._driver is None:
            raise BackendError("the NVIDIA backend was not opened")
        return self._driver

    def _nvml(self) -> ModuleType:
        if self._pynvml is None:
            raise BackendError("the NVIDIA backend was not opened")
        return self._pynvml

    # -- sample ----------------------------------------------------------------

    def _unanswered(self, gpu: Gpu) -> tuple[list[DeviceSample], list[str]]:
        message = f"{gpu.label}: NVML did not answer within {self.timeout_seconds:g} s"
        devices = [self._device(gpu, health="unknown", details={"error": message})]
        devices.extend(self._mig_device(gpu, mig, health="unknown") for mig in gpu.migs)
        return devices, [message]

    def _read_gpu(self, gpu: Gpu) -> tuple[list[DeviceSample], list[str]]:
        """One GPU and its MIG instances; never raises."""
        pynvml = self._nvml()
        reader = Reader(pynvml, gpu.label)
        if gpu.lost_reason is None:
            try:
                if gpu.mig_enabled is not None:  # instances come and go (layout.py)
                    follow_layout(pynvml, gpu, reader, self._gpm, self._reads().calls)
                return self._read_gpu_values(gpu, reader), reader.warnings
            except DeviceFault as fault:
                mark_lost(gpu, fault)
                reason = str(fault)
            except Exception as exc:  # one device's surprise never drops the others
                reader.warnings.append(f"{gpu.label}: unexpected failure: {exc!r}")
                return ([self._device(gpu, health="unknown", details={"error": repr(exc)},
                                      processes=None)]
                        + [self._mig_device(gpu, m, health="unknown", processes=None)
                           for m in gpu.migs], reader.warnings)
        else:
            reason = gpu.lost_reason
        # (who used it is unknown, never "nobody": processes None)
        devices = [self._device(gpu, health="lost", details={"error": reason}, processes=None)]
        devices.extend(self._mig_device(gpu, mig, health="lost", processes=None)
                       for mig in gpu.migs)
        return devices, reader.warnings

    def _read_gpu_values(self, gpu: Gpu, r: Reader) -> list[DeviceSample]:
        pynvml = self._nvml()
        handle, skip = gpu.handle, gpu.skip
        details: dict[str, DetailValue] = {}
        if gpu.mig_enabled is not None:
            details["mig_mode"] = gpu.mig_enabled

        reads = self._reads()
        util = reads.utilization(r, skip, handle)
        utilization = percent(util[0]) if util is not None else None
        if util is not None:
            details["memory_activity_percent"] = percent(util[1])

        used, total, reserved, version = reads.memory(r, skip, handle)
        if reserved is not None:
            details["memory_reserved_bytes"] = reserved
        if version is not None:
            details["memory_info_version"] = version

        temperature = reads.temperature(r, skip, handle)
        fields = reads.field_values(r, gpu)

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
        for fid, key in ECC_FIELDS.items():
            count = ecc_count(fields.get(fid))  # None: a sentinel, a fraction, a negative
            if count is not None:
                details[key] = count

        clock = number(reads.uint(r, skip, "clock_sm", "nvmlDeviceGetClockInfo", handle, NVML_CLOCK_SM))
        fan = number(reads.uint(r, skip, "fan_speed", "nvmlDeviceGetFanSpeed", handle))
        if fan is not None and fan > 100.0:
            # NVML allows a fan to run above its nominal maximum
            details["fan_speed_raw_percent"] = fan
            fan = 100.0

        pstate = reads.uint(r, skip, "performance_state", "nvmlDeviceGetPerformanceState", handle)
        if isinstance(pstate, int) and 0 <= pstate < NVML_PSTATE_UNKNOWN:
            details["pstate"] = f"P{pstate}"
        reasons = reads.clock_event_reasons(r, skip, handle)
        if reasons is not None:
            details["clocks_event_reasons_mask"] = reasons
            details["clocks_event_reasons"] = reason_names(reasons)

        if self._want_pcie:
            details.update(reads.pcie_throughput(r, skip, handle))

        activity = self._gpm.read(gpu.gpm, handle, r.warnings) if self._gpm else {}
        if self._want_processes and self._process_reader is not None:
            own, per_mig = read_processes(r, gpu, self._process_reader, self._process_owner,
                                          self._activity_reader)
        else:  # not asked: who uses the GPU is unknown, not "nobody"
            own, per_mig = None, {}
        devices = [self._device(
            gpu, health="ok", details=details,
            utilization_percent=utilization,
            memory_used_bytes=used, memory_total_bytes=total,
            temperature_celsius=temperature,
            power_watts=milli(power_mw),
            power_limit_watts=milli(limit_mw),
            energy_joules=milli(energy_mj),
            clock_mhz=clock, fan_percent=fan, processes=own, **activity)]
        on_migs = MigReads(r)
        for mig in gpu.migs:
            mig_used, mig_total, mig_reserved, _ = reads.memory(on_migs.on(mig), mig.skip, mig.handle)
            if on_migs.gone:  # destroyed since listed: left out, listed again next cycle
                mig.stale = gpu.mig_relist = True
                continue
            mig_details: dict[str, DetailValue] = {}
            if mig_reserved is not None:
                mig_details["memory_reserved_bytes"] = mig_reserved
            target = gpu.gpm_instances.get(-1 if mig.gpu_instance_id is None else mig.gpu_instance_id)
            mig_activity = self._gpm.read(target, handle, r.warnings) if self._gpm else {}
            devices.append(self._mig_device(
                gpu, mig, health="ok", details=mig_details, **mig_activity,
                memory_used_bytes=mig_used, memory_total_bytes=mig_total,
                processes=None if own is None else per_mig.get(mig.slot, ())))
        return devices

    # -- building samples --------------------------------------------------------

    def _device(self, gpu: Gpu, *, health: str,
                details: Mapping[str, DetailValue] | None = None, **values: Any) -> DeviceSample:
        """The GPU's template (its facts read at open, cleaned once) with this cycle's values,
        only those cleaned (:func:`derive`: the same sample as one built whole)."""
        template = gpu.template
        if template is None:
            template = gpu.template = DeviceSample(
                id=gpu.id, vendor=self.vendor, kind=self.kind, backend=self.name,
                index=gpu.index, uuid=gpu.uuid, name=gpu.name, bus_id=gpu.bus_id,
                driver_version=self._driver_version, firmware_version=gpu.vbios)
        return derive(template, health=health, details=details if details else {},
                      **values)

    def _mig_device(self, gpu: Gpu, mig: Mig, *, health: str,
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
            parent=gpu.id, partition_share=mig.partition_share, health=health, details=extra,
            **values)

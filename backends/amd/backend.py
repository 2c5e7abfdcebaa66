"""AMD GPUs through the ``amdsmi`` Python package (ROCm's ``libamd_smi``).

``amdsmi`` is imported lazily, with stdout captured at the file-descriptor
level (see :mod:`allsmi.backends.amd.loader`): without ROCm its import
prints to stdout and raises ``KeyError``, which becomes an "unavailable" probe
with a reason. Static facts are read once in :meth:`AmdBackend.open`; each
:meth:`AmdBackend.sample` reads the rest per processor handle. The modules:

* :mod:`~allsmi.backends.amd.calls`: status codes, errors, one device's calls;
* :mod:`~allsmi.backends.amd.read`: what one handle reports, in schema units;
* :mod:`~allsmi.backends.amd.partitions`: which handles are partitions of
  which physical GPU, and who carries the board's power.

Units, partition rules, version drift and failure behaviour are documented in
``docs/backends/amd.md``.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from allsmi.backend_api import Backend, BackendError, BackendUnavailable, ProbeResult
from allsmi.backends.amd import DECLARATION, absence
from allsmi.backends.amd.loader import (
    AmdsmiLoadError,
    load_amdsmi,
    package_version,
    quick_absence,
    quiet_stdout,
)
from allsmi.backends._common.owners import process_owner
from allsmi.schema import DetailValue, DeviceSample, ProcessSample

if TYPE_CHECKING:
    from allsmi.backends.amd import read
    from allsmi.backends.amd.board import board_readings
    from allsmi.backends.amd.calls import READINGS, Calls, describe, init_failure, missing_functions
    from allsmi.backends.amd.engine import EngineUsage, board_processes
    from allsmi.backends.amd.partitions import Board, Layout, PlannedDevice, arrange, widen
    from allsmi.backends.amd.read import ProcessLookup, Readings

__all__ = ["AmdBackend", "ProcessLookup", "describe", "init_failure"]


def _import_reading() -> None:
    """Bind the reading modules' names here, once amdsmi has been loaded.

    Without an AMD device node or library the backend is answered from the file system
    (:func:`~allsmi.backends.amd.loader.quick_absence`) and never needs them: start-up
    on every other machine does not pay for importing them.
    """
    global read, READINGS, Calls, describe, init_failure, missing_functions, Board, arrange
    global EngineUsage, board_processes, activity, board_readings, widen
    from allsmi.backends.amd import activity, read
    from allsmi.backends.amd.board import board_readings
    from allsmi.backends.amd.calls import READINGS, Calls, describe, init_failure, missing_functions
    from allsmi.backends.amd.engine import EngineUsage, board_processes
    from allsmi.backends.amd.partitions import Board, arrange, widen


def __getattr__(name: str) -> Any:
    """``ProcessLookup``, ``describe`` and ``init_failure``, imported on first use."""
    if name in ("ProcessLookup", "describe", "init_failure"):
        _import_reading()
        return globals().get(name) or getattr(read, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class AmdBackend(Backend, declared=DECLARATION):
    """AMD Instinct and Radeon GPUs through amdsmi; partitions as children of their GPU."""

    #: amdsmi's gpu_metrics has no warp occupancy or matrix-core activity, and its PCIe
    #: figure is both directions together (``details.pcie_bandwidth_gigabytes_per_second``).
    unreported_fields = frozenset({"sm_occupancy_percent", "tensor_active_percent",
                                   "pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second"})

    def __init__(self, *, timeout_seconds: float = 5.0,
                 options: Mapping[str, Any] | None = None,
                 loader: Callable[[], ModuleType] = load_amdsmi,
                 process_lookup: ProcessLookup = process_owner,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``loader`` returns the ``amdsmi`` module (raising :class:`AmdsmiLoadError`
        when absent); ``process_lookup`` resolves a pid to its host user and command;
        ``clock`` (monotonic seconds) times the per-process engine counters.

        amdsmi calls run in-process and cannot be interrupted, so
        ``timeout_seconds`` is left to the collector's per-backend timeout.
        """
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._loader = loader
        self._process_lookup = process_lookup
        self._clock = clock
        #: Per-process engine counters between cycles (allsmi.backends.amd.engine), made
        #: by open() with the reading modules.
        self._engine: EngineUsage | None = None
        self._module: ModuleType | None = None
        self._load_details: dict[str, str] = {}
        self._initialised = False
        self._layout: Layout = []
        #: Every handle's static facts, and the warnings of reading them by handle index
        #: (-1: the library's own).
        self._planned: list[PlannedDevice] = []
        self._notes: dict[int, list[str]] = {}
        self._power_from: dict[str, int] = {}
        #: gpu_metrics figures, xGMI counters between cycles (allsmi.backends.amd.activity)
        self._activity: activity.ActivityReader | None = None
        # A close() from another thread while a call is in flight (the collector
        # aborting a hung call) must not shut the library down under that call.
        self._busy = threading.Lock()
        self._close_pending = False

    # -- life cycle ---------------------------------------------------------

    def _load(self) -> ModuleType:
        if self._module is not None:
            return self._module
        if self._loader is load_amdsmi:
            absent = quick_absence(self.device_nodes)
            if absent:  # nothing AMD here: amdsmi (which loads the library) is not even imported
                reason, self._load_details = absent
                raise BackendUnavailable(reason)
        try:
            module = self._loader()
        except AmdsmiLoadError as exc:
            first_line = exc.output.strip().splitlines()[0] if exc.output.strip() else ""
            self._load_details = {"loader_output": first_line} if first_line else {}
            raise BackendUnavailable(exc.reason) from exc
        except Exception as exc:  # noqa: BLE001 - an injected loader's failure means absent
            _import_reading()
            raise BackendUnavailable(f"importing amdsmi failed: {describe(exc)}") from exc
        # Only now, with amdsmi loaded (not where the package is missing, as on most machines
        # with an AMD-looking render node or no amdsmi installed).
        _import_reading()
        self._module = module
        if self._engine is None:
            self._engine = EngineUsage()
        return module

    def quick_probe(self) -> ProbeResult | None:
        """Absent when there is no AMD device node and no ``libamd_smi.so`` where amdsmi looks
        (:func:`allsmi.backends.amd.loader.quick_absence`; amdsmi not imported)."""
        known = self._initialised or self._module is not None or self._loader is not load_amdsmi
        return None if known else absence()

    def probe(self) -> ProbeResult:
        """Import amdsmi and count GPUs (init, list, shut down); never raises."""
        details: dict[str, str] = {}
        version = package_version()
        if version:
            details["amdsmi_package"] = version
        if self._initialised:
            details["gpus"] = str(len(self._layout))
            return ProbeResult(True, "", details)
        try:
            module = self._load()
        except BackendUnavailable as exc:
            details.update(self._load_details)
            return ProbeResult(False, str(exc), details)
        missing = missing_functions(module)
        if missing:
            details["missing_functions"] = ", ".join(missing)
            details["missing_fields"] = ", ".join(sorted({READINGS[m] for m in missing}))
        try:
            with self._busy:
                count, library = self._count_gpus(module)
        except Exception as exc:  # noqa: BLE001 - probe never raises
            failure = exc if isinstance(exc, BackendError) else init_failure(exc)
            if isinstance(failure, BackendUnavailable):
                return ProbeResult(False, str(failure), details)
            # Present but refusing (no permission, a broken stack): not "absent".
            # open() raises the same error, so the backend's status is "error".
            details["problem"] = str(failure)
            return ProbeResult(True, "", details)
        if library:
            details["library_version"] = library
        details["gpus"] = str(count)
        if count == 0:
            return ProbeResult(False, "amdsmi found no AMD GPU", details)
        return ProbeResult(True, "", details)

    @staticmethod
    def _count_gpus(module: ModuleType) -> tuple[int, str]:
        try:
            with quiet_stdout():  # the library may print at init
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
                with quiet_stdout():
                    module.amdsmi_shut_down()
            except Exception:  # noqa: BLE001 - nothing to release if this fails
                pass

    def open(self) -> None:
        """Initialise amdsmi, list the GPUs and read their static facts once."""
        if self._initialised:
            return
        module = self._load()
        with self._busy:
            self._open(module)
        self._finish_pending_close()

    def _open(self, module: ModuleType) -> None:
        init_error: Exception | None = None
        with quiet_stdout():
            try:
                module.amdsmi_init(module.AmdSmiInitFlags.INIT_AMD_GPUS)
            except Exception as exc:  # noqa: BLE001 - classified below
                init_error = exc
        if init_error is not None:
            raise init_failure(init_error) from init_error
        self._initialised = True
        self._close_pending = False
        try:
            handles = list(module.amdsmi_get_processor_handles())
        except Exception as exc:  # noqa: BLE001
            self._shut_down()
            raise BackendError(f"amdsmi could not list the GPUs: {describe(exc)}") from exc
        warnings: list[str] = []
        missing = missing_functions(module)
        if missing:
            version = package_version()
            warnings.append(f"amdsmi{' ' + version if version else ''} lacks {', '.join(missing)}: "
                            f"{', '.join(sorted({READINGS[m] for m in missing}))} reported "
                            "as unknown")
        self._notes = {-1: warnings}
        self._planned = [read.read_static(module, index, handle, self._notes.setdefault(index, []))
                         for index, handle in enumerate(handles)]
        self._layout = arrange(self._planned)
        self._power_from = {}
        self._activity = activity.ActivityReader(self._clock)
        for entry in self._layout:  # the xGMI counters' first reading, for the first cycle's rate
            first = entry.partitions[0] if isinstance(entry, Board) else entry
            metrics = self._activity.baseline(Calls(module), first.handle, entry.id, entry.label)
            if isinstance(entry, Board):  # CPX partitions this host does not see still count
                widen(entry, metrics.get("num_partition"))

    def close(self) -> None:
        """Shut amdsmi down if this backend initialised it. Idempotent; never raises.

        Called from another thread while a call is in flight (a hung library), it
        only marks the close: the library is shut down when that call returns, never
        under it.
        """
        if not self._busy.acquire(blocking=False):
            self._close_pending = True
            return
        try:
            self._shut_down()
        finally:
            self._busy.release()

    def _finish_pending_close(self) -> None:
        if self._close_pending:
            self.close()

    def _shut_down(self) -> None:
        self._close_pending = False
        if not self._initialised:
            return
        self._initialised = False
        self._layout, self._planned = [], []
        module = self._module
        if module is None:
            return
        try:
            with quiet_stdout():
                module.amdsmi_shut_down()
        except Exception:  # noqa: BLE001 - close never raises
            pass

    # -- sampling -----------------------------------------------------------

    def sample(self) -> Sequence[DeviceSample]:
        """Read every device; a failing device is marked lost or degraded, never dropped."""
        with self._busy:
            if not self._initialised or self._module is None:
                raise BackendError("the amd backend is not open")
            self._place_unplaced(self._module)
            self.warnings = [w for index in sorted(self._notes) for w in self._notes[index]]
            out: list[DeviceSample] = []
            for entry in self._layout:
                if isinstance(entry, Board):
                    out.extend(self._sample_board(self._module, entry))
                else:
                    out.append(self._sample_whole(self._module, entry))
            if self._engine is not None:
                self._engine.end_cycle()
        self._finish_pending_close()
        return out

    def _place_unplaced(self, module: ModuleType) -> None:
        """Read again the static facts of handles whose PCI address ``open()`` could not read,
        and redo the layout once one answers: unplaced, a partition would be read as a whole
        GPU and count its board's power a second time."""
        placed = False
        for position, dev in enumerate(self._planned):
            if dev.bus_id is None:
                notes: list[str] = []
                again = read.read_static(module, dev.index, dev.handle, notes)
                if again.bus_id is not None:
                    self._planned[position], self._notes[dev.index] = again, notes
                    placed = True
        if placed:
            self._layout = arrange(self._planned)

    def _sample_whole(self, module: ModuleType, dev: PlannedDevice) -> DeviceSample:
        calls = Calls(module)
        now = self._clock()
        readings = read.read_dynamic(module, calls, dev.handle, self._process_lookup,
                                     dev.label, self.warnings,
                                     None if self._engine is None else (self._engine, dev.id, now))
        board = read.read_board(module, calls, dev.handle)
        readings.values.update(board.values)
        readings.details.update(board.details)
        if self._activity is not None:
            self._activity.whole(readings, calls, dev.handle, dev.id, dev.label, self.warnings)
        return self._device(dev, calls, readings)

    def _device(self, dev: PlannedDevice, calls: Calls, readings: Readings) -> DeviceSample:
        health = calls.health
        self.warnings.extend(calls.messages(dev.label))
        details: dict[str, DetailValue] = dict(dev.details)
        if dev.partition_id is not None:
            details["partition_id"] = dev.partition_id
        values: dict[str, Any] = {}
        processes: tuple[ProcessSample, ...] | None = None
        if health != "lost":
            values = read.plausible(dev.label, readings.values, self.warnings)
            details.update(readings.details)
            processes = readings.processes
        return DeviceSample(
            id=dev.id, vendor=self.vendor, kind=self.kind, backend=self.name,
            index=dev.device_index, uuid=dev.uuid, name=dev.name, bus_id=dev.bus_id,
            driver_version=dev.driver_version, firmware_version=dev.firmware_version,
            parent=dev.parent, partition_share=dev.partition_share, health=health,
            processes=processes, details=details, **values)

    def _sample_board(self, module: ModuleType, board: Board) -> list[DeviceSample]:
        parts: list[tuple[PlannedDevice, Calls, Readings]] = []
        for dev in board.partitions:
            calls = Calls(module)
            parts.append((dev, calls, read.read_dynamic(module, calls, dev.handle,
                                                        self._process_lookup, dev.label,
                                                        self.warnings, None if self._engine
                                                        is None else (self._engine, dev.id,
                                                                      self._clock()))))
        own = read.Readings()
        if self._activity is not None:
            self._activity.board(own, parts, board.id, board.label, self.warnings)
        children = [self._device(dev, calls, readings) for dev, calls, readings in parts]
        return [self._board_device(module, board, parts, children, own), *children]

    def _board_device(self, module: ModuleType, board: Board,
                      parts: list[tuple[PlannedDevice, Calls, Readings]],
                      children: list[DeviceSample], own: Readings) -> DeviceSample:
        details: dict[str, DetailValue] = {**board.details, **own.details}
        values: dict[str, Any] = dict(own.values)
        readings, failed = (board_readings(module, board, parts, self._power_from, self.warnings)
                            if board.owns_power else (None, False))
        if readings is not None:
            values.update(readings.values)
            details.update(readings.details)
            values = read.plausible(board.label, values, self.warnings)
        elif not board.owns_power:
            details["board_power"] = "not reported: partition 0 is not visible on this host"
        answering = [c for c in children if c.health != "lost"]
        utilizations = [c.utilization_percent for c in children]
        if children and all(u is not None for u in utilizations):
            # Partitions are equal shares of the GPU: the board is busy by their mean.
            values["utilization_percent"] = round(
                sum(u for u in utilizations if u is not None) / len(utilizations), 3)
        temperatures = [c.temperature_celsius for c in answering if c.temperature_celsius is not None]
        if temperatures:
            values["temperature_celsius"] = max(temperatures)  # the hottest junction on the die
        health = ("lost" if not answering else
                  "ok" if all(c.health == "ok" for c in children) and not failed else "degraded")
        return DeviceSample(
            id=board.id, vendor=self.vendor, kind=self.kind, backend=self.name,
            index=board.index, uuid=board.uuid, name=board.name, bus_id=board.bus_id,
            driver_version=board.driver_version, firmware_version=board.firmware_version,
            health=health, processes=board_processes(children), details=details, **values)

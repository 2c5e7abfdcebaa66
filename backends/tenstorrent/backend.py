"""Tenstorrent backend: ``tt-smi -s --snapshot_no_tty``, decoded per board generation.

One tt-smi run per sample gives every chip's telemetry (see
:mod:`.decode` for the encodings and :mod:`.snapshot`
for the stdout-versus-file differences between tt-smi versions).

A board is one device, keyed ``tenstorrent:<board id>``. A second chip on
the same board (the "R" chip of an n300, the second ASIC of a p300) is a
partition of it, ``tenstorrent:<board id>:<n>``, with its own temperature,
clock and ASIC power in ``details``. Board power is reported once, on the
board: tt-smi's ``board_power`` (whole-card input power, tt-smi 6+) when
present, else the sum of the chips' ASIC power readings.

tt-smi reports neither utilization nor memory use, so both are ``None``.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from allsmi.backend_api import BackendError
# probe() only looks for tt-smi: the snapshot reader (subprocess, tempfile) and the decoders
# are imported by open() and sample(), once there is a tool (tests/test_layers.py checks it).
from allsmi.backends._common.activity import COUNTER_ONLY_FIELDS
from allsmi.backends._common.clibackend import CliToolBackend
from allsmi.backends._common.owners import process_user
from allsmi.backends.tenstorrent import DECLARATION, TOOL
from allsmi.schema import DeviceSample, ProcessSample

if TYPE_CHECKING:
    from allsmi.backends._common.vanished import MissingDevices
    from . import decode
    from .snapshot import SnapshotReader
    from allsmi.backends._common.cells import SaidOnce

#: The ARC heartbeat advances about twice a second; unchanged for this long means hung firmware.
HEARTBEAT_STALL_SECONDS = 3.0


class TenstorrentBackend(CliToolBackend, declared=DECLARATION):
    """Tenstorrent Grayskull, Wormhole and Blackhole boards via tt-smi."""

    tool_spec = TOOL
    #: tt-smi reports neither utilization nor memory, and has no energy counter.
    unreported_fields = frozenset({"utilization_percent", "memory_used_bytes", "memory_total_bytes",
                                   "energy_joules", "compute_active_percent"}) | COUNTER_ONLY_FIELDS

    @classmethod
    def model_name(cls, raw: str | None) -> str | None:
        """``Tenstorrent <Generation> <board type>`` (``Tenstorrent Blackhole p150a``) from
        tt-smi's generation and board type; just ``Tenstorrent`` when it names neither."""
        text = " ".join((raw or "").split())
        if text.lower().startswith("tenstorrent"):
            return text
        return f"Tenstorrent {text}" if text else "Tenstorrent"

    def __init__(self, *, timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None,
                 user_lookup: Callable[[int], str | None] = process_user,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._user_lookup = user_lookup
        self._clock = clock
        self._reader: SnapshotReader | None = None
        self._missing: MissingDevices | None = None  # made by open()
        #: device id -> (last heartbeat value, when that value was first seen)
        self._heartbeats: dict[str, tuple[int, float]] = {}
        #: Refused values of tt-smi's output already warned about since open().
        self._said: SaidOnce | None = None

    # -- life cycle -------------------------------------------------------

    def probe_details(self, path: str) -> dict[str, str]:
        return {"device_dir": "/dev/tenstorrent"} if os.path.isdir("/dev/tenstorrent") else {}

    def open(self) -> None:
        tool = self.require_tool()
        from .snapshot import SnapshotReader
        self._reader = SnapshotReader(tool)
        self._heartbeats = {}
        from allsmi.backends._common.cells import SaidOnce
        from allsmi.backends._common.vanished import MissingDevices
        self._said = SaidOnce()
        self._missing = MissingDevices(self.tool_spec.executable)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- sampling ---------------------------------------------------------

    def sample(self) -> Sequence[DeviceSample]:
        self.warnings = []
        if self._reader is None:
            raise BackendError("tenstorrent backend used before open()")
        from . import decode
        from allsmi.backends._common.runner import ToolError, ToolTimeout
        try:
            snapshot = self._reader.read(self.timeout_seconds, self.warnings)
        except ToolTimeout as exc:
            raise BackendError(f"{exc} (tt-smi was killed)") from exc
        except ToolError as exc:
            raise BackendError(str(exc)) from exc
        except ValueError as exc:
            raise BackendError(f"unusable tt-smi output: {exc}") from exc
        if snapshot is None:  # the tool says no device; one it listed before is degraded
            return self._missing.complete([], self.warnings) if self._missing else []
        try:
            chips, warnings, host = decode.decode_snapshot(snapshot, self._said)
        except ValueError as exc:
            raise BackendError(f"unusable tt-smi snapshot: {exc}") from exc
        self.warnings.extend(warnings)
        self.tool_version = host.get("tt_smi_version") or self.tool_version
        if not chips and snapshot["device_info"]:
            raise BackendError("tt-smi snapshot has no decodable device: " + "; ".join(warnings[:3]))
        samples = self._samples(chips, host)
        # a chip that dropped out of the snapshot is degraded, not silently gone
        return self._missing.complete(samples, self.warnings) if self._missing else samples

    def _samples(self, chips: list[decode.ChipReading], host: dict[str, Any]) -> list[DeviceSample]:
        boards: dict[str, list[decode.ChipReading]] = {}
        for chip in chips:
            if chip.board_id:
                key = chip.board_id
            elif chip.bus_id:
                key = f"bus:{chip.bus_id}"
            else:
                key = f"index:{chip.position}"
                self.warnings.append(f"tt-smi device {chip.position} has neither board id nor bus id; "
                                     "its id follows tt-smi's order and may change")
            boards.setdefault(key, []).append(chip)
        # Only tt-smi 6+ lists processes; older versions leave "who uses it" unknown.
        listed = "processes" in host
        processes = self._processes(host.get("processes", []))
        samples: list[DeviceSample] = []
        for key, members in boards.items():
            parent_id = f"tenstorrent:{key}"
            board_power, power_source = self._board_power(parent_id, members)
            for n, chip in enumerate(members):
                dev_id = parent_id if n == 0 else f"{parent_id}:{n}"
                samples.append(self._sample(
                    chip, dev_id, parent=None if n == 0 else parent_id,
                    power=board_power if n == 0 else None,
                    power_limit=(chip.tdp_limit_watts if n == 0 and len(members) == 1 else None),
                    power_source=power_source if n == 0 else None, host=host,
                    processes=processes.get(chip.position, ()) if listed else None))
        return samples

    def _board_power(self, board: str, members: list[decode.ChipReading]) -> tuple[float | None, str | None]:
        """Board power in W: tt-smi's whole-card reading, else the sum of the chips' ASIC power."""
        for chip in members:
            if chip.board_power_watts is not None:
                return chip.board_power_watts, "board_power"
        readings = [chip.asic_power_watts for chip in members]
        if readings and all(r is not None for r in readings):
            source = "asic_power" if len(readings) == 1 else "asic_power_sum"
            return float(sum(r for r in readings if r is not None)), source
        if any(r is not None for r in readings):
            self.warnings.append(f"{board}: ASIC power missing on some chips; board power unknown")
        return None, None

    def _processes(self, rows: list[Any]) -> dict[int, tuple[ProcessSample, ...]]:
        """tt-smi 6+ top-level ``processes``: ``{pid, user, device, cmdline}`` per device index.
        A row without a whole-number pid (1 or more) and device (0 or more) is skipped, with a
        warning said once per printed pid and device while open (``true`` is no pid 1)."""
        from allsmi.schema import units
        found: dict[int, dict[int, ProcessSample]] = {}
        for n, row in enumerate(rows):
            if not isinstance(row, dict):
                self.warnings.append(f"tt-smi processes[{n}] is not an object; skipped")
                continue
            raw_pid, raw_device = row.get("pid"), row.get("device")
            pid, device = units.to_int(raw_pid, minimum=1), units.to_int(raw_device)
            if pid is None or device is None:
                key = ("tt-smi processes", repr(raw_pid), repr(raw_device))
                warning = (f"tt-smi processes[{n}] lacks a pid or device (pid {raw_pid!r:.40}, "
                           f"device {raw_device!r:.40}); skipped")
                if self._said is None:
                    self.warnings.append(warning)
                else:
                    self._said.say(self.warnings, key, warning)
                continue
            user = row.get("user") if isinstance(row.get("user"), str) else self._user_lookup(pid)
            command = row.get("cmdline") if isinstance(row.get("cmdline"), str) else None
            found.setdefault(device, {}).setdefault(
                pid, ProcessSample(pid=pid, user=user, command=command, memory_bytes=None))
        return {device: tuple(procs[p] for p in sorted(procs)) for device, procs in found.items()}

    def _health(self, dev_id: str, chip: decode.ChipReading) -> tuple[str, bool]:
        stalled = False
        if chip.heartbeat is not None:
            now = self._clock()
            seen = self._heartbeats.get(dev_id)
            if seen is not None and seen[0] == chip.heartbeat:
                stalled = now - seen[1] >= HEARTBEAT_STALL_SECONDS
            else:
                self._heartbeats[dev_id] = (chip.heartbeat, now)
        if not chip.has_telemetry:
            self.warnings.append(f"{dev_id}: tt-smi returned no telemetry (ARC firmware not running?)")
            return "degraded", stalled
        if stalled:
            self.warnings.append(f"{dev_id}: ARC heartbeat stuck at {chip.heartbeat} for "
                                 f"{HEARTBEAT_STALL_SECONDS:g} s or more (firmware hung?)")
            return "degraded", stalled
        if chip.dram_trained is False:
            return "degraded", stalled
        return "ok", stalled

    def _sample(self, chip: decode.ChipReading, dev_id: str, *, parent: str | None,
                power: float | None, power_limit: float | None, power_source: str | None,
                host: dict[str, Any], processes: tuple[ProcessSample, ...] | None) -> DeviceSample:
        health, stalled = self._health(dev_id, chip)
        details: dict[str, Any] = {}
        for key, value in (("board_id", chip.board_id), ("board_type", chip.board_type),
                           ("generation", chip.generation), ("chip", chip.side),
                           ("coords", chip.coords), ("voltage_volts", chip.voltage_volts),
                           ("current_amps", chip.current_amps),
                           ("asic_power_watts", chip.asic_power_watts), ("heartbeat", chip.heartbeat),
                           ("fan_rpm", chip.fan_rpm), ("tdp_limit_watts", chip.tdp_limit_watts),
                           ("thermal_limit_celsius", chip.thermal_limit_celsius),
                           ("dram_trained", chip.dram_trained), ("dram_speed", chip.dram_speed),
                           ("pcie_gen", chip.pcie_gen), ("pcie_width", chip.pcie_width),
                           ("power_source", power_source),
                           ("tt_smi_version", host.get("tt_smi_version"))):
            if value is not None:
                details[key] = value
        if stalled:
            details["heartbeat_stalled"] = True
        for key, value in chip.firmwares.items():
            details[f"fw_{key}"] = value
        fw = chip.firmwares
        firmware = fw.get("fw_bundle_version") or fw.get("cm_fw") or fw.get("arc_fw")
        generation = (chip.generation or "").capitalize()
        name = self.model_name(" ".join(p for p in (generation, chip.board_type) if p))
        return DeviceSample(
            id=dev_id, vendor=self.vendor, kind=self.kind, backend=self.name,
            index=chip.position, name=name, bus_id=chip.bus_id,
            driver_version=host.get("driver"), firmware_version=firmware, parent=parent,
            health=health, temperature_celsius=chip.temperature_celsius,
            power_watts=power, power_limit_watts=power_limit, clock_mhz=chip.aiclk_mhz,
            fan_percent=chip.fan_percent, processes=processes, details=details)

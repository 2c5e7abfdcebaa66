"""Reading one amdsmi processor handle: static facts, dynamic readings, board readings,
processes. Units are converted by :mod:`allsmi.backends.amd.convert`; which handle's
readings belong to which device is decided by :mod:`allsmi.backends.amd.partitions`.

Key names that changed between amdsmi releases are tried newest first (see
``docs/backends/amd.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from allsmi.backends.amd import convert as conv
from allsmi.backends.amd.calls import Calls, mapping
from allsmi.backends.amd.engine import EngineUsage
from allsmi.backends.amd.partitions import PlannedDevice
from allsmi.schema.fields import MEASUREMENTS
from allsmi.schema import DetailValue, ProcessSample

ProcessLookup = Callable[[int], "tuple[str | None, str | None]"]
"""``pid -> (user, command)`` on the host; ``(None, None)`` when unknown."""


@dataclass
class Readings:
    """One handle's readings of one cycle, in schema units."""

    values: dict[str, Any] = field(default_factory=dict)
    details: dict[str, DetailValue] = field(default_factory=dict)
    #: None until the process list was read: a failed read leaves "who uses it" unknown.
    processes: tuple[ProcessSample, ...] | None = None


def _first(info: Any, *keys: str) -> Any:
    """The value of the first key present (amdsmi renamed keys between releases)."""
    info = mapping(info)
    for key in keys:
        if key in info:
            return info[key]
    return None


def _members(module: ModuleType, enum: str, *names: str) -> dict[str, Any] | None:
    """The members ``names`` of amdsmi's enum ``enum``; ``None`` where this amdsmi lacks it."""
    found = {name: getattr(getattr(module, enum, None), name, None) for name in names}
    return None if any(member is None for member in found.values()) else found


def read_static(module: ModuleType, index: int, handle: Any, warnings: list[str]) -> PlannedDevice:
    """Name, ids, versions and the partition facts of one handle (read once, in ``open()``)."""
    calls = Calls(module)
    dev = PlannedDevice(index=index, handle=handle)
    dev.bus_id = conv.text(calls("BDF", "amdsmi_get_gpu_device_bdf", handle))
    dev.uuid = conv.text(calls("uuid", "amdsmi_get_gpu_device_uuid", handle))
    asic = mapping(calls("ASIC info", "amdsmi_get_gpu_asic_info", handle))
    dev.name = conv.text(asic.get("market_name"))
    if dev.name is None:
        # Some releases leave market_name empty; the board FRU has the product.
        board = mapping(calls("board info", "amdsmi_get_gpu_board_info", handle))
        dev.name = conv.text(board.get("product_name"))
    driver = mapping(calls("driver info", "amdsmi_get_gpu_driver_info", handle))
    dev.driver_version = conv.text(driver.get("driver_version"))
    vbios = mapping(calls("VBIOS info", "amdsmi_get_gpu_vbios_info", handle))
    dev.firmware_version = conv.text(vbios.get("version"))
    dev.compute_partition = conv.text(
        calls("compute partition", "amdsmi_get_gpu_compute_partition", handle))
    dev.memory_partition = conv.text(
        calls("memory partition", "amdsmi_get_gpu_memory_partition", handle))
    kfd = mapping(calls("KFD info", "amdsmi_get_gpu_kfd_info", handle))
    dev.partition_id = conv.whole(kfd.get("current_partition_id"))

    details = dev.details
    gfx_version = conv.text(asic.get("target_graphics_version"))
    if gfx_version:
        details["gfx_version"] = gfx_version
    # "num_of_compute_units" in amdsmi 6.1+, "num_compute_units" before
    compute_units = conv.whole(_first(asic, "num_of_compute_units", "num_compute_units"))
    if compute_units is not None:
        details["compute_units"] = compute_units
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


def read_dynamic(module: ModuleType, calls: Calls, handle: Any, lookup: ProcessLookup,
                 label: str, warnings: list[str],
                 engine: tuple[EngineUsage, str, float] | None = None) -> Readings:
    """Everything a handle reports about itself; board readings are :func:`read_board`'s."""
    out = Readings()
    values, details = out.values, out.details

    activity = mapping(calls("activity", "amdsmi_get_gpu_activity", handle))
    values["utilization_percent"] = conv.activity_percent(activity.get("gfx_activity"))
    umc = conv.activity_percent(activity.get("umc_activity"))
    if umc is not None:
        details["memory_activity_percent"] = umc

    values["memory_used_bytes"], values["memory_total_bytes"] = vram(module, calls, handle)

    # An amdsmi without one of the enums these calls take lacks the readings, like a
    # missing function (calls.ENUMS): unknown, never a failure of the whole sample. Each
    # sensor is looked up alone: older releases name the hotspot sensor JUNCTION only
    # (HOTSPOT came later as its alias), and lack of one name must not lose the others.
    current = _members(module, "AmdSmiTemperatureMetric", "CURRENT")

    def temperature(what: str, *names: str) -> float | None:
        sensor = next((s for s in (_members(module, "AmdSmiTemperatureType", n) for n in names)
                       if s is not None), None)
        if sensor is None or current is None:
            return None
        return conv.temperature_celsius(calls(what, "amdsmi_get_temp_metric", handle,
                                              next(iter(sensor.values())), current["CURRENT"]))

    hotspot = temperature("hotspot temperature", "HOTSPOT", "JUNCTION")
    edge = temperature("edge temperature", "EDGE")
    memory_temp = temperature("memory temperature", "VRAM")
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

    clock_type = _members(module, "AmdSmiClkType", "GFX", "MEM")
    gfx = mapping(clock_type and calls("GFX clock", "amdsmi_get_clock_info", handle,
                                       clock_type["GFX"]))
    values["clock_mhz"] = conv.clock_mhz({"clk": _first(gfx, "clk", "cur_clk")})
    mem = mapping(clock_type and calls("memory clock", "amdsmi_get_clock_info", handle,
                                       clock_type["MEM"]))
    memory_clock = conv.clock_mhz({"clk": _first(mem, "clk", "cur_clk")})
    if memory_clock is not None:
        details["memory_clock_mhz"] = memory_clock

    speed = calls("fan speed", "amdsmi_get_gpu_fan_speed", handle, 0)
    if speed is not None:
        values["fan_percent"] = conv.fan_percent(
            speed, calls("fan speed max", "amdsmi_get_gpu_fan_speed_max", handle, 0))

    rows = calls("processes", "amdsmi_get_gpu_process_list", handle)
    if isinstance(rows, list):
        out.processes = processes(module, calls, handle, rows, lookup, label, warnings, engine)
    return out


def read_board(module: ModuleType, calls: Calls, handle: Any) -> Readings:
    """Board power, power cap, energy and ECC totals, as read through ``handle``.

    ``values["power_watts"]`` is ``None`` when this handle does not report socket
    power (secondary partitions of some firmware): the caller then asks the next one.
    """
    out = Readings()
    values, details = out.values, out.details
    power_info = mapping(calls("power", "amdsmi_get_power_info", handle))
    power, source = conv.socket_power_watts(power_info)
    values["power_watts"] = power
    if source:
        details["power_source"] = source
    cap = conv.power_cap_watts(mapping(calls("power cap", "amdsmi_get_power_cap_info", handle)))
    values["power_limit_watts"] = cap if cap is not None else conv.power_limit_watts(power_info)
    values["energy_joules"] = conv.energy_joules(
        mapping(calls("energy", "amdsmi_get_energy_count", handle)))
    ecc = mapping(calls("ECC counts", "amdsmi_get_gpu_total_ecc_count", handle))
    for key, name in (("correctable_count", "ecc_correctable_total"),
                      ("uncorrectable_count", "ecc_uncorrectable_total"),
                      ("deferred_count", "ecc_deferred_total")):
        count = conv.counter(ecc.get(key))
        if count is not None:
            details[name] = count
    return out


def vram(module: ModuleType, calls: Calls, handle: Any) -> tuple[int | None, int | None]:
    """``(used, total)`` VRAM bytes; byte-exact calls first, the MiB call as fallback."""
    kind = _members(module, "AmdSmiMemoryType", "VRAM")
    used = total = None
    if kind is not None:
        used = conv.byte_count(calls("memory usage", "amdsmi_get_gpu_memory_usage", handle,
                                     kind["VRAM"]))
        total = conv.byte_count(calls("memory total", "amdsmi_get_gpu_memory_total", handle,
                                      kind["VRAM"]))
    if used is None or total is None:
        usage = mapping(calls("VRAM usage", "amdsmi_get_gpu_vram_usage", handle))
        if used is None:
            used = conv.mib_to_bytes(usage.get("vram_used"))
        if total is None:
            total = conv.mib_to_bytes(usage.get("vram_total"))
    if total == 0:
        total = None
    return used, total


def processes(module: ModuleType, calls: Calls, handle: Any, rows: list[Any],
              lookup: ProcessLookup, label: str, warnings: list[str],
              engine: tuple[EngineUsage, str, float] | None = None) -> tuple[ProcessSample, ...]:
    """The handle's processes, one per pid, memory in bytes; with ``engine`` (the tracker,
    the device id and the monotonic time now), each process's GFX and encoder activity since
    the previous cycle (:mod:`allsmi.backends.amd.engine`).

    amdsmi 6.1+ lists dicts; older releases list process handles that
    ``amdsmi_get_gpu_process_info`` turns into the same dicts.
    """
    by_pid: dict[int, ProcessSample] = {}
    skipped = 0
    for row in rows:
        if not isinstance(row, dict) and callable(getattr(module, "amdsmi_get_gpu_process_info", None)):
            row = calls("process info", "amdsmi_get_gpu_process_info", handle, row)
        row = mapping(row)
        pid = conv.whole(row.get("pid"), conv.SENTINELS_U32)
        if pid is None or pid <= 0:
            skipped += 1
            continue
        memory = conv.byte_count(mapping(row.get("memory_usage")).get("vram_mem"))
        if memory is None:
            memory = conv.byte_count(row.get("mem"))
        previous = by_pid.get(pid)
        if previous is not None:
            # One pid listed twice: keep the larger footprint.
            if (memory or 0) > (previous.memory_bytes or 0):
                by_pid[pid] = ProcessSample(
                    pid=pid, user=previous.user, command=previous.command, memory_bytes=memory,
                    utilization_percent=previous.utilization_percent,
                    encoder_utilization_percent=previous.encoder_utilization_percent)
            continue
        user, host_command = lookup(pid)
        command = conv.text(row.get("name")) or host_command
        gfx = enc = None
        if engine is not None:
            tracker, device, now = engine
            gfx, enc = tracker.shares(device, pid, row.get("engine_usage"), now,
                                      conv.text(row.get("name")))
        by_pid[pid] = ProcessSample(pid=pid, user=user, command=command, memory_bytes=memory,
                                    utilization_percent=gfx, encoder_utilization_percent=enc)
    if skipped:
        warnings.append(f"{label}: skipped {skipped} process row(s) without a valid pid")
    return tuple(by_pid.values())


def plausible(label: str, values: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """``values`` without out-of-range numbers (garbage from the device, not readings)."""
    for m in MEASUREMENTS:
        value = values.get(m.field)
        if value is None:
            continue
        if (m.minimum is not None and value < m.minimum) or \
                (m.maximum is not None and value > m.maximum):
            warnings.append(f"{label}: ignored implausible {m.field}={value}")
            values[m.field] = None
    used, total = values.get("memory_used_bytes"), values.get("memory_total_bytes")
    if total is not None and total < 1024 ** 2:
        warnings.append(f"{label}: ignored implausible memory_total_bytes={total}")
        values["memory_total_bytes"] = total = None
    if used is not None and total is not None and used > total:
        warnings.append(f"{label}: ignored memory used {used} above total {total}")
        values["memory_used_bytes"] = None
    return values

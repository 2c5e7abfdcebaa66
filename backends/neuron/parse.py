"""Reading ``neuron-ls --json-output`` and one ``neuron-monitor`` report.

``neuron-ls --json-output`` prints a JSON list with one object per Neuron device::

    [{"neuron_device": 0, "bdf": "00:1e.0", "nc_count": 2, "logical_neuroncore_config": 1,
      "memory_size": 34359738368, "neuroncore_ids": [0, 1], "connected_to": null,
      "neuron_processes": [{"pid": 4242, "command": "python train.py"}], "instance_type": "..."}]

``memory_size`` is in bytes; ``neuroncore_ids`` are the node-wide NeuronCore numbers the Neuron
device plugin hands out as ``aws.amazon.com/neuroncore``. Releases before that key list only
``nc_count``: the numbers are then counted in device order (device ``i`` holds the ``nc_count``
numbers after those of devices ``0`` .. ``i-1``). ``neuron-monitor`` prints one JSON
report per line; each Neuron application (``neuron_runtime_data[]``, by ``pid``) reports
``neuroncore_counters.neuroncores_in_use`` (utilization per NeuronCore, in percent, over the
report's period) and ``memory_used.neuron_runtime_used_bytes.usage_breakdown
.neuroncore_memory_usage`` (bytes per NeuronCore and category). Sources and the fixtures:
``fixtures/neuron/README.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from allsmi.backends._common.cells import WIDE_SENTINELS, int_cell, is_sentinel, shorten, text_of
from allsmi.backends._common.jsonout import read_json


class NeuronOutputError(ValueError):
    """Output that is not what the tool prints (raised to the runner, which names the tool)."""


@dataclass(frozen=True)
class NeuronProcess:
    pid: int
    command: str | None


@dataclass(frozen=True)
class NeuronDevice:
    """One ``neuron-ls`` row."""

    index: int
    bus_id: str | None
    memory_total_bytes: int | None
    cores: tuple[int, ...]
    """Global NeuronCore numbers on this device."""
    logical_config: int | None
    instance_type: str | None
    processes: tuple[NeuronProcess, ...]


def _bus_id(raw: object) -> str | None:
    """``00:1e.0`` (no domain) and ``0000:00:1e.0`` as ``0000:00:1e.0``."""
    text = text_of(raw)
    if not text:
        return None
    parts = text.lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    if len(parts) != 3 or "." not in parts[2]:
        return None
    return f"{parts[0].zfill(4)}:{parts[1].zfill(2)}:{parts[2]}"


def load_devices(text: str, tool: str, warnings: list[str]) -> list[NeuronDevice]:
    """The devices of ``neuron-ls --json-output``; a row without a device number is skipped with
    a warning; output that is not a JSON list raises :class:`NeuronOutputError`."""
    data, notes = read_json(text, tool, find=lambda v: isinstance(v, list))
    warnings.extend(notes)
    if not isinstance(data, list):
        raise NeuronOutputError(f"{tool} printed JSON {type(data).__name__}, not a list of devices: "
                                f"{shorten(text)!r}")
    devices: dict[int, NeuronDevice] = {}
    counts: dict[int, int | None] = {}  # nc_count of each device listed without neuroncore_ids
    for n, row in enumerate(data):
        index = int_cell(row.get("neuron_device")) if isinstance(row, dict) else None
        if index is None:
            warnings.append(f"{tool}: row {n} has no neuron_device number: {shorten(row)!r}; skipped")
            continue
        if index in devices:
            warnings.append(f"{tool}: neuron_device {index} listed twice; the second row skipped")
            continue
        devices[index] = _device(index, row, tool, warnings)
        if row.get("neuroncore_ids") is None:
            counts[index] = int_cell(row.get("nc_count"))
    if data and not devices:
        raise NeuronOutputError(f"{tool} listed {len(data)} device(s), none readable: {shorten(data)!r}")
    return _count_cores([devices[i] for i in sorted(devices)], counts, warnings)


def _count_cores(devices: list[NeuronDevice], counts: dict[int, int | None],
                 warnings: list[str]) -> list[NeuronDevice]:
    """Devices listed without ``neuroncore_ids`` get the numbers counted from ``nc_count`` in
    device order; only where every device before one is listed with a known core count and the
    counted numbers agree with the ids the others list. Otherwise the device's cores stay unknown
    (and so its utilization and memory in use), with a warning."""
    if not counts:
        return devices
    first: dict[int, int] = {}  # device index -> its first core number, as counted
    number = 0
    for position, dev in enumerate(devices):
        count = len(dev.cores) or counts.get(dev.index)
        if dev.index != position or count is None or count <= 0:
            break  # a device missing before this one, or one whose core count is unknown
        first[dev.index] = number
        number += count
    listed = {dev.index: dev.cores for dev in devices if dev.cores}
    agree = all(cores == tuple(range(first[i], first[i] + len(cores)))
                for i, cores in listed.items() if i in first)
    taken = {core for cores in listed.values() for core in cores}
    out = []
    for dev in devices:
        if dev.index in counts:
            start, count = first.get(dev.index) if agree else None, counts[dev.index]
            cores = range(start, start + count) if start is not None and count else range(0)
            if cores and not taken.intersection(cores):
                dev = replace(dev, cores=tuple(cores))
            else:
                warnings.append(f"neuron device {dev.index}: no neuroncore_ids, and its NeuronCore "
                                f"numbers cannot be counted from nc_count in device order; its "
                                f"utilization and memory in use are unknown")
        out.append(dev)
    return out


def _count(raw: object) -> int | None:
    """A size or event count: a whole number of 0 or more, and not an all-ones sentinel
    (``18446744073709551615`` is the driver's "no reading", not 16 EiB or events)."""
    return None if is_sentinel(raw, WIDE_SENTINELS) else int_cell(raw)


def _device(index: int, row: dict[str, Any], tool: str, warnings: list[str]) -> NeuronDevice:
    memory = _count(row.get("memory_size"))
    raw_cores = row.get("neuroncore_ids")
    cores: tuple[int, ...] = ()
    if isinstance(raw_cores, list) and all(int_cell(c) is not None for c in raw_cores):
        cores = tuple(sorted(int_cell(c) for c in raw_cores))  # type: ignore[misc]
    elif raw_cores is not None:
        warnings.append(f"neuron device {index}: unreadable neuroncore_ids {shorten(raw_cores)!r}")
    processes: dict[int, NeuronProcess] = {}
    for proc in row.get("neuron_processes") or ():
        pid = int_cell(proc.get("pid")) if isinstance(proc, dict) else None
        if pid is None or pid <= 0:
            warnings.append(f"neuron device {index}: process row without a pid {shorten(proc)!r}; skipped")
            continue
        processes.setdefault(pid, NeuronProcess(pid, text_of(proc.get("command")) or None))
    return NeuronDevice(index=index, bus_id=_bus_id(row.get("bdf")),
                        memory_total_bytes=memory if memory and memory > 0 else None,
                        cores=cores, logical_config=int_cell(row.get("logical_neuroncore_config")),
                        instance_type=text_of(row.get("instance_type")) or None,
                        processes=tuple(processes.values()))


@dataclass
class RuntimeUsage:
    """What one Neuron application's report says, per global NeuronCore."""

    utilization: dict[int, float] | None = None
    """Percent per core in use; ``None`` when the group is missing or has an error."""
    memory: dict[int, int] | None = None
    """Bytes per core; ``None`` when the group is missing or has an error."""


@dataclass
class MonitorReport:
    """One ``neuron-monitor`` line."""

    runtimes: dict[int, RuntimeUsage] = field(default_factory=dict)
    """By pid."""
    device_type: str | None = None
    ecc_uncorrected: dict[int, int] = field(default_factory=dict)
    """Device index -> uncorrected DRAM and SRAM ECC events in the report's period."""
    errors: list[str] = field(default_factory=list)
    unreadable_runtimes: int = 0
    """Application entries without a readable pid: whose cores they hold is unknown, so no
    device's utilization or memory can be summed (``None``, not the others' sum)."""


def _group(report: dict[str, Any], name: str, errors: list[str], where: str) -> dict[str, Any] | None:
    group = report.get(name)
    if not isinstance(group, dict):
        return None
    error = text_of(group.get("error"))
    if error:
        errors.append(f"neuron-monitor {where} {name}: {error}")
        return None
    return group


#: Where ``memory_used`` holds the bytes per NeuronCore.
MEMORY_PATH = ("neuron_runtime_used_bytes", "usage_breakdown", "neuroncore_memory_usage")


def _runtime_table(report: dict[str, Any], name: str, path: tuple[str, ...], errors: list[str],
                   where: str) -> dict[str, Any] | None:
    """The per-core table of one application's group ``name`` (``path`` inside it); ``None``,
    with the reason in ``errors``, when the group reports an error or the table is missing."""
    group = _group(report, name, errors, where)
    if group is None:
        if not isinstance(report.get(name), dict):
            errors.append(f"neuron-monitor {where}: no {name} group in its report")
        return None
    table: object = group
    for key in path:
        table = table.get(key) if isinstance(table, dict) else None
    if not isinstance(table, dict):
        errors.append(f"neuron-monitor {where} {name}: no {'.'.join(path)}: {shorten(group)!r}")
        return None
    return table


def _percent(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0.0 <= value <= 100.0 else None


def parse_monitor(line: str) -> MonitorReport:
    """One report line; :class:`ValueError` for a line that is not a report (the stream skips
    it and says so)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise NeuronOutputError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("neuron_runtime_data"), list):
        raise NeuronOutputError("not a neuron-monitor report (no neuron_runtime_data list)")
    out = MonitorReport()
    hardware = data.get("neuron_hardware_info")
    if isinstance(hardware, dict):
        out.device_type = text_of(hardware.get("neuron_device_type")) or None
    for entry in data["neuron_runtime_data"]:
        pid = int_cell(entry.get("pid")) if isinstance(entry, dict) else None
        if pid is None:
            out.errors.append(f"neuron-monitor: a runtime entry without a pid: {shorten(entry)!r}")
            out.unreadable_runtimes += 1
            continue
        report = entry.get("report") if isinstance(entry.get("report"), dict) else {}
        error = text_of(entry.get("error"))
        if error:
            out.errors.append(f"neuron-monitor pid {pid}: {error}")
        usage = RuntimeUsage()
        if not (error and not report):  # else nothing reported: both unknown, the error says why
            where = f"pid {pid}"
            in_use = _runtime_table(report, "neuroncore_counters", ("neuroncores_in_use",), out.errors, where)
            if in_use is not None:
                usage.utilization = _core_utilization(in_use, pid, out.errors)
            per_core = _runtime_table(report, "memory_used", MEMORY_PATH, out.errors, where)
            if per_core is not None:
                usage.memory = _core_memory(per_core, pid, out.errors)
        earlier = out.runtimes.get(pid)
        out.runtimes[pid] = usage if earlier is None else _merged(earlier, usage)
    system = data.get("system_data") if isinstance(data.get("system_data"), dict) else {}
    counters = _group(system, "neuron_hw_counters", out.errors, "system")
    for row in (counters or {}).get("neuron_devices") or ():
        index = int_cell(row.get("neuron_device_index")) if isinstance(row, dict) else None
        if index is not None:
            events = [e for k in ("mem_ecc_uncorrected", "sram_ecc_uncorrected")
                      if (e := _count(row.get(k))) is not None]
            if events:  # neither count given (or a negative one): unknown, never 0 events
                out.ecc_uncorrected[index] = sum(events)
    return out


def _add(first: dict[int, Any] | None, second: dict[int, Any] | None,
         cap: float | None = None) -> dict[int, Any] | None:
    """Per-core values of two entries added core by core (at most ``cap``); ``None`` when either
    is unknown."""
    if first is None or second is None:
        return None
    out = dict(first)
    for core, value in second.items():
        total = out.get(core, 0) + value
        out[core] = total if cap is None else min(cap, total)
    return out


def _merged(first: RuntimeUsage, second: RuntimeUsage) -> RuntimeUsage:
    """Two ``neuron_runtime_data`` entries with one pid: neuron-monitor prints one entry per
    Neuron application, so each is an application of that process (a process may run several
    Neuron runtimes), and the process holds both: utilization and memory are added per core
    (a core's utilization at most 100 %), and a group unknown in either entry is unknown for
    the pid."""
    return RuntimeUsage(utilization=_add(first.utilization, second.utilization, cap=100.0),
                        memory=_add(first.memory, second.memory))


def _core_utilization(in_use: dict[str, Any], pid: int, errors: list[str]) -> dict[int, float] | None:
    out: dict[int, float] = {}
    for core, values in in_use.items():
        number = int_cell(core)
        value = _percent(values.get("neuroncore_utilization")) if isinstance(values, dict) else None
        if number is None or value is None:
            errors.append(f"neuron-monitor pid {pid}: unreadable utilization of core "
                          f"{shorten(core)}: {shorten(values)!r}")
            return None
        out[number] = value
    return out


def _core_memory(per_core: dict[str, Any], pid: int, errors: list[str]) -> dict[int, int] | None:
    out: dict[int, int] = {}
    for core, categories in per_core.items():
        number = int_cell(core)
        values = [_count(v) for v in categories.values()] if isinstance(categories, dict) else [None]
        if number is None or any(v is None or v < 0 for v in values):
            errors.append(f"neuron-monitor pid {pid}: unreadable memory of core {shorten(core)}: "
                          f"{shorten(categories)!r}")
            return None
        out[number] = sum(v for v in values if v is not None)
    return out

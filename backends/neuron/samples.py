"""Neuron devices as :class:`DeviceSample`: ``neuron-ls``'s devices and processes, with the
newest ``neuron-monitor`` report's per-NeuronCore utilization and memory folded onto the device
that holds each core.

A device's utilization is the mean over its NeuronCores (a core no Neuron application uses is
idle: 0 %), also reported as ``compute_active_percent`` (its declared source, ``core_busy``); its memory in
use is what the Neuron applications hold on its cores. A process's ``utilization_percent`` is its
cores' share of the device (the same mean, over its cores only), its ``memory_bytes`` what it
holds on the device. Without a report (``neuron-monitor`` missing) those values are ``None``;
where one application's group has an error, the devices it runs on get ``None`` for that value:
those ``neuron-ls`` lists it on and those holding the cores its other group reports, or every
device when neither says where it runs (:func:`placement`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from allsmi.schema.declarations import CORE_RANGE_DETAILS
from allsmi.schema import DeviceSample, ProcessSample

from .parse import MonitorReport, NeuronDevice

LookupUser = Callable[[int], "str | None"]

#: ``neuron-ls``'s ``instance_type`` prefix -> the device generation.
INSTANCE_FAMILIES = {"inf1": "Inferentia", "inf2": "Inferentia2", "trn1": "Trainium",
                     "trn1n": "Trainium", "trn2": "Trainium2", "trn2n": "Trainium2",
                     "trn2u": "Trainium2", "trn3": "Trainium3"}


def generation(device_type: str | None, instance_type: str | None) -> str | None:
    """``trainium2`` (neuron-monitor's device type) or the instance family's generation."""
    if device_type:
        return device_type
    if instance_type:
        return INSTANCE_FAMILIES.get(instance_type.split(".", 1)[0].lower())
    return None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def placement(devices: Sequence[NeuronDevice], report: MonitorReport) -> dict[int, set[int] | None]:
    """The devices each application of ``report`` runs on (by pid): those ``neuron-ls`` lists it
    on and those holding a core it reports in any of its groups (one group failing, the other
    still says where it runs); ``None`` when neither says, so it may run on any device."""
    out: dict[int, set[int] | None] = {}
    for pid, usage in report.runtimes.items():
        cores = set(usage.utilization or ()) | set(usage.memory or ())
        on = {dev.index for dev in devices
              if cores.intersection(dev.cores) or any(p.pid == pid for p in dev.processes)}
        out[pid] = on if on or cores else None
    return out


@dataclass
class DeviceUsage:
    """What the report says about one device: ``None`` where unknown."""

    utilization: float | None = None
    memory_used: int | None = None
    per_pid_util: dict[int, float | None] = field(default_factory=dict)
    per_pid_memory: dict[int, int | None] = field(default_factory=dict)


def device_usage(dev: NeuronDevice, report: MonitorReport,
                 placed: dict[int, set[int] | None]) -> DeviceUsage:
    """The applications' values summed over ``dev``'s cores; a value is ``None`` when an
    application that runs, or may run, on ``dev`` (``placed``) failed to report it."""
    cores = set(dev.cores)
    out = DeviceUsage()
    if not cores or report.unreadable_runtimes:
        return out
    listed = {p.pid for p in dev.processes}
    busy = {core: 0.0 for core in cores}
    memory_total = 0
    util_known = memory_known = True
    for pid, usage in report.runtimes.items():
        on = placed[pid]
        here = on is None or dev.index in on
        if usage.utilization is None:
            util_known = util_known and not here
            out.per_pid_util[pid] = None
        else:
            held = {c: v for c, v in usage.utilization.items() if c in cores}
            for core, value in held.items():
                busy[core] += value
            out.per_pid_util[pid] = sum(held.values()) / len(cores) if (held or pid in listed) else None
        if usage.memory is None:
            memory_known = memory_known and not here
            out.per_pid_memory[pid] = None
        else:
            held_bytes = sum(v for c, v in usage.memory.items() if c in cores)
            memory_total += held_bytes
            out.per_pid_memory[pid] = held_bytes
    if util_known:
        out.utilization = _mean([min(100.0, v) for v in busy.values()])
    if memory_known:
        out.memory_used = memory_total
    return out


def build_samples(devices: Sequence[NeuronDevice], report: MonitorReport | None, *, backend: str,
                  vendor: str, kind: str, model_name: Callable[[str | None], str | None],
                  lookup_user: LookupUser, source: str,
                  warnings: list[str] | None = None) -> list[DeviceSample]:
    out = []
    placed = placement(devices, report) if report is not None else {}
    for dev in devices:
        usage = device_usage(dev, report, placed) if report is not None else DeviceUsage()
        utilization, memory_used = usage.utilization, usage.memory_used
        if memory_used is not None and dev.memory_total_bytes is not None \
                and memory_used > dev.memory_total_bytes:
            # Out of range: no figure to trust (clamping it would report a full device).
            if warnings is not None:
                warnings.append(f"neuron device {dev.index}: memory in use {memory_used} bytes above "
                                f"its total {dev.memory_total_bytes}; reported as unknown")
            memory_used = None
        processes = tuple(
            ProcessSample(pid=p.pid, user=lookup_user(p.pid), command=p.command,
                          memory_bytes=usage.per_pid_memory.get(p.pid),
                          utilization_percent=usage.per_pid_util.get(p.pid))
            for p in dev.processes)
        details: dict[str, object] = {}
        if dev.cores and list(dev.cores) == list(range(dev.cores[0], dev.cores[0] + len(dev.cores))):
            details.update(zip(CORE_RANGE_DETAILS, (dev.cores[0], len(dev.cores))))
        if dev.logical_config is not None:
            details["logical_neuroncore_config"] = dev.logical_config
        if dev.instance_type:
            details["instance_type"] = dev.instance_type
        health = "ok"
        ecc = report.ecc_uncorrected.get(dev.index) if report is not None else None
        if ecc:
            health = "degraded"
            details["ecc_uncorrected_events"] = ecc
        ident = f"neuron:{dev.bus_id}" if dev.bus_id else f"neuron:{dev.index}"
        out.append(DeviceSample(
            id=ident, vendor=vendor, kind=kind, backend=backend, index=dev.index, uuid=None,
            name=model_name(generation(report.device_type if report else None, dev.instance_type)),
            bus_id=dev.bus_id, health=health, utilization_percent=utilization,
            compute_active_percent=utilization,
            compute_active_source=source if utilization is not None else None,
            memory_used_bytes=memory_used, memory_total_bytes=dev.memory_total_bytes,
            processes=processes, details=details))
    return out

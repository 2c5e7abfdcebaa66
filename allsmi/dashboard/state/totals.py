"""Totals over sets of devices (a resource group, a vendor, a host) and their sort order."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from allsmi.schema.formatting import NA

from allsmi.dashboard.state.model import DeviceRef, EnergyMeter


# -- totals -------------------------------------------------------------------------

@dataclass
class Totals:
    """Sums and averages over a set of devices (a group, a vendor, a host)."""

    name: str
    devices: int = 0
    partitions: int = 0
    lost: int = 0
    hosts: set[str] = field(default_factory=set)
    utilization_sum: float = 0.0
    utilization_count: int = 0
    memory_used_bytes: int | None = None
    """Memory in use of the devices that report both their use and their total (like with like)."""
    memory_total_bytes: int | None = None
    """Memory of those same devices."""
    memory_count: int = 0
    """Devices that report both memory in use and total memory."""
    memory_reported: int = 0
    """Devices that report either (more than :attr:`memory_count`: the sums are partial)."""
    power_watts: float | None = None
    """Power of every device that reports it (the draw of the set)."""
    power_limit_watts: float | None = None
    """Power limits of the devices that report both power and a limit (like with like)."""
    power_limited_watts: float | None = None
    """Power of those same devices, what :attr:`power_limit_watts` is compared with."""
    power_count: int = 0
    """Devices that report power."""
    power_limited_count: int = 0
    """Devices that report both power and a limit."""
    energy_joules: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    processes: int = 0
    processes_unknown: int = 0
    """Devices (and partitions) whose backend cannot list their processes: :attr:`processes`
    counts those of the others only."""
    processes_known: int = 0
    """Devices (and partitions) whose processes are listed."""
    hottest_celsius: float | None = None
    """The highest temperature among the devices (what the temperature sort orders by)."""

    @property
    def utilization_percent(self) -> float | None:
        """Mean utilization over the devices that report one, or ``None``."""
        return self.utilization_sum / self.utilization_count if self.utilization_count else None

    @property
    def memory_percent(self) -> float | None:
        """Memory used as a share of the total, or ``None``."""
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return 100.0 * self.memory_used_bytes / self.memory_total_bytes


def _add(total: int | float | None, value: int | float | None) -> int | float | None:
    if value is None:
        return total
    return value if total is None else total + value


def sum_totals(name: str, parts: Sequence[Totals]) -> Totals:
    """One :class:`Totals` adding up ``parts`` (e.g. the hosts of a fleet computed elsewhere)."""
    out = Totals(name)
    for part in parts:
        out.devices += part.devices
        out.partitions += part.partitions
        out.lost += part.lost
        out.processes += part.processes
        out.processes_unknown += part.processes_unknown
        out.processes_known += part.processes_known
        out.power_count += part.power_count
        out.memory_count += part.memory_count
        out.memory_reported += part.memory_reported
        out.power_limited_count += part.power_limited_count
        out.hosts |= part.hosts
        out.utilization_sum += part.utilization_sum
        out.utilization_count += part.utilization_count
        for attr in ("memory_used_bytes", "memory_total_bytes", "power_watts", "power_limit_watts",
                     "power_limited_watts",
                     "energy_joules"):
            setattr(out, attr, _add(getattr(out, attr), getattr(part, attr)))
        out.hottest_celsius = _max(out.hottest_celsius, part.hottest_celsius)
    return out


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def totals_value(totals: Totals, key: str) -> float | None:
    """The number a totals row (group, vendor) sorts by for the sort ``key``."""
    if key == "utilization":
        return totals.utilization_percent
    if key == "memory":
        return totals.memory_percent
    if key == "power":
        return totals.power_watts
    if key == "temperature":
        return totals.hottest_celsius
    return None


def order_totals(rows: Sequence[Totals], key: str, descending: bool) -> list[Totals]:
    """Totals rows in the dashboard's sort order: by name for ``index``, else by the same
    quantity the device table sorts by (unknown last in both directions, ties by name; the
    row of the devices without a group, ``N/A`` (empty from a fleet's totals), last by name
    too: "N/A" sorted between "ML" and "Prod")."""
    if key == "index":
        named = sorted((t for t in rows if t.name not in (NA, "")), key=lambda t: t.name,
                       reverse=descending)
        return named + [t for t in rows if t.name in (NA, "")]

    def rank(totals: Totals) -> tuple[int, float, str]:
        value = totals_value(totals, key)
        if value is None:
            return (1, 0.0, totals.name)
        return (0, -value if descending else value, totals.name)

    return sorted(rows, key=rank)


def totals_by(refs: Sequence[DeviceRef], key: Callable[[DeviceRef], str | None],
              energy: EnergyMeter | None = None,
              labels: Callable[[str], Mapping[str, str]] | None = None) -> list[Totals]:
    """Totals per value of ``key`` (e.g. the resource group), in order of first appearance.

    A physical device counts once, a partition as a partition (never as a device: a group
    holding one MIG slice of another group's GPU has ``0+1p``). A partition's memory counts
    on its own only when it sits in a different bucket from its parent (a MIG slice given
    to another team); then its memory moves with it. Power and energy are
    board-level, so they are summed as reported (partitions carry none).
    Utilization is averaged over the devices that report one, partitions
    included (a GPU in MIG mode reports none itself).
    """
    by_id = {(r.host, r.device.id): r for r in refs}
    out: dict[str, Totals] = {}
    moved_used: dict[tuple[str, str], int] = collections.defaultdict(int)
    moved_total: dict[tuple[str, str], int] = collections.defaultdict(int)
    counted: list[tuple[DeviceRef, Totals, bool]] = []
    unsure: set[tuple[str, str]] = set()
    for ref in refs:
        name = key(ref)
        if name is None:
            continue
        totals = out.get(name)
        if totals is None:
            totals = out[name] = Totals(name)
            if labels is not None:
                totals.labels = dict(labels(name))
        dev = ref.device
        parent = by_id.get((ref.host, dev.parent)) if dev.parent is not None else None
        is_unit = parent is None or key(parent) != name
        if dev.parent is not None:
            totals.partitions += 1
        if is_unit and parent is not None:
            here = (ref.host, parent.device.id)
            if dev.memory_used_bytes is None or dev.memory_total_bytes is None:
                unsure.add(here)  # how much of the parent's use moved is unknown
            moved_used[here] += dev.memory_used_bytes or 0
            moved_total[here] += dev.memory_total_bytes or 0
        counted.append((ref, totals, is_unit))
    for ref, totals, is_unit in counted:
        dev = ref.device
        totals.hosts.add(ref.host)
        if not totals.labels:
            totals.labels.update(dev.labels)
        if dev.processes is None:
            totals.processes_unknown += 1
        else:
            totals.processes += len(dev.processes)
            totals.processes_known += 1
        if dev.utilization_percent is not None:
            totals.utilization_sum += dev.utilization_percent
            totals.utilization_count += 1
        totals.hottest_celsius = _max(totals.hottest_celsius, dev.temperature_celsius)
        if dev.power_watts is not None:
            totals.power_watts = _add(totals.power_watts, dev.power_watts)
            totals.power_count += 1
            if dev.power_limit_watts is not None:  # a limit only against its own device's power
                totals.power_limited_watts = _add(totals.power_limited_watts, dev.power_watts)
                totals.power_limit_watts = _add(totals.power_limit_watts, dev.power_limit_watts)
                totals.power_limited_count += 1
        if energy is not None:
            totals.energy_joules = _add(totals.energy_joules, energy.joules(ref.key))
        if not is_unit:
            continue
        if dev.parent is None:
            totals.devices += 1
        if dev.health == "lost":
            totals.lost += 1
        here = (ref.host, dev.id)
        used, total = dev.memory_used_bytes, dev.memory_total_bytes
        if used is not None or total is not None:
            totals.memory_reported += 1
        # Like with like (as power against limits): a device whose use (or total) is unknown adds
        # neither, so the share used is never a known use over a larger total.
        if used is None or total is None or here in unsure:
            continue
        totals.memory_count += 1
        totals.memory_used_bytes = _add(totals.memory_used_bytes,  # type: ignore[assignment]
                                        used - moved_used.get(here, 0))
        totals.memory_total_bytes = _add(totals.memory_total_bytes,  # type: ignore[assignment]
                                         total - moved_total.get(here, 0))
    return list(out.values())

"""Which amdsmi processor handles are partitions of one board, and who owns the board.

With a compute partition mode other than SPX (DPX, TPX, QPX, CPX on MI300),
amdsmi enumerates every partition as its own processor handle. They share the
board's PCI domain, bus and device; the partition number shows up as the PCI
function and as ``amdsmi_get_gpu_kfd_info()["current_partition_id"]``.

Rules (see ``docs/backends/amd.md``):

* handles sharing a PCI domain:bus:device are partitions of one board, and
  so is a lone handle whose mode is not SPX; the partition number is the KFD
  ``current_partition_id``, else the PCI function;
* partition 0 owns the board: it carries board power, power cap and energy,
  and the board's other partitions name it as their ``parent``;
* partitions come right after their owner, in partition order;
* a partition whose partition 0 is not visible (a container given only some
  partitions) is reported without a parent and without board power, so that
  no board is ever counted twice.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from allsmi.backends._amdsmi_convert import split_bdf
from allsmi.schema import DetailValue

UNPARTITIONED_MODE = "SPX"


@dataclass
class PlannedDevice:
    """One processor handle with its static facts, as read once in ``open()``."""

    index: int
    handle: Any
    uuid: str | None = None
    bus_id: str | None = None
    name: str | None = None
    driver_version: str | None = None
    firmware_version: str | None = None
    compute_partition: str | None = None
    memory_partition: str | None = None
    partition_id: int | None = None
    details: dict[str, DetailValue] = field(default_factory=dict)
    # filled by arrange()
    id: str = ""
    parent: str | None = None
    owns_board: bool = True

    @property
    def label(self) -> str:
        """How warnings name this device: its bus id, else its id."""
        return self.bus_id or self.id


def _assign_ids(devices: Sequence[PlannedDevice]) -> None:
    # A uuid is the stable id, but only if no other handle claims the same one
    # (partitions of some boards may share the board's uuid).
    uuids = Counter(d.uuid for d in devices if d.uuid)
    for dev in devices:
        if dev.uuid and uuids[dev.uuid] == 1:
            dev.id = dev.uuid
        elif dev.bus_id:
            dev.id = f"amd:{dev.bus_id.lower()}"
        else:
            dev.id = f"amd:gpu{dev.index}"
    taken = Counter(d.id for d in devices)
    for dev in devices:
        if taken[dev.id] > 1:
            dev.id = f"{dev.id}#{dev.index}"


def _partitioned(dev: PlannedDevice) -> bool:
    return dev.compute_partition is not None and dev.compute_partition.upper() != UNPARTITIONED_MODE


def arrange(devices: Sequence[PlannedDevice]) -> list[PlannedDevice]:
    """Assign ids, parents and board ownership; return owners before their partitions.

    Several handles on one PCI device are taken as partitions whatever their
    mode string says: a GPU has one PCI function, and trusting a missing mode
    string would count the board's power once per partition.
    """
    _assign_ids(devices)
    by_base: dict[str, list[tuple[PlannedDevice, int]]] = {}
    for dev in devices:
        split = split_bdf(dev.bus_id)
        if split is not None:
            by_base.setdefault(split[0], []).append((dev, split[1]))
    keys: dict[int, str] = {}
    boards: dict[str, list[PlannedDevice]] = {}
    for base, members in by_base.items():
        if len(members) == 1 and not _partitioned(members[0][0]):
            continue
        boards[base] = [member for member, _ in members]
        for member, function in members:
            keys[member.index] = base
            if member.partition_id is None:
                member.partition_id = function

    ordered: list[PlannedDevice] = []
    done: set[str] = set()
    for dev in devices:
        key = keys.get(dev.index)
        if key is None:
            dev.parent, dev.owns_board = None, True
            ordered.append(dev)
            continue
        if key in done:
            continue
        done.add(key)
        members = sorted(boards[key], key=lambda d: (d.partition_id, d.index))
        owner = members[0] if members[0].partition_id == 0 else None
        for member in members:
            member.owns_board = member is owner
            member.parent = owner.id if owner is not None and member is not owner else None
            ordered.append(member)
    return ordered

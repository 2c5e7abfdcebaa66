"""Which amdsmi processor handles are partitions of one physical GPU.

With a compute partition mode other than SPX (DPX, TPX, QPX, CPX on MI300),
amdsmi enumerates every partition as its own processor handle and none for the
physical GPU. The partitions share the board's PCI domain, bus and device; the
partition number shows up as the PCI function and as
``amdsmi_get_gpu_kfd_info()["current_partition_id"]``.

Rules (see ``docs/backends/amd.md``):

* handles sharing a PCI domain:bus:device are partitions of one physical GPU,
  and so is a lone handle whose mode is not SPX; the partition number is the
  KFD ``current_partition_id``, else the PCI function;
* every partitioned GPU becomes a :class:`Board`, a device of its own, and
  **every** partition, the first included, is a child with ``parent`` set to
  the board's id and ``partition_share`` = 1/N of it (N from the mode: DPX 2,
  TPX 3, QPX 4; CPX one per XCD, i.e. the partitions seen, at least the
  highest partition number + 1, and at least the ``num_partition`` of the
  board's ``gpu_metrics`` table (:func:`widen`: a container given some of
  the partitions does not see the others);
* the board carries board power, power cap, energy and ECC, read through the
  first partition (in partition order) that reports socket power; partitions
  carry none of them, so board power is counted exactly once whether amdsmi
  repeats it on every partition, reports it on the first only, or on none of
  the secondary ones;
* a board whose partition 0 is not visible (a container given only some
  partitions) reports no board power, so that no board is counted twice by
  two containers;
* the memory partition mode (NPS1, NPS4) changes what each partition's VRAM
  total is, not the layout: it is reported in ``details``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence, Union

from allsmi.backends.amd.convert import SENTINELS_U32, split_bdf, whole
from allsmi.schema import DetailValue

UNPARTITIONED_MODE = "SPX"
#: Compute partitions per GPU for the modes that fix the number.
PARTITIONS_PER_MODE = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4}


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
    partitions_total: int | None = None
    """The partitions of its board by the board's ``gpu_metrics`` table (:func:`widen`)."""
    details: dict[str, DetailValue] = field(default_factory=dict)
    # filled by arrange()
    id: str = ""
    parent: str | None = None
    partition_share: float | None = None
    device_index: int | None = None
    """The index reported: the GPU's ordinal for a whole GPU, ``None`` for a partition."""

    @property
    def label(self) -> str:
        """How warnings name this device: its bus id, else its id."""
        return self.bus_id or self.id


@dataclass
class Board:
    """A partitioned physical GPU: no handle of its own, read through its partitions."""

    index: int
    id: str
    uuid: str | None
    bus_id: str | None
    name: str | None
    driver_version: str | None
    firmware_version: str | None
    partitions: list[PlannedDevice]
    owns_power: bool
    """Partition 0 is visible here, so this host reports the board's power."""
    details: dict[str, DetailValue] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.bus_id or self.id


Layout = list[Union[PlannedDevice, Board]]
"""Whole GPUs and boards in enumeration order (a board's partitions inside it)."""


def _assign_ids(devices: Sequence[PlannedDevice]) -> Counter[str]:
    # A uuid is the stable id, but only if no other handle claims the same one
    # (partitions of some boards share the board's uuid).
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
    return uuids


def _partitioned(dev: PlannedDevice) -> bool:
    return dev.compute_partition is not None and dev.compute_partition.upper() != UNPARTITIONED_MODE


def partition_count(mode: str | None, members: Sequence[PlannedDevice]) -> int:
    """N, the number of compute partitions the GPU is split into."""
    fixed = PARTITIONS_PER_MODE.get((mode or "").upper())
    highest = max((m.partition_id or 0) for m in members) + 1 if members else 1
    stated = max((m.partitions_total or 0) for m in members) if members else 0
    seen = max(len(members), highest, stated)
    if fixed is not None and fixed >= seen:
        return fixed
    return seen  # CPX (one per XCD) or a mode string that disagrees with the handles


def _board(index: int, base: str, members: list[PlannedDevice], uuids: Counter[str],
           taken: set[str]) -> Board:
    members.sort(key=lambda d: (d.partition_id if d.partition_id is not None else 1 << 30, d.index))
    first = members[0]
    shared = {m.uuid for m in members}
    # One uuid on every partition and nowhere else is the board's own.
    uuid = first.uuid if len(shared) == 1 and first.uuid and uuids[first.uuid] == len(members) \
        else None
    board_id = uuid or f"amd:{base}"
    while board_id in taken:
        board_id += "#board"
    mode = next((m.compute_partition for m in members if m.compute_partition), None)
    share = 1.0 / partition_count(mode, members)
    owns_power = any(m.partition_id == 0 for m in members)
    board = Board(index=index, id=board_id, uuid=uuid, bus_id=f"{base}.0",
                  name=first.name, driver_version=first.driver_version,
                  firmware_version=first.firmware_version, partitions=members,
                  owns_power=owns_power)
    for key in ("gfx_version", "vbios_part_number", "compute_partition", "memory_partition"):
        if key in first.details:
            board.details[key] = first.details[key]
    board.details["partitions"] = len(members)
    for member in members:
        member.parent = board_id
        member.partition_share = share
        member.device_index = None
    return board


def arrange(devices: Sequence[PlannedDevice]) -> Layout:
    """Ids, parents and shares; whole GPUs and boards in enumeration order.

    Several handles on one PCI device are taken as partitions whatever their
    mode string says: a GPU has one PCI function per partition, and trusting a
    missing mode string would count the board's power once per partition.
    """
    uuids = _assign_ids(devices)
    taken = {d.id for d in devices}
    by_base: dict[str, list[tuple[PlannedDevice, int]]] = {}
    for dev in devices:
        split = split_bdf(dev.bus_id)
        if split is not None:
            by_base.setdefault(split[0], []).append((dev, split[1]))
    board_of: dict[int, str] = {}
    for base, members in by_base.items():
        if len(members) == 1 and not _partitioned(members[0][0]):
            continue
        for member, function in members:
            board_of[member.index] = base
            if member.partition_id is None:
                member.partition_id = function

    layout: Layout = []
    done: set[str] = set()
    for dev in devices:
        base = board_of.get(dev.index)
        if base is None:
            dev.parent, dev.partition_share = None, None
            dev.device_index = len(layout)
            layout.append(dev)
        elif base not in done:
            done.add(base)
            members = [member for member, _ in by_base[base]]
            board = _board(len(layout), base, members, uuids, taken)
            taken.add(board.id)
            layout.append(board)
    return layout


def widen(board: Board, total: object) -> None:
    """Shares of 1/``total`` for ``board``'s partitions when its ``gpu_metrics`` table says it
    is split into more partitions than the handles show (``num_partition``, metrics 1.6 and
    later). A CPX board seen from a container given three of its eight partitions is eight
    eighths, not three thirds: the partitions elsewhere keep their share of the board. The
    count stays with the partitions, so a later :func:`arrange` keeps it."""
    count = whole(total, SENTINELS_U32)
    if count is None or not board.partitions:
        return
    for member in board.partitions:
        member.partitions_total = count
    mode = next((m.compute_partition for m in board.partitions if m.compute_partition), None)
    share = 1.0 / partition_count(mode, board.partitions)
    for member in board.partitions:
        member.partition_share = share

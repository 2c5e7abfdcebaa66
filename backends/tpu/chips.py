"""TPU chips from sysfs: every PCI function of Google's vendor id whose device id is a TPU, grouped
into chips, and which libtpu device ids each chip is.

``<sysfs>/bus/pci/devices/<address>/{vendor,device,subsystem_device,iommu_group}``; the device ids
(v2 and v3 share one and differ by subsystem) and each generation's devices per chip are those
the public ``tpu-info`` tool uses. A chip of one libtpu device (v4 to v6e) is one PCI function. A
chip of two TensorCores (v2, v3, 7x) is one PCI function, or one function per TensorCore in one
slot (``0000:00:04.0`` and ``0000:00:04.1``: tpu-info groups 7x functions by slot, function
number = core): the functions of one slot are then one chip, never two. Chips are numbered in
PCI address order, which is the order of their device nodes (``/dev/accel<N>`` up to v4,
``/dev/vfio/<N>`` from v5e; the IOMMU group where sysfs names one), and chip ``k`` of a
generation of ``n`` devices per chip is libtpu devices ``k*n`` to ``k*n+n-1``.

That numbering holds only for one generation laid out one way. Mixed generations, or chips of two
TensorCores of which some are one function and some two (a core's function hidden), leave it
ambiguous: :attr:`Layout.problem` says why, and no chip is given libtpu devices (its values are
unknown, never another chip's). A slot that cannot be one chip (more functions than the chip has
TensorCores) is listed function by function, never merged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from allsmi.backends.tpu import GOOGLE_VENDOR


@dataclass(frozen=True)
class Generation:
    name: str
    """``v5e``, ``7x``."""
    devices_per_chip: int
    """How many libtpu devices (TensorCores seen as devices) one chip is."""
    vfio: bool
    """Its nodes are ``/dev/vfio/<N>`` (else ``/dev/accel<N>``)."""
    duty_per_chip: bool = False
    """libtpu gives its duty cycle once per chip (keyed by chip position), not per device:
    v2 and v3, which tpu-info repeats over the chip's devices; 7x's is per TensorCore."""


V2, V3 = Generation("v2", 2, False, True), Generation("v3", 2, False, True)
DEVICE_IDS = {"0x005e": Generation("v4", 1, False), "0x0063": Generation("v5e", 1, True),
              "0x0062": Generation("v5p", 1, True), "0x006f": Generation("v6e", 1, True),
              "0x0076": Generation("7x", 2, True)}


@dataclass(frozen=True)
class Function:
    """One TPU PCI function in sysfs."""

    address: str
    """``0000:00:04.1``, lower case."""
    generation: Generation
    iommu_group: str | None = None

    @property
    def slot(self) -> str:
        return self.address.rsplit(".", 1)[0]

    @property
    def number(self) -> int | None:
        tail = self.address.rsplit(".", 1)[-1]
        return int(tail) if tail.isascii() and tail.isdigit() else None


@dataclass(frozen=True)
class Chip:
    index: int
    bus_id: str
    """The address of the chip's first PCI function (its only one, or TensorCore 0's)."""
    generation: Generation
    functions: tuple[Function, ...] = ()
    devices: tuple[int, ...] | None = None
    """Its libtpu device ids; ``None`` where the layout leaves them ambiguous."""

    @property
    def node(self) -> str | None:
        """Its (first) device node: ``/dev/vfio/<IOMMU group>`` where sysfs names the group, else
        by position for a chip of one function in an unambiguous layout; ``None`` for a chip of
        several functions without groups (each TensorCore has a node of its own, numbered
        unknown) or where the layout is ambiguous."""
        first = self.functions[0] if self.functions else None
        if first is not None and first.iommu_group is not None and self.generation.vfio:
            return f"/dev/vfio/{first.iommu_group}"
        if len(self.functions) > 1 or self.devices is None:
            return None
        return f"/dev/vfio/{self.index}" if self.generation.vfio else f"/dev/accel{self.index}"


@dataclass(frozen=True)
class Layout:
    chips: tuple[Chip, ...]
    problem: str | None = None
    """Why the chips' libtpu device ids are unknown (an ambiguous layout), or a function listed
    twice; ``None`` when every chip's devices are known."""


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(64).strip().lower()
    except OSError:
        return ""


def _iommu_group(path: str) -> str | None:
    try:
        group = os.path.basename(os.readlink(os.path.join(path, "iommu_group")))
    except OSError:
        return None
    return group if group.isascii() and group.isdigit() else None


def find_functions(pci: str) -> tuple[list[Function], list[str]]:
    """The TPU functions under ``pci`` in address order, and a note per address listed twice
    (two names that differ only in case are one address: kept once)."""
    try:
        names = sorted(os.listdir(pci))
    except OSError:
        return [], []
    found: dict[str, Function] = {}
    notes: list[str] = []
    for name in names:
        path = os.path.join(pci, name)
        if _read(os.path.join(path, "vendor")) != GOOGLE_VENDOR:
            continue
        device = _read(os.path.join(path, "device"))
        if device == "0x0027":
            generation = {"0x004e": V2, "0x004f": V3}.get(_read(os.path.join(path, "subsystem_device")))
        else:
            generation = DEVICE_IDS.get(device)
        if generation is None:
            continue
        address = name.lower()
        if address in found:
            notes.append(f"PCI function {address} is listed twice in {pci}; counted once")
            continue
        found[address] = Function(address, generation, _iommu_group(path))
    return sorted(found.values(), key=lambda f: f.address), notes


def find_chips(pci: str) -> Layout:
    """The chips under ``pci`` (see the module docstring) and their libtpu devices."""
    functions, notes = find_functions(pci)
    if not functions:
        return Layout((), "; ".join(notes) or None)
    generations = {f.generation for f in functions}
    groups: list[tuple[Function, ...]] = []
    split: list[str] = []
    for function in functions:
        per = function.generation.devices_per_chip
        last = groups[-1] if groups else ()
        if per > 1 and last and last[0].slot == function.slot and last[0].generation == function.generation:
            groups[-1] = last + (function,)
        else:
            groups.append((function,))
    listed: list[tuple[Function, ...]] = []
    for group in groups:
        per = group[0].generation.devices_per_chip
        if len(group) > 1 and (len(group) > per or any(f.number is None or f.number >= per for f in group)):
            split.append(group[0].slot)
            listed.extend((f,) for f in group)  # cannot be one chip: never merged
        else:
            listed.append(group)
    problem = None
    if len(generations) > 1:
        problem = ("TPU layout ambiguous: chips of several generations ("
                   + ", ".join(sorted(g.name for g in generations))
                   + ") leave libtpu's device numbering unknown; their values are reported as unknown")
    elif split:
        problem = (f"TPU layout ambiguous: slot(s) {', '.join(split)} hold more PCI functions than a "
                   f"{functions[0].generation.name} chip has TensorCores; each function is listed "
                   "alone and values are reported as unknown")
    elif len({len(group) for group in listed}) > 1:
        problem = (f"TPU layout ambiguous: some {functions[0].generation.name} chips are one PCI "
                   "function and some one per TensorCore ("
                   + ", ".join(f"{g[0].slot}: {len(g)}" for g in listed)
                   + "), so which libtpu devices are which chip's is unknown; values are reported "
                   "as unknown")
    chips = []
    for index, group in enumerate(listed):
        per = group[0].generation.devices_per_chip
        devices = None if problem else tuple(range(index * per, index * per + per))
        chips.append(Chip(index, group[0].address, group[0].generation, group, devices))
    return Layout(tuple(chips), "; ".join(notes + ([problem] if problem else [])) or None)

"""TPU chips from sysfs: every PCI device of Google's vendor id whose device id is a TPU.

``<sysfs>/bus/pci/devices/<address>/{vendor,device,subsystem_device}``; the device ids (v2 and
v3 share one and differ by subsystem) and each generation's devices per chip are those the
public ``tpu-info`` tool uses. Chips are numbered in PCI address order, which is the order of
their device nodes (``/dev/accel<N>`` up to v4, ``/dev/vfio/<N>`` from v5e).
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


V2, V3 = Generation("v2", 2, False), Generation("v3", 2, False)
DEVICE_IDS = {"0x005e": Generation("v4", 1, False), "0x0063": Generation("v5e", 1, True),
              "0x0062": Generation("v5p", 1, True), "0x006f": Generation("v6e", 1, True),
              "0x0076": Generation("7x", 2, True)}


@dataclass(frozen=True)
class Chip:
    index: int
    bus_id: str
    generation: Generation

    @property
    def node(self) -> str:
        return f"/dev/vfio/{self.index}" if self.generation.vfio else f"/dev/accel{self.index}"


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(64).strip().lower()
    except OSError:
        return ""


def find_chips(pci: str) -> list[Chip]:
    found = []
    try:
        names = sorted(os.listdir(pci))
    except OSError:
        return []
    for name in names:
        path = os.path.join(pci, name)
        if _read(os.path.join(path, "vendor")) != GOOGLE_VENDOR:
            continue
        device = _read(os.path.join(path, "device"))
        if device == "0x0027":
            generation = {"0x004e": V2, "0x004f": V3}.get(_read(os.path.join(path, "subsystem_device")))
        else:
            generation = DEVICE_IDS.get(device)
        if generation is not None:
            found.append((name.lower(), generation))
    return [Chip(n, bus, gen) for n, (bus, gen) in enumerate(found)]

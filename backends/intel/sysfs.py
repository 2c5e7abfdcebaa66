"""What the i915 and xe drivers publish in sysfs for one GPU, read as counters.

Under ``<sysfs>/class/drm/card<N>``:

* ``device/uevent``: ``DRIVER=i915|xe``, ``PCI_ID=8086:56C0``, ``PCI_SLOT_NAME=0000:4d:00.0``;
* local memory: xe ``device/tile<T>/physical_vram_size_bytes`` (summed over tiles), i915
  ``device/lmem_total_bytes`` (where the kernel publishes it); none on integrated GPUs;
* frequency: i915 ``gt_act_freq_mhz``; xe ``device/tile<T>/gt<G>/freq0/act_freq`` (MHz);
* GT idle residency (milliseconds the GT spent idle, a counter): i915 ``gt/gt<G>/rc6_residency_ms``
  (older kernels: ``power/rc6_residency_ms``); xe ``device/tile<T>/gt<G>/gtidle/idle_residency_ms``
  of the render/compute GTs (``gtidle/name`` ``gt<G>-rc``): a media GT (``gt<G>-mc``, the video
  engines of Meteor Lake, Lunar Lake, Battlemage) is not the GPU's compute, and its idle time
  would halve a fully busy GPU's figure. i915 names no GT's kind: its only GPUs with a media GT
  are Meteor Lake and Arrow Lake (:data:`I915_MEDIA_GT_IDS`), whose ``gt1`` is that GT, left out
  likewise;
* hwmon (``device/hwmon/hwmon<H>`` whose ``name`` is the driver): ``energy1_input`` (µJ, a counter),
  ``power1_max`` (µW, the sustained power limit), ``temp<K>_input`` (m°C; the one labelled ``pkg``
  where labels exist). xe numbers its power channels by domain, 1 the card and 2 the package
  (what Level Zero Sysman, under xpu-smi, reads as its card and package power domains), and a GPU
  without a card channel (DG2 and PVC under xe) has only ``energy2_input`` and ``power2_max``: the
  card channel is read where it exists, else the package's, chosen once per GPU so that one
  counter is never differenced against the other.

Busy time is what the GT was not idle: between two readings, ``1 - Δidle / Δwall`` per GT,
averaged over the GTs; power is ``Δenergy / Δwall``. The first reading of a device has neither.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from allsmi.schema import units

#: PCI ids of the GPUs i915 drives with a standalone media GT (``gt1``, the video engines; ``gt0``
#: is render/compute): Meteor Lake and Arrow Lake, the kernel's ``INTEL_MTL_IDS`` and
#: ``INTEL_ARL_IDS`` (both driven as Meteor Lake). i915's other multi-GT part, Data Center GPU
#: Max, has a compute GT per tile.
I915_MEDIA_GT_IDS = frozenset(f"8086:{n}" for n in (
    "7d40", "7d45", "7d55", "7d60", "7dd5", "7d41", "7d51", "7d67", "7dd1", "b640"))

# [0-9], not \d (which takes other scripts' digits too)
_CARD = re.compile(r"^card([0-9]+)\Z")
_TILE = re.compile(r"^tile[0-9]+\Z")
_GT = re.compile(r"^gt[0-9]+\Z")


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(4096).strip()
    except OSError:
        return None


def read_int(path: str, minimum: int | None = 0) -> int | None:
    """The file's whole number, ``minimum`` or more (``None``: any sign); ``None`` for anything
    else (the kernel prints counters, sizes, limits and clocks unsigned: ``-1`` from one is
    no reading, nor is ``1_000``, which ``int()`` takes)."""
    return units.to_int(read_text(path), minimum=minimum)


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


@dataclass
class Card:
    """One Intel GPU (a DRM card driven by i915 or xe)."""

    index: int
    path: str
    driver: str
    bus_id: str | None
    pci_id: str | None
    """``8086:56c0``."""
    hwmon: str | None = None
    energy_path: str | None = None
    power_limit_path: str | None = None
    idle_paths: tuple[str, ...] = ()
    freq_path: str | None = None
    memory_paths: tuple[str, ...] = ()


@dataclass
class Reading:
    """One pass over a card's counters."""

    at: float
    idle_ms: tuple[int | None, ...] = ()
    energy_uj: int | None = None
    power_limit_uw: int | None = None
    temperature_mc: int | None = None
    clock_mhz: int | None = None
    memory_total_bytes: int | None = None
    problems: list[str] = field(default_factory=list)


def _uevent(path: str) -> dict[str, str]:
    out = {}
    for line in (read_text(os.path.join(path, "device", "uevent")) or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def find_cards(drm: str, drivers: tuple[str, ...]) -> list[Card]:
    """Every ``card<N>`` under ``drm`` driven by one of ``drivers``, by card number."""
    cards = []
    for name in _listdir(drm):
        match = _CARD.match(name)
        if not match:
            continue
        path = os.path.join(drm, name)
        event = _uevent(path)
        driver = event.get("DRIVER", "")
        if driver not in drivers:
            continue
        slot = event.get("PCI_SLOT_NAME", "").lower() or None
        pci = event.get("PCI_ID", "").lower() or None
        card = Card(int(match.group(1)), path, driver, slot, pci)
        _locate(card)
        cards.append(card)
    return sorted(cards, key=lambda c: c.index)


def _locate(card: Card) -> None:
    device = os.path.join(card.path, "device")
    hwmon_dir = os.path.join(device, "hwmon")
    for name in _listdir(hwmon_dir):
        if read_text(os.path.join(hwmon_dir, name, "name")) == card.driver:
            card.hwmon = os.path.join(hwmon_dir, name)
            card.energy_path = _channel(card.hwmon, "energy{}_input")
            card.power_limit_path = _channel(card.hwmon, "power{}_max")
            break
    if card.driver == "xe":
        tiles = [os.path.join(device, t) for t in _listdir(device) if _TILE.match(t)]
        gts = [os.path.join(tile, g) for tile in tiles for g in _listdir(tile) if _GT.match(g)]
        card.idle_paths = tuple(os.path.join(g, "gtidle", "idle_residency_ms") for g in gts
                                if not _media_gt(g))
        card.freq_path = os.path.join(gts[0], "freq0", "act_freq") if gts else None
        card.memory_paths = tuple(os.path.join(t, "physical_vram_size_bytes") for t in tiles)
    else:
        gt_dir = os.path.join(card.path, "gt")
        gts = [os.path.join(gt_dir, g) for g in _listdir(gt_dir) if _GT.match(g)
               and not (g != "gt0" and card.pci_id in I915_MEDIA_GT_IDS)]
        card.idle_paths = tuple(os.path.join(g, "rc6_residency_ms") for g in gts) or \
            (os.path.join(card.path, "power", "rc6_residency_ms"),)
        card.freq_path = os.path.join(card.path, "gt_act_freq_mhz")
        card.memory_paths = (os.path.join(device, "lmem_total_bytes"),)


def _channel(hwmon: str, pattern: str) -> str:
    """``pattern`` of the card channel (1) where the file exists, else of the package channel (2)
    where that one does; the card's path when neither does (no reading, as before)."""
    card, package = (os.path.join(hwmon, pattern.format(n)) for n in (1, 2))
    return package if not os.path.exists(card) and os.path.exists(package) else card


def _media_gt(gt: str) -> bool:
    """Whether the xe GT at ``gt`` is a media GT (``gtidle/name`` ``gt<G>-mc``; ``-rc`` is the
    render/compute GT). A GT without the file is counted as compute, as before the name existed."""
    name = read_text(os.path.join(gt, "gtidle", "name")) or ""
    return name.endswith("-mc")


def _temperature(hwmon: str) -> int | None:
    inputs = sorted(n for n in _listdir(hwmon) if n.startswith("temp") and n.endswith("_input"))
    chosen = None
    for name in inputs:
        label = read_text(os.path.join(hwmon, name.replace("_input", "_label")))
        if label is not None and label.lower() == "pkg":
            chosen = name
            break
        if chosen is None and label is None:
            chosen = name
    return read_int(os.path.join(hwmon, chosen), minimum=None) if chosen else None  # m°C: signed


def read_card(card: Card, now: float) -> Reading:
    reading = Reading(at=now)
    reading.idle_ms = tuple(read_int(p) for p in card.idle_paths)
    if card.hwmon is not None:
        reading.energy_uj = read_int(card.energy_path) if card.energy_path else None
        reading.power_limit_uw = read_int(card.power_limit_path) if card.power_limit_path else None
        reading.temperature_mc = _temperature(card.hwmon)
    reading.clock_mhz = read_int(card.freq_path) if card.freq_path else None
    sizes = [read_int(p) for p in card.memory_paths]
    if sizes and all(s is not None and s > 0 for s in sizes):
        reading.memory_total_bytes = sum(s for s in sizes if s is not None)
    return reading


def busy_percent(before: Reading | None, now: Reading) -> float | None:
    """The GTs' mean busy share between two readings (``None`` without a usable pair: the first
    reading, a GT missing from either, a counter that went backwards or an interval under 10 ms)."""
    if before is None or not now.idle_ms or len(before.idle_ms) != len(now.idle_ms):
        return None
    wall_ms = (now.at - before.at) * 1000.0
    if wall_ms < 10.0:
        return None
    shares = []
    for old, new in zip(before.idle_ms, now.idle_ms):
        if old is None or new is None or new < old:
            return None
        shares.append(100.0 * (1.0 - min(1.0, (new - old) / wall_ms)))
    return sum(shares) / len(shares)


def went_backwards(before: Reading | None, now: Reading) -> list[str]:
    """The counters that went backwards between two readings (a driver reloaded, a counter that
    wrapped): what :func:`busy_percent` and :func:`power_watts` cannot tell, named."""
    if before is None:
        return []
    out = []
    if len(before.idle_ms) == len(now.idle_ms) and any(
            old is not None and new is not None and new < old
            for old, new in zip(before.idle_ms, now.idle_ms)):
        out.append("GT idle residency (utilization)")
    if before.energy_uj is not None and now.energy_uj is not None \
            and now.energy_uj < before.energy_uj:
        out.append("energy (power)")
    return out


def power_watts(before: Reading | None, now: Reading) -> float | None:
    """``Δenergy / Δwall`` in W (``None`` on the first reading or a counter that wrapped)."""
    if before is None or before.energy_uj is None or now.energy_uj is None:
        return None
    seconds = now.at - before.at
    if seconds < 0.01 or now.energy_uj < before.energy_uj:
        return None
    return (now.energy_uj - before.energy_uj) / 1e6 / seconds

"""Which allsmi device an id written by someone else names.

Device plugins, schedulers and job-mapping files name devices in their own
ways: a uuid (``GPU-...``, ``MIG-...``, an AMD or NPU uuid), a PCI bus id in
any domain width (``0000:c1:00.0``, ``00000000:C1:00.0``), an index
(``3``), a MIG instance by GPU index and instance (``7:1``, ``7.1``), a
device node name or path (``nvidia3``, ``rbln0``, ``/dev/tenstorrent/1``), a
board serial, or one of these with a suffix (the NVIDIA plugin's time-slicing
replicas ``GPU-...::2``, the ROCm plugin's ``<bus id>-slice-2``; a partition
``<uuid>_cores_0-3``). :class:`DeviceIndex` is built once per cycle from the snapshot's
devices and answers all of them.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

from allsmi.schema.declarations import CORE_RANGE_DETAILS
from allsmi.schema import DeviceSample

_BUS = r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\Z"
#: Numbers in ids are ASCII digits, at most this many (``²`` or ``٣`` is no index, and Python
#: refuses to convert more than 4300 digits: either raised out of the source, taking every
#: holder it knew with it).
_DIGITS = "[0-9]{1,9}"
_PAIR = rf"^({_DIGITS})[:.]({_DIGITS})\Z"
_NODE = rf"^(?:/dev/(?:[\w.-]+/)*)?([A-Za-z_-]*?)({_DIGITS})\Z"
#: ``Ascend910-3``: a plugin's device name whose model carries digits, a dash, then the index.
_DASHED = rf"^([A-Za-z][A-Za-z0-9]*)-({_DIGITS})\Z"
#: ``card1-0``: the Intel GPU plugin's node name and the number of one share of it.
_SHARED = rf"^([A-Za-z]+)({_DIGITS})-[0-9]+\Z"
#: The ROCm device plugin's time-slicing replica: ``<physical id>-slice-<n>``.
_SLICE = "-slice-"
#: A replica number with more digits than this is out of any range (never converted whole).
_REPLICA_DIGITS = 18
#: NVML writes uuids with these; CUDA (``cudaDeviceProp.uuid``) and some tools without.
_UUID_PREFIXES = ("gpu-", "mig-")
_SERIAL_KEYS = ("serial", "board_serial", "serial_number")


def normalize_bus_id(text: str) -> str | None:
    """``0000:c1:00.0`` for any spelling of a PCI address (domain width and case), else ``None``."""
    match = re.match(_BUS, text.strip())
    if not match:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def whole_number(text: str) -> int | None:
    """``text`` as an index or number: ASCII digits only, at most 9 of them; else ``None``."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def strip_replica(text: str) -> str:
    """The id without a device plugin's replica annotation (:func:`split_replica`)."""
    base, number = split_replica(text)
    return base if number is not None else text.split("::", 1)[0]


def split_replica(text: str) -> tuple[str, int | None]:
    """(the id, its replica number) of an id a device plugin's time-slicing wrote: the NVIDIA
    plugin's ``GPU-...::2``, the ROCm plugin's ``0000:c1:00.0-slice-2``; the number is ``None``
    for an id without one. A number too long to be any replica's is kept out of range."""
    base, sep, number = text.partition("::")
    if not sep:
        base, sep, number = text.rpartition(_SLICE)
    if sep and base and number.isascii() and number.isdigit():
        return base, int(number) if len(number) <= _REPLICA_DIGITS else 10 ** _REPLICA_DIGITS
    return text, None


def _family(dev: DeviceSample) -> set[str]:
    return {dev.backend.lower(), dev.vendor.lower()}


class DeviceIndex:
    """Finds the devices of one snapshot by any of their names."""

    def __init__(self, devices: Sequence[DeviceSample],
                 node_names: Mapping[str, Sequence[str]] | None = None) -> None:
        self.devices = tuple(devices)
        #: Backend -> the device-node name prefixes its declaration gives (``hl`` for ``hl3``).
        self.node_names = {name: tuple(prefixes) for name, prefixes in (node_names or {}).items()}
        self._by_text: dict[str, list[DeviceSample]] = {}
        self._by_bus: dict[str, list[DeviceSample]] = {}
        self._by_serial: dict[str, list[DeviceSample]] = {}
        self._children: dict[str, list[DeviceSample]] = {}
        #: Whole devices by index, and each vendor's backends: an id naming no device costs a
        #: few lookups, never a scan of the devices (a kubelet answer of millions of ids).
        self._by_index: dict[int, list[DeviceSample]] = {}
        self._backends: dict[str, set[str]] = {}
        for dev in self.devices:
            if dev.parent is None and dev.index is not None:
                self._by_index.setdefault(dev.index, []).append(dev)
            for family in _family(dev):
                self._backends.setdefault(family, set()).add(dev.backend.lower())
            for text in {dev.id, dev.uuid}:
                if text:
                    self._by_text.setdefault(text.lower(), []).append(dev)
                    if text[:4].lower() in _UUID_PREFIXES and len(text) > 12:
                        # the same uuid without NVML's "GPU-"/"MIG-" (CUDA, DCGM's fields)
                        self._by_text.setdefault(text[4:].lower(), []).append(dev)
            if dev.bus_id:
                bus = normalize_bus_id(dev.bus_id)
                if bus:
                    self._by_bus.setdefault(bus, []).append(dev)
            for key in _SERIAL_KEYS:
                value = dev.details.get(key) if dev.details else None
                if isinstance(value, str) and value.strip():
                    self._by_serial.setdefault(value.strip().lower(), []).append(dev)
            if dev.parent:
                self._children.setdefault(dev.parent, []).append(dev)
        #: The lengths of the ids a suffixed id may start with, and each id's position (the
        #: first one listed wins where several do).
        self._key_lengths = sorted({len(key) for key in self._by_text if len(key) >= 8})
        self._key_order = {key: n for n, key in enumerate(self._by_text)}
        #: Devices whose partitions each sit at a PCI address of their own (an AMD board's
        #: compute partitions, ``<bus>.<partition>``; MIG instances share their GPU's).
        self._addressed = {parent for parent, children in self._children.items()
                           if len({normalize_bus_id(c.bus_id) for c in children if c.bus_id}
                                  - {None}) > 1}

    # -- the kinds of names ------------------------------------------------
    def by_uuid(self, text: str, vendor: str | None = None,
                suffixed: bool = True) -> list[DeviceSample]:
        """Devices whose id or uuid is ``text`` (case-insensitive), or (``suffixed``) starts a
        suffixed ``text``."""
        found = self._filter(self._by_text.get(text.lower(), ()), vendor)
        if found or not suffixed:
            return found
        # "<uuid>_cores_0-3", "<uuid>/1", "<uuid>-vf0": a known id followed by a separator.
        lowered = text.lower()
        keys = [lowered[:n] for n in self._key_lengths
                if n < len(lowered) and not lowered[n].isalnum() and lowered[:n] in self._by_text]
        if not keys:
            return []
        return self._filter(self._by_text[min(keys, key=self._key_order.__getitem__)], vendor)

    def by_bus_id(self, text: str, vendor: str | None = None) -> list[DeviceSample]:
        """The device at a PCI address: the whole device where its partitions share its
        address (MIG), the partition where each has its own (an AMD board's partition 0 is at
        the board's ``<bus>.0``, and its device plugin names it so)."""
        bus = normalize_bus_id(text)
        if bus is None:
            return []
        devs = self._filter(self._by_bus.get(bus, ()), vendor)
        own = [d for d in devs if d.parent in self._addressed]
        whole = [d for d in devs if d.parent is None]
        return own or whole or devs

    def by_serial(self, text: str, vendor: str | None = None) -> list[DeviceSample]:
        return self._filter(self._by_serial.get(text.strip().lower(), ()), vendor)

    def by_index(self, index: int, vendor: str | None) -> list[DeviceSample]:
        """The whole device with this index (of ``vendor``; without a vendor, only if one matches)."""
        found = [d for d in self._by_index.get(index, ())
                 if vendor is None or vendor in _family(d)]
        # A backend named like another backend's vendor ("intel" GPUs beside Gaudi's vendor "intel"):
        # the backend of that name first.
        exact = [d for d in found if vendor is not None and d.backend.lower() == vendor]
        found = exact or found
        return found if vendor is not None or len(found) == 1 else []

    def partition(self, parent_index: int, instance: int, vendor: str | None,
                  by_instance_id: bool) -> list[DeviceSample]:
        """Partition ``instance`` of the device with index ``parent_index``.

        ``by_instance_id``: ``instance`` is a MIG GPU instance id (dcgm-exporter's ``N.M``)
        rather than the partition's position (the NVIDIA device plugin's ``N:M``).
        """
        for parent in self.by_index(parent_index, vendor or "nvidia"):
            children = self._children.get(parent.id, [])
            keys = ("gpu_instance_id",) if by_instance_id else ("mig_slot",)
            for key in keys:
                hit = [c for c in children if c.details.get(key) == instance]
                if hit:
                    return hit
            if not any(key in c.details for c in children for key in keys):
                if any(c.index is not None for c in children):
                    return [c for c in children if c.index == instance]
                # Neither instance ids nor indices (a simulated GPU): the position.
                return [children[instance]] if 0 <= instance < len(children) else []
        return []

    def by_node_name(self, text: str, vendor: str | None) -> list[DeviceSample]:
        """``nvidia3``, ``amd3``, ``rbln0``, ``/dev/accel/accel2``, ``/dev/tenstorrent/1``, and a
        declared name with digits before a dash (the Ascend device plugin's ``Ascend910-3``) or
        followed by a share number (the Intel GPU plugin's ``card1-0``)."""
        match = re.match(_NODE, text.strip())
        for pattern in (_DASHED, _SHARED):
            named = re.match(pattern, text.strip())
            if named and any(named.group(1).lower() in p for p in self.node_names.values()):
                match = named
                break
        if not match:
            return []
        prefix, number = match.group(1).lower(), int(match.group(2))
        # A vendor (``huawei``, ``aws``, ``intel``) declares no names: its backends do.
        vendors = [vendor, *sorted(self._backends.get(vendor, set()) - {vendor})] \
            if vendor else list(self.node_names)
        for name in vendors:
            if prefix == name or prefix in self.node_names.get(name, ()):
                if prefix == "" and not text.startswith("/dev/"):
                    continue  # a bare number is an index, handled by the caller
                found = self.by_index(number, name)
                if found:
                    return found
        return []

    def by_core(self, number: int, vendor: str | None) -> list[DeviceSample]:
        """The whole device holding global sub-device ``number`` (a NeuronCore the Neuron device
        plugin hands out as ``aws.amazon.com/neuroncore``): its backend reports the range of
        global numbers on each device in ``details`` (:data:`CORE_RANGE_DETAILS`)."""
        first_key, count_key = CORE_RANGE_DETAILS
        found = []
        for dev in self.devices:
            first, count = dev.details.get(first_key), dev.details.get(count_key)
            if dev.parent is None and isinstance(first, int) and isinstance(count, int) \
                    and first <= number < first + count and (vendor is None or vendor in _family(dev)):
                found.append(dev)
        return found

    # -- the dispatcher ----------------------------------------------------
    def match(self, raw: str, vendor: str | None = None, kind: str = "auto") -> list[DeviceSample]:
        """The devices ``raw`` names (``[]`` when none): an id as a device plugin writes it.

        ``vendor`` restricts the search to one backend; ``kind`` (``auto``, ``uuid``,
        ``bus_id``, ``index``, ``serial``, ``core``) says how the id is written when it is known.
        """
        text = strip_replica(raw.strip())
        if not text:
            return []
        if kind == "core":
            number = whole_number(text)
            return self.by_core(number, vendor) if number is not None else []
        if kind in ("auto", "uuid"):
            found = self.by_uuid(text, vendor)
            if found or kind == "uuid":
                return found
        if kind in ("auto", "bus_id"):
            found = self.by_bus_id(text, vendor)
            if found or kind == "bus_id":
                return found
        if kind in ("auto", "index"):
            number = whole_number(text)
            if number is not None:
                return self.by_index(number, vendor)
            pair = re.match(_PAIR, text)
            if pair:
                return self.partition(int(pair.group(1)), int(pair.group(2)), vendor,
                                      by_instance_id=False)
            found = self.by_node_name(text, vendor)
            if found or kind == "index":
                return found
        return self.by_serial(text, vendor)

    def match_hpc_name(self, name: str) -> list[DeviceSample]:
        """The device a job-mapping file is named after.

        ``<uuid>``, ``<bus id>``, ``<backend or vendor><index>`` (``amd3``, ``gaudi0``), or, as
        dcgm-exporter names them, a bare NVIDIA index ``N`` and ``N.M`` for the MIG instance with
        GPU instance id ``M`` on GPU ``N``.
        """
        text = name.strip()
        # Exactly the device's id: a file that merely starts with it is another file (an
        # admin's ``sed -i.bak`` or an editor's ``GPU-...~`` left beside it, with stale jobs).
        found = self.by_uuid(text, suffixed=False) or self.by_bus_id(text)
        if found:
            return found
        number = whole_number(text)
        if number is not None:
            return self.by_index(number, "nvidia")
        pair = re.fullmatch(rf"({_DIGITS})\.({_DIGITS})", text)
        if pair:
            return self.partition(int(pair.group(1)), int(pair.group(2)), "nvidia",
                                  by_instance_id=True)
        named = re.fullmatch(rf"([A-Za-z]+)({_DIGITS})", text)
        if named:
            family, number = named.group(1).lower(), int(named.group(2))
            hit = [d for d in self._by_index.get(number, ()) if family in _family(d)]
            if hit:
                return hit
        return self.by_serial(text)

    @staticmethod
    def _filter(devs: Iterable[DeviceSample], vendor: str | None) -> list[DeviceSample]:
        return [d for d in devs if vendor is None or vendor in _family(d)]

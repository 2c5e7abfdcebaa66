"""One short name per device and partition, derived here once and used by every view.

A whole device is its vendor and index, ``nvidia 3`` (``nvidia N/A`` without an index). A
partition is named after its device: a MIG instance whose ids are reported by its GPU's index,
GPU instance and compute instance, ``nvidia 7/1/0`` (CUDA's order, ``MIG-GPU-<uuid>/1/0``:
nvidia-smi's ``GPU GI CI`` columns); any other partition (AMD compute partitions, NPU core
groups, a MIG instance known only through Prometheus) by its place among its device's
partitions from 0, ``amd 3/1`` (the MIG device index where NVML gives it). The device table's
``#`` column shows the part after the vendor (:func:`~allsmi.dashboard.tables.cells.index_text`),
so that its vendor and ``#`` read as the name the processes panel, the details and the idle
view give.
"""

from __future__ import annotations

import collections
import os.path
from typing import Iterable, Mapping

from rich.cells import cell_len
from rich.text import Text

from allsmi.schema.formatting import NA
from allsmi.schema import DeviceSample, Snapshot

from allsmi.dashboard.state.model import MAX_GONE_DEVICES, DeviceRef, refs_of

#: At most this many devices no longer reported keep their names.
MAX_GONE_NAMES = MAX_GONE_DEVICES
#: MIG ids and slots above this are not believed (NVML's are below 64): a hostile host's
#: ``gpu_instance_id`` of 10**100 must not widen the ``#`` column off the screen.
MAX_INSTANCE_ID = 4096


def _small(value: object) -> bool:
    return type(value) is int and 0 <= value < MAX_INSTANCE_ID  # (not a bool)


def instance_ids(dev: DeviceSample) -> tuple[int, int] | None:
    """A MIG instance's GPU and compute instance ids, where its backend reports both."""
    gi = dev.details.get("gpu_instance_id")
    ci = dev.details.get("compute_instance_id")
    if _small(gi) and _small(ci):
        return gi, ci  # type: ignore[return-value]
    return None


def snapshot_places(snapshot: Snapshot | None) -> list[str]:
    """Each device's place (the name after the vendor: ``3``, ``7/1/0``, ``3/1``), in snapshot
    order (the order of :func:`~allsmi.dashboard.state.model.refs_of`)."""
    if snapshot is None:
        return []
    devices = snapshot.devices
    by_id = {}
    for dev in devices:
        by_id.setdefault(dev.id, dev)  # a duplicate id: its first (as filters and totals do)
    ordinals: dict[int, int] = {}  # a partition's place among its device's, from 0
    count: dict[str, int] = {}
    for dev in devices:
        if dev.parent is not None:
            ordinals[id(dev)] = count.get(dev.parent, 0)
            count[dev.parent] = ordinals[id(dev)] + 1
    places: dict[int, str] = {}

    def place(dev: DeviceSample, depth: int = 0) -> str:
        if dev.parent is None:
            return NA if dev.index is None else str(dev.index)
        parent = by_id.get(dev.parent)
        # (a partition of a partition, or a loop a broken host could send: a few levels only)
        above = NA if parent is None or parent is dev or depth > 3 else \
            places.get(id(parent)) or place(parent, depth + 1)
        ids = instance_ids(dev)
        if ids is not None:
            return f"{above}/{ids[0]}/{ids[1]}"
        slot = dev.details.get("mig_slot")
        if _small(slot):
            return f"{above}/{slot}"
        return f"{above}/{ordinals.get(id(dev), 0)}"

    out = []
    for dev in devices:
        places[id(dev)] = found = place(dev)
        out.append(found)
    return out


class DeviceNames:
    """The place of every device (row key -> ``7/1/0``), computed once per snapshot of each
    host. A device no longer reported keeps its name (the idle view lists the time it sat
    idle for ten minutes after), the :data:`MAX_GONE_NAMES` gone last at most."""

    def __init__(self) -> None:
        self._made: dict[str, Snapshot] = {}  # (the snapshots themselves: an id can be reused)
        self.places: dict[str, str] = {}
        """Row key -> place (the name after the vendor), of the devices reported now and of
        those gone last."""
        self._vendors: dict[str, str] = {}
        self._gone: dict[str, None] = {}  # keys no longer reported, gone longest first

    def update(self, hosts: Iterable[tuple[str, Snapshot | None]]) -> None:
        """Take the places of each host's snapshot (unchanged snapshots cost nothing)."""
        hosts = list(hosts)
        made = {host: snapshot for host, snapshot in hosts if snapshot is not None}
        if made.keys() == self._made.keys() and all(made[h] is self._made[h] for h in made):
            return
        present: set[str] = set()
        for host, snapshot in hosts:
            refs = refs_of(host, snapshot)
            present.update(ref.key for ref in refs)
            if snapshot is None or self._made.get(host) is snapshot:
                continue
            for ref, found in zip(refs, snapshot_places(snapshot)):
                self.places[ref.key] = found
                self._vendors[ref.key] = ref.device.vendor
        self._made = made
        for key in present:
            self._gone.pop(key, None)
        for key in self.places:
            if key not in present:
                self._gone.setdefault(key, None)
        while len(self._gone) > MAX_GONE_NAMES:
            key = next(iter(self._gone))
            del self._gone[key]
            self.places.pop(key, None)
            self._vendors.pop(key, None)

    def name(self, key: str) -> str | None:
        """``nvidia 7/1/0`` for the row key ``key``, or ``None`` if it is not known."""
        place = self.places.get(key)
        return None if place is None else f"{self._vendors[key]} {place}"


def device_name(ref: DeviceRef, places: Mapping[str, str]) -> str:
    """``nvidia 3``, ``nvidia 7/1/0``: the one name of ``ref`` (its place from ``places``)."""
    dev = ref.device
    place = places.get(ref.key)
    if place is None:
        place = NA if dev.parent is not None or dev.index is None else str(dev.index)
    return f"{dev.vendor} {place}"


def host_labels(hosts: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Host key -> the name every view gives the host (``hosts``: (key, the name it reports)):
    its name, followed by its address (``vm (10.0.0.2:9477)``) where another host reports the
    same name (machines cloned from one image, containers that kept a default hostname), so
    that the rows of either are told apart."""
    pairs = list(hosts)
    count = collections.Counter(name for _, name in pairs)
    return {key: name if count[name] < 2 or name == key else f"{name} ({key})" for key, name in pairs}


def fit_apart(texts: Mapping[str, str], width: int) -> dict[str, str]:
    """Each of ``texts`` (key -> text) in at most ``width`` cells, different texts kept
    different: a longer one is cut at its end with an ellipsis, or, where that would read as
    another's cut (``node-0001…`` for ``node-0001-a`` and ``node-0001-b``), keeps its start, an
    ellipsis and the part where it differs (``no…001-a``, ``vm…0.2:9…``)."""
    width = max(1, width)
    cut: dict[str, str] = {}
    same: dict[str, set[str]] = {}
    for key, text in texts.items():
        if cell_len(text) <= width:
            cut[key] = text
            continue
        short = Text(text)
        short.truncate(width, overflow="ellipsis")
        cut[key] = short.plain
        same.setdefault(short.plain, set()).add(text)
    for key, text in texts.items():
        others = [o for o in same.get(cut[key], ()) if o != text]
        # (one cell a character only: a wide character keeps the plain cut)
        if not others or width < 4 or cell_len(text) != len(text):
            continue
        differs = max(len(os.path.commonprefix([text, other])) for other in others)
        head = max(1, min(differs, (width - 1) // 3))
        room = width - 1 - head
        if differs >= len(text) - room:  # it differs in its last cells: they show
            cut[key] = text[:head] + "\u2026" + text[len(text) - room:]
        else:
            start = max(head, differs - (room - 1) // 2)
            cut[key] = text[:head] + "\u2026" + text[start:start + room - 1] + "\u2026"
    return cut


__all__ = ["DeviceNames", "device_name", "fit_apart", "host_labels", "instance_ids",
           "snapshot_places"]

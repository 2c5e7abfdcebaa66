"""What the dashboard shows, computed from snapshots with no UI involved.

Ordering (partitions stay under their parent), filtering, per-device
history, energy since start and per-group / per-vendor / per-host totals
live here as plain functions and small classes, so they are tested without
a terminal and the widgets only turn them into cells.
"""

from __future__ import annotations

import collections
import math
from array import array
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, overload

from allsmi.schema import DeviceSample, Snapshot
from allsmi.usage import DEFAULT_MAX_GAP_SECONDS, UsageIntegrator


#: Sort orders a user can pick, in the order the help screen lists them.
SORT_KEYS: tuple[str, ...] = ("index", "utilization", "memory", "power", "temperature")
#: Where a key's natural direction is "biggest first".
DESCENDING_BY_DEFAULT = frozenset({"utilization", "memory", "power", "temperature"})


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """One device (or partition) as seen on one host, in snapshot order."""

    host: str
    device: DeviceSample
    position: int
    """Place in the host's snapshot: backend order, then the vendor's index."""
    repeat: int = 0
    """How many devices with the same id came before this one in the host's snapshot (a
    broken or hostile host can send duplicates: each is still shown, under its own key)."""

    @property
    def key(self) -> str:
        """A row key unique across hosts (device ids repeat between simulated hosts)."""
        base = device_key(self.host, self.device.id)
        return base if not self.repeat else f"{base}\x1f{self.repeat}"


def device_key(host: str, device_id: str) -> str:
    """The key of ``device_id`` on ``host`` for tables and history."""
    return f"{host}\x1f{device_id}"


def refs_of(host: str, snapshot: Snapshot | None) -> list[DeviceRef]:
    """The devices of one host's snapshot, in snapshot order."""
    if snapshot is None:
        return []
    seen: dict[str, int] = {}
    out = []
    for i, dev in enumerate(snapshot.devices):
        repeat = seen.get(dev.id, 0)
        seen[dev.id] = repeat + 1
        out.append(DeviceRef(host, dev, i, repeat))
    return out


def duplicate_ids(snapshot: Snapshot | None) -> list[str]:
    """Device ids that occur more than once in ``snapshot`` (each shown; the host is warned about)."""
    if snapshot is None:
        return []
    counts = collections.Counter(dev.id for dev in snapshot.devices)
    return [ident for ident, count in counts.items() if count > 1]


def memory_percent(dev: DeviceSample) -> float | None:
    """Memory in use as a percentage of the total, or ``None`` when either is unknown."""
    if dev.memory_used_bytes is None or not dev.memory_total_bytes:
        return None
    return 100.0 * dev.memory_used_bytes / dev.memory_total_bytes


def sort_value(dev: DeviceSample, key: str) -> float | None:
    """The number ``key`` sorts by (memory sorts by share used, fair across card sizes)."""
    if key == "utilization":
        return dev.utilization_percent
    if key == "memory":
        return memory_percent(dev)
    if key == "power":
        return dev.power_watts
    if key == "temperature":
        return dev.temperature_celsius
    return None


def order_devices(refs: Sequence[DeviceRef], key: str = "index",
                  descending: bool | None = None) -> list[DeviceRef]:
    """Devices in display order: sorted by ``key``, each partition right under its parent.

    Unknown values sort last in either direction; ties keep snapshot order.
    A partition whose parent is absent (filtered out or not reported) is
    placed as if it were a top-level device.
    """
    if key not in SORT_KEYS:
        raise ValueError(f"unknown sort key {key!r} (known: {', '.join(SORT_KEYS)})")
    if descending is None:
        descending = key in DESCENDING_BY_DEFAULT
    present = {(r.host, r.device.id) for r in refs}
    children: dict[tuple[str, str], list[DeviceRef]] = collections.defaultdict(list)
    top: list[DeviceRef] = []
    hosts: dict[str, int] = {}
    for ref in refs:
        hosts.setdefault(ref.host, len(hosts))
        parent = ref.device.parent
        if parent is not None and (ref.host, parent) in present:
            children[(ref.host, parent)].append(ref)
        else:
            top.append(ref)

    def natural(ref: DeviceRef) -> tuple[int, int]:
        return hosts[ref.host], ref.position

    def sort_tuple(ref: DeviceRef) -> tuple[int, float, tuple[int, int]]:
        value = sort_value(ref.device, key)
        if value is None:
            return (1, 0.0, natural(ref))
        return (0, -value if descending else value, natural(ref))

    if key == "index":
        ordered = sorted(top, key=natural, reverse=descending)
    else:
        ordered = sorted(top, key=sort_tuple)
    out: list[DeviceRef] = []

    def place(ref: DeviceRef) -> None:
        out.append(ref)
        for child in sorted(children.get((ref.host, ref.device.id), ()), key=natural):
            place(child)

    for ref in ordered:
        place(ref)
    return out


# -- history --------------------------------------------------------------------

#: Metrics kept per device for sparklines, each on a 0..100 scale except power.
HISTORY_METRICS: tuple[str, ...] = ("utilization", "memory", "power", "temperature")
_WIDTH = len(HISTORY_METRICS)
_GAP = math.nan
#: Seconds a device (or host) that is no longer reported keeps its history, energy and idle
#: time, so that a device back after a driver reset or a host back after a restart resumes.
GONE_GRACE_SECONDS = 120.0
#: At most this many devices that are no longer reported are kept within the grace; the ones
#: gone longest are dropped first (a host that churns device ids cannot grow memory).
MAX_GONE_DEVICES = 4096


class _Series:
    """One device's points: a ring of ``points`` rows of the metrics, 8 bytes a value."""

    __slots__ = ("values", "start", "count")

    def __init__(self) -> None:
        self.values = array("d")
        self.start = 0  # ring position of the oldest row once full
        self.count = 0


class SeriesView(Sequence[Optional[float]]):
    """Oldest-first values of one metric of one device; gaps (unknown values) are ``None``."""

    __slots__ = ("_series", "_metric", "_points")

    def __init__(self, series: _Series, metric: int, points: int) -> None:
        self._series, self._metric, self._points = series, metric, points

    def __len__(self) -> int:
        return self._series.count

    @overload
    def __getitem__(self, index: int) -> float | None: ...

    @overload
    def __getitem__(self, index: slice) -> list[float | None]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = self._series.count
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError(index)
        row = (self._series.start + index) % self._points
        value = self._series.values[row * _WIDTH + self._metric]
        return None if value != value else value  # NaN marks a gap


class History:
    """The last ``points`` values of each device's utilization, memory share, power and
    temperature, one point per snapshot; unknown values stay gaps (``None``).

    Stored as packed doubles (32 bytes a point, 4 metrics), so a device costs at most
    ``32 * points`` bytes plus about 300 bytes of bookkeeping."""

    def __init__(self, points: int = 300) -> None:
        self.points = points
        self._series: dict[str, _Series] = {}
        self._last_seen: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._series)

    def add(self, host: str, snapshot: Snapshot) -> bool:
        """Record one snapshot of ``host``; ``False`` when it was already recorded."""
        when = snapshot.unix_time
        if self._last_seen.get(host) == when:
            return False
        self._last_seen[host] = when
        points = self.points
        for ref in refs_of(host, snapshot):
            dev, key = ref.device, ref.key
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series()
            row = (dev.utilization_percent, memory_percent(dev), dev.power_watts, dev.temperature_celsius)
            packed = [_GAP if v is None else v for v in row]
            if series.count < points:
                series.values.extend(packed)
                series.count += 1
            else:
                at = series.start * _WIDTH
                series.values[at:at + _WIDTH] = array("d", packed)
                series.start = (series.start + 1) % points
        return True

    def series(self, key: str, metric: str) -> Sequence[float | None]:
        """Oldest-first values of ``metric`` for the device with table key ``key``."""
        found = self._series.get(key)
        if found is None:
            return ()
        return SeriesView(found, HISTORY_METRICS.index(metric), self.points)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop devices not in ``keep`` (devices that left the cluster)."""
        wanted = set(keep)
        self.drop([k for k in self._series if k not in wanted])

    def drop(self, keys: Iterable[str]) -> None:
        """Drop these devices' history."""
        for key in keys:
            self._series.pop(key, None)

    def forget_hosts(self, hosts: Iterable[str]) -> None:
        """Forget which snapshot of these hosts was recorded last (hosts that left)."""
        for host in hosts:
            self._last_seen.pop(host, None)


class Retention:
    """Which keys (devices or hosts) to drop: those not reported for ``grace`` seconds, and
    beyond ``max_gone`` unreported ones, those unreported longest."""

    def __init__(self, grace: float = GONE_GRACE_SECONDS, max_gone: int = MAX_GONE_DEVICES) -> None:
        self.grace = grace
        self.max_gone = max_gone
        self._gone: dict[str, float] = {}  # key -> when it was first missed, oldest first
        self._present: set[str] = set()

    def __len__(self) -> int:
        return len(self._present) + len(self._gone)

    def update(self, present: Iterable[str], now: float) -> list[str]:
        """Note the keys reported now; the keys to drop, each returned once."""
        current = set(present)
        for key in self._present - current:
            self._gone[key] = now
        for key in current:
            self._gone.pop(key, None)
        self._present = current
        drop = []
        for key, since in list(self._gone.items()):  # insertion order: gone longest first
            if now - since <= self.grace and len(self._gone) <= self.max_gone:
                break
            del self._gone[key]
            drop.append(key)
        return drop


# -- energy since start ---------------------------------------------------------------

class EnergyMeter:
    """Energy each device used since the dashboard started, from the shared integrator.

    One :class:`UsageIntegrator` per host, so device ids that repeat across
    hosts never mix. A device with no usable power or energy reading stays
    unknown (``None``) rather than 0.
    """

    def __init__(self, max_gap_seconds: float = DEFAULT_MAX_GAP_SECONDS) -> None:
        self.max_gap_seconds = max_gap_seconds
        """The longest gap between two samples still integrated: the app passes
        :func:`allsmi.usage.bridged_gap_seconds` of its interval, as the exporter's and the idle
        view's, so that samples a minute apart still count."""
        self._integrators: dict[str, UsageIntegrator] = {}
        self._joules: dict[str, float] = {}
        self._seen: dict[str, float] = {}

    def add(self, host: str, snapshot: Snapshot) -> None:
        """Feed one snapshot of ``host`` (repeats of the same snapshot are ignored)."""
        when = snapshot.unix_time
        if self._seen.get(host) == when:
            return
        self._seen[host] = when
        integrator = self._integrators.get(host)
        if integrator is None:
            integrator = self._integrators[host] = UsageIntegrator(self.max_gap_seconds)
        for inc in integrator.update(snapshot):
            if inc.energy_joules is not None:
                key = device_key(host, inc.device_id)
                self._joules[key] = self._joules.get(key, 0.0) + inc.energy_joules

    def joules(self, key: str) -> float | None:
        """Joules since start for the device with table key ``key``, or ``None``."""
        return self._joules.get(key)

    def drop(self, keys: Iterable[str]) -> None:
        """Drop these devices' energy (devices that left)."""
        for key in keys:
            self._joules.pop(key, None)

    def forget_hosts(self, hosts: Iterable[str]) -> None:
        """Drop these hosts' integrators (hosts that left)."""
        for host in hosts:
            self._integrators.pop(host, None)
            self._seen.pop(host, None)

"""The one data model every layer shares.

Everything here is a frozen dataclass. Units live in field names; a value the
hardware does not report is ``None`` (never 0 or NaN). Rendering ``None`` as
"N/A" text happens only in :func:`allsmi.schema.formatting.na`.

Partitions (MIG instances, AMD compute partitions, NPU core groups, dies of a
multi-die card) are ordinary :class:`DeviceSample` objects whose ``parent`` is
the id of the device that owns them. Board-level quantities (power, energy)
are reported once, on the device that owns them, so that summing over devices
never counts a board twice.

Its parts, beside it: who holds a device (``holders``, re-exported here), frozen records
(``records``), the rules for measured numbers (``numbers``) and for text from tools
(``text``), unit conversions (``units``), each measured field declared once (``fields``),
what a backend declares (``declarations``), copies of samples (``samplecopy``) and text for
people (``formatting``). The schema layer imports nothing above it (import-linter's first
contract).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import field
from typing import Any, Literal, Mapping, Tuple, Union

from allsmi.schema.numbers import (FINITE, MAX_BYTES, MAX_INDEX, bytes_or_none, in_range, index_or_none,
                            share_or_none)
# who holds a device (allsmi.schema.holders), re-exported: every schema name is importable from here
from allsmi.schema.holders import (  # noqa: F401
    ATTRIBUTION_SOURCES, PROCESS_ACTIVITY, PROCESS_ATTRIBUTION,
    WAITING_FIELDS, WAITING_REASONS, WORKLOAD_FIELDS, HolderWaiting, ProcessSample, Workload,
    processes_or_none, processes_valid)
from allsmi.schema.records import Record, record
from allsmi.schema.text import MAX_MESSAGE, MAX_NAME, clean_mapping, clean_required, clean_text

SCHEMA_VERSION = 1

Health = Literal["ok", "degraded", "lost", "unknown"]
HEALTH_STATES: tuple[str, ...] = ("ok", "degraded", "lost", "unknown")

BackendState = Literal["ok", "unavailable", "error", "timeout"]
BACKEND_STATES: tuple[str, ...] = ("ok", "unavailable", "error", "timeout")

DeviceKind = Literal["gpu", "npu"]

#: Values allowed in ``DeviceSample.details``: vendor-specific extras such as
#: ECC totals, P-state or per-core utilization. Kept JSON-friendly.
DetailValue = Union[str, int, float, bool, None, Tuple[Any, ...]]


#: What a device's ``compute_active_percent`` measures (docs/metrics.md#activity): NVIDIA GPM's SM
#: activity, AMD's graphics/compute busy per XCC or partition, an NPU's processing elements or
#: cores busy averaged over them, or (only where nothing better exists) engine time, the same
#: "any kernel running" figure as the headline utilization.
COMPUTE_ACTIVE_SOURCES: tuple[str, ...] = ("sm_active", "gfx_busy", "pe_busy", "core_busy",
                                           "engine_time")
#: The sources under which a backend reports its headline utilization itself, named for what it
#: measures (Furiosa's PE mean, Neuron's and Ascend's core busy, engine time): where they are
#: reported, ``compute_active_percent`` equals ``utilization_percent``.
HEADLINE_SOURCES: frozenset[str] = frozenset({"pe_busy", "core_busy", "engine_time"})
#: DeviceSample's activity figures in percent (0 to 100): out of range or NaN becomes ``None``
#: at the schema boundary.
DEVICE_ACTIVITY = ("compute_active_percent", "sm_occupancy_percent", "tensor_active_percent",
                   "memory_bandwidth_percent")
#: DeviceSample's traffic rates in bytes per second (>= 0): negative or NaN becomes ``None``.
DEVICE_TRAFFIC = ("interconnect_rx_bytes_per_second", "interconnect_tx_bytes_per_second",
                  "pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second")


#: Each measured figure of DeviceSample but the byte counts, with the range it is kept in (both
#: ends included; :data:`~allsmi.schema.numbers.FINITE`: any finite figure). A value outside it, NaN,
#: an infinity, a bool or text becomes ``None`` at the schema boundary (a sensor's -273 °C is
#: not a temperature), and a peer's snapshot or a Prometheus sample is read with the same
#: ranges (:mod:`allsmi.schema.fields` takes them for each field's declaration;
#: :mod:`allsmi.snapshot_parse`), so a node and its peers show the same figures. A backend
#: keeps what its vendor reports beyond them in ``details`` (NVML's fan above its nominal
#: maximum: 100 %, and the raw figure).
DEVICE_RANGES: dict[str, tuple[float, float]] = {
    "utilization_percent": (0.0, 100.0),
    "temperature_celsius": (-40.0, 150.0),
    "power_watts": (0.0, 5000.0),
    "power_limit_watts": (0.0, 5000.0),
    "clock_mhz": (0.0, 10000.0),
    "fan_percent": (0.0, 100.0),
    **{name: (0.0, 100.0) for name in DEVICE_ACTIVITY},
    **{name: (0.0, FINITE) for name in DEVICE_TRAFFIC},
    "energy_joules": (0.0, FINITE),
}
_RANGED = tuple((name, low, high) for name, (low, high) in DEVICE_RANGES.items())
#: Byte counts: a whole number >= 0 (a float one is made whole); anything else is ``None``.
DEVICE_BYTES = ("memory_used_bytes", "memory_total_bytes")


#: DeviceSample's text fields (and the optional ones below): cleaned once, when the sample is
#: built (allsmi.schema.samplecopy cleans a changed one the same way).
DEVICE_TEXT = ("id", "vendor", "kind", "backend", "health")
DEVICE_OPTIONAL_TEXT = ("uuid", "name", "bus_id", "driver_version", "firmware_version",
                        "parent", "resource_group")


@record(slots=True)
class DeviceSample(Record):
    """One device (or partition) at one moment, in the units of its field names.

    ``id`` is stable across restarts: the uuid when the vendor has one, else a
    vendor-qualified bus id or serial. ``resource_group`` and ``labels`` are
    left empty by backends and filled in by the collector from configuration.
    """

    id: str
    vendor: str
    kind: str
    backend: str
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    bus_id: str | None = None
    driver_version: str | None = None
    firmware_version: str | None = None
    parent: str | None = None
    partition_share: float | None = None
    """For a partition (``parent`` set): the fraction of the physical device it holds, in
    (0, 1] (a MIG instance's compute slices over the GPU's, 1/N of an AMD compute partition,
    a die's share). ``None`` for a whole device, or when the backend cannot tell (billing
    then splits the parent equally among the partitions seen)."""
    resource_group: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    health: str = "unknown"
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    clock_mhz: float | None = None
    fan_percent: float | None = None
    compute_active_percent: float | None = None
    """Share of the compute units busy over the last interval, 0 to 100 (NVIDIA GPM SM activity,
    AMD GFX busy...), unlike ``utilization_percent`` (the vendor's headline figure, on NVIDIA the
    share of time any kernel ran). ``compute_active_source`` names which
    (:data:`COMPUTE_ACTIVE_SOURCES`); ``None`` where the hardware does not report it."""
    compute_active_source: str | None = None
    sm_occupancy_percent: float | None = None
    """Resident warps over the maximum (NVIDIA GPM SM occupancy), 0 to 100."""
    tensor_active_percent: float | None = None
    """Share of cycles the tensor (matrix) pipes were active, 0 to 100."""
    memory_bandwidth_percent: float | None = None
    """DRAM/HBM bandwidth in use over the peak, 0 to 100."""
    interconnect_rx_bytes_per_second: float | None = None
    """Device-to-device link traffic received (NVLink, xGMI, Gaudi scale-out ports)."""
    interconnect_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    """Host-link (PCIe) traffic received by the device, in bytes per second."""
    pcie_tx_bytes_per_second: float | None = None
    processes: tuple[ProcessSample, ...] | None = ()
    """Processes using the device: ``()`` when it is known that none do, ``None``
    when the backend cannot list them (so "allocated" time is unknown, not 0)."""
    workloads: tuple[Workload, ...] | None = None
    """Who holds the device (Kubernetes containers, batch jobs), filled in by the collector
    from the attribution sources: ``None`` when no source is active, ``()`` when sources
    are active and nothing holds it. Backends leave it ``None``."""
    waiting: tuple[HolderWaiting, ...] | None = None
    """What each holder of the device was doing over the last interval (computing, or what it
    waited on), filled in by the collector; ``None`` when not classified (no holder known, or
    no interval yet). Backends leave it ``None``."""
    #: Vendor-specific extras (ECC totals, P-state, per-core utilization as
    #: ``core_utilization_percent``...). Not part of the stable columns.
    details: Mapping[str, DetailValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The schema boundary: text from vendor tools and processes is made
        # safe here, once, for every consumer (see allsmi.schema.text).
        _set = object.__setattr__
        # What clean_text would return unchanged (a short printable str) is not set again:
        # every device of every cycle comes through here.
        for name in DEVICE_TEXT:
            value = getattr(self, name)
            if type(value) is not str or len(value) > MAX_NAME or not value.isprintable():
                _set(self, name, clean_required(value))
        for name in DEVICE_OPTIONAL_TEXT:
            value = getattr(self, name)
            if value is not None and (type(value) is not str or len(value) > MAX_NAME
                                      or not value.isprintable()):
                _set(self, name, clean_text(value))
        for name, low, high in _RANGED:
            value = getattr(self, name)
            if value is not None and (type(value) is not float or not low <= value <= high):
                _set(self, name, in_range(value, low, high))
        for name in DEVICE_BYTES:
            value = getattr(self, name)
            if value is not None and (type(value) is not int or not 0 <= value <= MAX_BYTES):
                _set(self, name, bytes_or_none(value))
        value = self.index
        if value is not None and (type(value) is not int or not 0 <= value <= MAX_INDEX):
            _set(self, "index", index_or_none(value))
        value = self.partition_share
        if value is not None and (type(value) is not float or not 0.0 < value <= 1.0):
            _set(self, "partition_share", share_or_none(value))
        if self.health not in HEALTH_STATES:
            _set(self, "health", "unknown")
        value = self.processes
        if value and (type(value) is not tuple or not processes_valid(value)):
            _set(self, "processes", processes_or_none(value))
        if self.compute_active_source is not None \
                and self.compute_active_source not in COMPUTE_ACTIVE_SOURCES:
            _set(self, "compute_active_source", None)
        if self.labels:
            _set(self, "labels", clean_mapping(self.labels))
        if self.details:
            _set(self, "details", clean_mapping(self.details))


@record(slots=True)
class HostSample(Record):
    """The host the devices are attached to."""

    hostname: str
    cpu_utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "hostname", clean_text(self.hostname))


@record(slots=True)
class BackendStatus(Record):
    """How one backend fared in one collection cycle.

    ``status`` is ``ok``, ``unavailable`` (the vendor is absent: no library,
    driver, tool or device; ``message`` says which), ``error`` (present but
    failing; ``message`` says how) or ``timeout`` (did not answer in time).
    """

    name: str
    status: str
    message: str = ""
    duration_seconds: float | None = None

    def __post_init__(self) -> None:
        _set = object.__setattr__
        _set(self, "name", clean_text(self.name))
        _set(self, "status", clean_text(self.status))
        _set(self, "message", clean_text(self.message, MAX_MESSAGE))


@record(slots=True)
class Snapshot(Record):
    """Everything one collection cycle saw. Immutable: consumers share it freely."""

    timestamp: _dt.datetime
    host: HostSample
    devices: tuple[DeviceSample, ...] = ()
    backends: tuple[BackendStatus, ...] = ()
    schema_version: int = SCHEMA_VERSION
    monotonic: float | None = field(default=None, compare=False, repr=False)
    """Seconds on a clock that never steps (``time.monotonic`` or the simulation's clock), when
    the snapshot was taken here; ``None`` for one parsed from JSON. Durations between snapshots
    are measured on it; ``timestamp`` only places them in time. Not part of the JSON."""
    process_details: bool = field(default=True, compare=False)
    """Whether processes carry their ``user`` and ``command``. ``False`` for a snapshot from an
    exporter that does not publish them (``allsmi serve`` without ``--processes``): pids and
    memory are there, users and command lines are ``None`` because they were withheld, not
    unknown. JSON key ``process_details``."""
    attribution: tuple[BackendStatus, ...] = ()
    """How each attribution source fared in this cycle (one entry per source, shaped like
    ``backends``); empty when no source is configured. JSON key ``attribution``."""
    holders_unknown: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """Ids of the devices whose holders are unknown in this cycle: an attribution source failed
    or timed out (and its last answer is too old to carry), and nothing else says who holds
    them. Their allocated time is unknown, never "not held". Not part of the JSON."""
    claim_conflicts: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """Ids of the devices claimed in this cycle by holders of attribution sources that say
    nothing of each other (a pod from the kubelet and a job of the job-mapping directory): each
    is billed a part, and the sources' statuses name the claimants. Not part of the JSON."""
    attribution_bad_shares: tuple[tuple[str, str, int], ...] = field(default=(), compare=False,
                                                                     repr=False)
    """(source, reason, count) of the declared shares each attribution source that reads them
    could not bill as written in this cycle: ``not_a_share`` (``NaN``, ``2``, ``-1``: ignored,
    the job kept), ``above_device`` (a device's shares adding up to more than 1: scaled down).
    Not part of the JSON."""

    @property
    def unix_time(self) -> float:
        """The timestamp as seconds since the epoch."""
        return self.timestamp.timestamp()

    def device(self, device_id: str) -> DeviceSample | None:
        """The device with this id, or ``None``."""
        for dev in self.devices:
            if dev.id == device_id:
                return dev
        return None


def utc_now() -> _dt.datetime:
    """The current time as an aware UTC datetime."""
    return _dt.datetime.now(_dt.timezone.utc)


def __getattr__(name: str) -> Any:
    """``derive`` and ``fill``, the schema's copy operations, live in :mod:`allsmi.schema.samplecopy`
    (which needs this module's classes): ``from allsmi.schema import derive`` finds them there."""
    if name in ("derive", "fill"):
        from allsmi.schema import samplecopy
        return getattr(samplecopy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

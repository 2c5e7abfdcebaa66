"""The one data model every layer shares.

Everything here is a frozen dataclass. Units live in field names; a value the
hardware does not report is ``None`` (never 0 or NaN). Rendering ``None`` as
"N/A" text happens only in :func:`allsmi.formatting.na`.

Partitions (MIG instances, AMD compute partitions, NPU core groups, dies of a
multi-die card) are ordinary :class:`DeviceSample` objects whose ``parent`` is
the id of the device that owns them. Board-level quantities (power, energy)
are reported once, on the device that owns them, so that summing over devices
never counts a board twice.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import field
from typing import Any, Literal, Mapping, Tuple, Union

from allsmi.numbers import bytes_or_none, finite_or_none, percent_or_none, rate_or_none
from allsmi.records import Record, record
from allsmi.text import MAX_COMMAND, MAX_MESSAGE, MAX_NAME, clean_detail, clean_optional, clean_text

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
#: What a holder of an allocated device was doing in one interval (docs/activity.md):
#: ``computing`` at or above the idle threshold; below it, ``input`` (blocked on I/O), ``host``
#: (CPU-bound or throttled), ``communication`` (interconnect or network busy), ``nothing`` (no
#: process of the holder on the device), or ``unknown`` (no evidence either way).
WAITING_REASONS: tuple[str, ...] = ("computing", "input", "host", "communication", "nothing",
                                    "unknown")
#: DeviceSample's activity figures in percent (0 to 100): out of range or NaN becomes ``None``
#: at the schema boundary.
DEVICE_ACTIVITY = ("compute_active_percent", "sm_occupancy_percent", "tensor_active_percent",
                   "memory_bandwidth_percent")
#: DeviceSample's traffic rates in bytes per second (>= 0): negative or NaN becomes ``None``.
DEVICE_TRAFFIC = ("interconnect_rx_bytes_per_second", "interconnect_tx_bytes_per_second",
                  "pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second")


#: DeviceSample's other measured figures that are never negative (a percentage a vendor may put
#: above 100, as NVML's fan speed; watts, joules, MHz): negative, NaN or infinite becomes
#: ``None`` at the schema boundary, as does a temperature that is not finite.
DEVICE_NONNEGATIVE = ("utilization_percent", "power_watts", "power_limit_watts", "energy_joules",
                      "clock_mhz", "fan_percent")
#: Byte counts: a whole number >= 0 (a float one is made whole); anything else is ``None``.
DEVICE_BYTES = ("memory_used_bytes", "memory_total_bytes")


#: The fields of a workload, in the order of the public JSON object.
WORKLOAD_FIELDS = ("source", "namespace", "pod", "container", "job_id", "user")
#: The attribution sources, as named in ``workloads[].source`` and the snapshot's ``attribution``.
ATTRIBUTION_SOURCES: tuple[str, ...] = ("kubernetes", "hpc-job", "cgroup", "simulated")


@record(slots=True)
class Workload(Record):
    """One holder of a device: a Kubernetes container or a batch job (see allsmi.attribution).

    ``source`` is the attribution source that saw it (``kubernetes``, ``hpc-job``, ``cgroup``
    or ``simulated``); fields the source does not know are ``None``. ``share`` is the part of
    the device the source says the workload was given, in (0, 1]: a Kubernetes time-slicing
    replica is ``1/replicas``, a job-mapping file may declare one; ``None`` when nothing is
    declared (the device is then split equally among its holders). A value outside (0, 1] or
    NaN is dropped to ``None`` here.
    """

    source: str
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    job_id: str | None = None
    user: str | None = None
    share: float | None = None

    def __post_init__(self) -> None:
        _set = object.__setattr__
        _set(self, "source", clean_text(self.source))
        for name in WORKLOAD_FIELDS[1:]:
            value = getattr(self, name)
            if value is not None and not str(value).strip():
                value = None  # an empty name is an unknown one, never a label value ""
            _set(self, name, clean_optional(None if value is None else str(value).strip()))
        share = self.share
        if share is not None:
            ok = not isinstance(share, bool) and isinstance(share, (int, float)) \
                and 0.0 < share <= 1.0
            _set(self, "share", float(share) if ok else None)

    def key(self) -> tuple[str, ...]:
        """What makes two workloads the same holder, whichever source saw them."""
        if self.pod is not None:
            return ("pod", self.namespace or "", self.pod, self.container or "")
        if self.job_id is not None:
            return ("job", self.job_id)
        return ("other", self.source, self.user or "")

    def to_dict(self) -> dict[str, str | float | None]:
        """The public JSON object ``{"source", "namespace", "pod", "container", "job_id", "user",
        "share"}``."""
        out: dict[str, str | float | None] = {name: getattr(self, name) for name in WORKLOAD_FIELDS}
        out["share"] = self.share
        return out


#: ProcessSample's attribution fields (from the process's cgroup; ``None`` when unknown).
PROCESS_ATTRIBUTION = ("job_id", "pod_uid", "container_id")
#: ProcessSample's activity fields: the process's share of the device's engines over the last
#: sampling interval, in percent (0 to 100), as the vendor reports it; ``None`` where it does not.
#: Declared once here; JSON, parsing, the dashboard and the splits derive from this tuple
#: (:data:`allsmi.fields.PROCESS_MEASUREMENTS` gives each its help text).
PROCESS_ACTIVITY = ("utilization_percent", "memory_utilization_percent",
                    "encoder_utilization_percent", "decoder_utilization_percent")


@record(slots=True)
class ProcessSample(Record):
    """One process using an accelerator.

    ``job_id``, ``pod_uid`` and ``container_id`` come from the process's cgroup (the
    collector's attribution step); ``None`` when unknown. The ``*_percent`` fields
    (:data:`PROCESS_ACTIVITY`) are the process's share of the device's compute (SM, GFX),
    memory-controller, encoder and decoder time over the last sampling interval, 0 to 100;
    ``None`` where the vendor does not report it (a value outside 0 to 100 or NaN is dropped
    to ``None`` here, at the schema boundary).
    """

    pid: int
    user: str | None = None
    command: str | None = None
    memory_bytes: int | None = None
    job_id: str | None = None
    pod_uid: str | None = None
    container_id: str | None = None
    utilization_percent: float | None = None
    memory_utilization_percent: float | None = None
    encoder_utilization_percent: float | None = None
    decoder_utilization_percent: float | None = None

    def __post_init__(self) -> None:
        _set = object.__setattr__
        for name in PROCESS_ACTIVITY:
            value = getattr(self, name)
            if value is not None:
                ok = not isinstance(value, bool) and isinstance(value, (int, float)) \
                    and 0.0 <= value <= 100.0
                _set(self, name, float(value) if ok else None)
        if self.memory_bytes is not None and (type(self.memory_bytes) is not int
                                              or self.memory_bytes < 0):
            _set(self, "memory_bytes", bytes_or_none(self.memory_bytes))
        if self.user is not None:
            _set(self, "user", clean_text(self.user))
        if self.command is not None:
            _set(self, "command", clean_text(self.command, MAX_COMMAND))
        for name in PROCESS_ATTRIBUTION:
            if getattr(self, name) is not None:
                _set(self, name, clean_optional(getattr(self, name)))


#: The fields of a holder's waiting classification, in the order of the public JSON object.
WAITING_FIELDS = ("user", "namespace", "pod", "job_id", "reason", "evidence")


@record(slots=True)
class HolderWaiting(Record):
    """What one holder of a device was doing over the last interval (``DeviceSample.waiting``).

    The holder is named as billing names it (``user``, ``namespace``/``pod``, ``job_id``; unknown
    parts ``None``). ``reason`` is one of :data:`WAITING_REASONS` (anything else becomes
    ``unknown``); ``evidence`` is a short human sentence of what decided it, e.g.
    ``"input: 3 of 4 processes in I/O wait, 480 MB/s read"``.
    """

    reason: str
    evidence: str = ""
    user: str | None = None
    namespace: str | None = None
    pod: str | None = None
    job_id: str | None = None

    def __post_init__(self) -> None:
        _set = object.__setattr__
        if self.reason not in WAITING_REASONS:
            _set(self, "reason", "unknown")
        _set(self, "evidence", clean_text(self.evidence or "", MAX_MESSAGE))
        for name in ("user", "namespace", "pod", "job_id"):
            value = getattr(self, name)
            if value is not None:
                _set(self, name, clean_optional(str(value)) if str(value).strip() else None)

    def to_dict(self) -> dict[str, str | None]:
        """The public JSON object (:data:`WAITING_FIELDS`)."""
        return {name: getattr(self, name) for name in WAITING_FIELDS}


#: DeviceSample's text fields (and the optional ones below): cleaned once, when the sample is
#: built (allsmi.samplecopy cleans a changed one the same way).
DEVICE_TEXT = ("id", "vendor", "kind", "backend", "health")
_INF = float("inf")
DEVICE_OPTIONAL_TEXT = ("uuid", "name", "bus_id", "driver_version", "firmware_version",
                        "parent", "resource_group")


#: Keys and tuple values :func:`clean_mapping` found clean (cleaning returns them unchanged):
#: every device of every cycle has the same few detail keys, and the NVIDIA backend's
#: clock-event reason names come as the same few tuples. A tuple is known by its value (an
#: equal tuple cleans to an equal one: cleaning changes a string, a non-finite float or a
#: list, each unequal to what it becomes). Each set is emptied when it reaches its bound.
CLEAN_KEYS: set[str] = set()
CLEAN_TUPLES: set[tuple[Any, ...]] = set()
CLEAN_BOUND = 1024


def clean_mapping(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """``mapping`` with its keys and values cleaned (strings, inside tuples too; no NaN)."""
    out = {}
    for k, v in mapping.items():
        # what cleaning returns unchanged (a short printable key; an int, a bool, a finite
        # float, a short printable string) is kept as is: every device of every cycle has
        # details, nearly all of them numbers under constant keys
        if k not in CLEAN_KEYS:
            if type(k) is not str or len(k) > MAX_NAME or not k.isprintable():
                k = clean_text(k)
            elif len(CLEAN_KEYS) < CLEAN_BOUND:
                CLEAN_KEYS.add(k)
            else:
                CLEAN_KEYS.clear()
        kind = type(v)
        if not (kind is int or kind is bool or v is None
                or (kind is float and -_INF < v < _INF)
                or (kind is str and len(v) <= MAX_NAME and v.isprintable())):
            if kind is tuple:
                v = _clean_tuple(v)
            else:
                v = clean_detail(v)
        out[k] = v
    return out


def _clean_tuple(value: tuple[Any, ...]) -> tuple[Any, ...]:
    try:
        if value in CLEAN_TUPLES:
            return value
    except TypeError:  # an unhashable member (a list): cleaned below, never remembered
        return clean_detail(value)
    cleaned = clean_detail(value)
    if cleaned == value:
        if len(CLEAN_TUPLES) >= CLEAN_BOUND:
            CLEAN_TUPLES.clear()
        CLEAN_TUPLES.add(value)
    return cleaned


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
        # safe here, once, for every consumer (see allsmi.text).
        _set = object.__setattr__
        # What clean_text would return unchanged (a short printable str) is not set again:
        # every device of every cycle comes through here.
        for name in DEVICE_TEXT:
            value = getattr(self, name)
            if type(value) is not str or len(value) > MAX_NAME or not value.isprintable():
                _set(self, name, clean_text(value))
        for name in DEVICE_OPTIONAL_TEXT:
            value = getattr(self, name)
            if value is not None and (type(value) is not str or len(value) > MAX_NAME
                                      or not value.isprintable()):
                _set(self, name, clean_text(value))
        for name in DEVICE_ACTIVITY:
            value = getattr(self, name)
            if value is not None and (type(value) is not float or not 0.0 <= value <= 100.0):
                _set(self, name, percent_or_none(value))
        for name in DEVICE_TRAFFIC + DEVICE_NONNEGATIVE:
            value = getattr(self, name)
            if value is not None and (type(value) is not float or not 0.0 <= value < _INF):
                _set(self, name, rate_or_none(value))
        for name in DEVICE_BYTES:
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                _set(self, name, bytes_or_none(value))
        value = self.temperature_celsius
        if value is not None and (type(value) is not float or not -_INF < value < _INF):
            _set(self, "temperature_celsius", finite_or_none(value))
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
    """``derive`` and ``fill``, the schema's copy operations, live in :mod:`allsmi.samplecopy`
    (which needs this module's classes): ``from allsmi.schema import derive`` finds them there."""
    if name in ("derive", "fill"):
        from allsmi import samplecopy
        return getattr(samplecopy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

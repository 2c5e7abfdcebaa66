"""Who holds a device, as the schema records it: the workloads attribution names (a Kubernetes
container, a batch job), the processes a vendor lists on a device, and what each holder was
doing in the last interval. Part of the schema layer (:mod:`allsmi.schema` re-exports every name
here); the same rules hold: units in field names, unknown is ``None``, text cleaned once, here.
"""

from __future__ import annotations

from allsmi.schema.numbers import MAX_BYTES, bytes_or_none
from allsmi.schema.records import Record, record
from allsmi.schema.text import MAX_COMMAND, MAX_MESSAGE, clean_optional, clean_text

#: What a holder of an allocated device was doing in one interval (docs/activity.md):
#: ``computing`` at or above the idle threshold; below it, ``input`` (blocked on I/O), ``host``
#: (CPU-bound or throttled), ``communication`` (interconnect or network busy), ``nothing`` (no
#: process of the holder on the device), or ``unknown`` (no evidence either way).
WAITING_REASONS: tuple[str, ...] = ("computing", "input", "host", "communication", "nothing",
                                    "unknown")
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
#: (:data:`allsmi.schema.fields.PROCESS_MEASUREMENTS` gives each its help text).
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
                                              or not 0 <= self.memory_bytes <= MAX_BYTES):
            _set(self, "memory_bytes", bytes_or_none(self.memory_bytes))
        if self.user is not None:
            _set(self, "user", clean_text(self.user))
        if self.command is not None:
            _set(self, "command", clean_text(self.command, MAX_COMMAND))
        for name in PROCESS_ATTRIBUTION:
            if getattr(self, name) is not None:
                _set(self, name, clean_optional(getattr(self, name)))


def _listed(proc: object) -> bool:
    pid = getattr(proc, "pid", None)
    return type(proc) is ProcessSample and type(pid) is int and pid > 0


def processes_valid(processes: tuple[object, ...]) -> bool:
    """Whether each of ``processes`` is a :class:`ProcessSample` with a pid above 0 (as every
    built-in backend lists them: the vendors' pid 0 is no process)."""
    return all(map(_listed, processes))


def processes_or_none(value: object) -> "tuple[ProcessSample, ...] | None":
    """A device's ``processes`` as the schema keeps them: a tuple of :class:`ProcessSample`
    with pids above 0, the others left out (a plug-in's list, a row without a pid); ``None``
    (unknown) for what is not a collection of them at all."""
    if value is None or isinstance(value, (str, bytes, dict)):
        return None
    try:
        items = tuple(value)  # type: ignore[call-overload]
    except TypeError:
        return None
    return tuple(p for p in items if _listed(p))  # type: ignore[misc]


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

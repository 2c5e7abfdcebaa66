"""What the attribution sources say: workloads on devices, and who each process belongs to.

Everything here is a frozen dataclass whose text is cleaned once, when it is
built (:mod:`allsmi.schema.text`), like the schema's: names come from a kubelet, a
job-mapping file or a cgroup path, and reach JSON, Prometheus labels, the
ledger and the terminal from here.
"""

from __future__ import annotations

from dataclasses import field
from typing import Mapping

from allsmi.schema.records import Record, record
from allsmi.schema import (ATTRIBUTION_SOURCES, WORKLOAD_FIELDS, BackendStatus,  # noqa: F401
                           Workload)
from allsmi.schema.text import clean_optional

#: The source names, as they appear in ``workloads[].source`` and the snapshot's ``attribution``.
SOURCE_NAMES = ATTRIBUTION_SOURCES

#: Why a declared share was not billed as written (``SourceResult.bad_shares``, the ``reason``
#: label of ``allsmi_attribution_bad_shares_total``).
BAD_SHARE_REASONS = ("not_a_share", "above_device")

# ``Workload`` (and ``WORKLOAD_FIELDS``) live in the schema, since snapshots carry them; they
# are re-exported here, where the sources build them.


@record(slots=True)
class ProcessAttribution(Record):
    """What a process's cgroup says about it (``None`` where it says nothing)."""

    job_id: str | None = None
    pod_uid: str | None = None
    container_id: str | None = None

    def __post_init__(self) -> None:
        _set = object.__setattr__
        for name in ("job_id", "pod_uid", "container_id"):
            _set(self, name, clean_optional(getattr(self, name)))

    def __bool__(self) -> bool:
        return any((self.job_id, self.pod_uid, self.container_id))

    def to_dict(self) -> dict[str, str | None]:
        return {"job_id": self.job_id, "pod_uid": self.pod_uid, "container_id": self.container_id}


@record
class SourceResult(Record):
    """One source's answer for one cycle."""

    workloads: Mapping[str, tuple[Workload, ...]] = field(default_factory=dict)
    """Device id -> the workloads this source sees on it (devices it says nothing about are absent)."""
    processes: Mapping[int, ProcessAttribution] = field(default_factory=dict)
    """Pid -> what the source knows about that process."""
    message: str = ""
    """Warnings (ids that match no device, unreadable files); empty when all went well."""
    bad_shares: Mapping[str, int] | None = None
    """Declared shares this cycle could not bill as written, by :data:`BAD_SHARE_REASONS`:
    ``not_a_share`` (``NaN``, ``2``, ``-1``: ignored, the job kept) and ``above_device`` (a
    device whose declared shares add up to more than 1: scaled down to it); ``None`` for a
    source that reads no declared shares."""


class SourceUnavailable(Exception):
    """The source is absent here (no socket, no directory): status ``unavailable``."""


class SourceError(Exception):
    """The source is present but failing or answering garbage: status ``error``."""


class SourceTimeout(SourceError):
    """The source's own call timed out: status ``timeout``."""


@record
class Attribution(Record):
    """Everything the attribution sources said in one cycle, merged.

    ``workloads`` is ``None`` when no source is active (none answered ``ok``), else it has an
    entry for every device asked about: a tuple of workloads, empty when nothing holds it.
    ``processes`` maps a pid to its cgroup facts. ``statuses`` has one entry per source, shaped
    like a backend's.
    """

    workloads: Mapping[str, tuple[Workload, ...]] | None
    processes: Mapping[int, ProcessAttribution]
    statuses: tuple[BackendStatus, ...]
    unknown: frozenset[str] = frozenset()
    """Devices whose holders are unknown this cycle: a source failed or timed out, its last
    answer is too old to carry (:data:`~allsmi.attribution.runner.CARRY_SECONDS`), and no
    other source names a holder. Not "nothing holds it"."""
    conflicts: tuple[str, ...] = ()
    """Devices claimed this cycle by holders of different sources that say nothing of each
    other (a pod, and a job of the job-mapping directory): each is billed a part, and the
    sources' status messages name the device and the claimants."""
    bad_shares: tuple[tuple[str, str, int], ...] = ()
    """(source, reason, count) of :attr:`SourceResult.bad_shares` of each source that reads
    declared shares and answered this cycle (a carried answer is not read again: not
    counted)."""

    @property
    def active(self) -> bool:
        """Whether at least one source answered this cycle."""
        return self.workloads is not None

    def device_workloads(self, device_id: str) -> tuple[Workload, ...] | None:
        """The workloads on ``device_id``: ``None`` when no source is active, ``()`` when none."""
        if self.workloads is None:
            return None
        return self.workloads.get(device_id, ())

    def process(self, pid: int) -> ProcessAttribution:
        """What is known about process ``pid`` (all ``None`` when nothing is)."""
        return self.processes.get(pid) or ProcessAttribution()


#: What :meth:`Attributor.resolve` returns when no source is configured at all.
NO_ATTRIBUTION = Attribution(None, {}, ())

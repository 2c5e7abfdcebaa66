"""Fair shares of a shared device: who is given its allocated time, and who used it.

Every interval of a held device is split among its holders twice (docs/accounting.md):

* **allocated** time (and idle-allocated time, and the energy of idle time) by *declared
  share*; the method is named per device and cycle:

  - ``partition``: the device is a partition (a MIG instance, an AMD compute partition); it
    is billed at its share of the physical device (:func:`allsmi.usage.billing_shares`), and
    its holders split it equally;
  - ``declared``: a source declared a share for a workload (a Kubernetes time-slicing
    replica ``<uuid>::<n>`` is ``1/replicas`` of the device; a job-mapping file may declare
    one): each such workload has its share, workloads without one split what is left
    equally, and what nobody was given stays unallocated;
  - ``exclusive``: one holder has it all;
  - ``equal``: an equal part per holder (a workload, or without workloads a process).

* **used** (busy) time and the energy of busy time by *measured activity*:

  - ``activity``: every process on the device reports its share of the device's compute
    engines (``ProcessSample.utilization_percent``) and belongs to a holder: each holder's
    part is its processes' activity over the total;
  - ``memory``: otherwise, when every process reports the memory it holds: by memory;
  - ``equal``: otherwise an equal part per holder.

Both weight sets add up to at most 1 (exactly 1 with holders, except for what a ``declared``
split leaves unallocated), so the holders' figures of one device interval never add up to
more than the device's; what no holder was given stays unattributed. Holders that are nobody
in particular (no user, pod or job known) are left out, so their part is unattributed too.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from allsmi.schema import DeviceSample, ProcessSample, Workload


#: ``tuple.__new__``: a named tuple made without its own ``__new__`` (a Python function), where
#: a held device's claims and splits are made every cycle (of a replayed month too).
_new = tuple.__new__


class Holder(NamedTuple):
    """Who held a device: a user, a Kubernetes pod (namespace, pod) and/or a batch job.

    ``None`` is unknown; a holder with every field unknown is nobody (not attributed)."""

    user: str | None = None
    namespace: str | None = None
    pod: str | None = None
    job: str | None = None


Weights = tuple[tuple[Holder, float], ...]

#: The allocation methods and the usage methods, in the order of precedence in the docs.
ALLOCATION_METHODS = ("exclusive", "partition", "declared", "equal")
USAGE_METHODS = ("activity", "memory", "equal")
#: The method of a row whose time was split by more than one method.
MIXED = "mixed"


class Split(NamedTuple):
    """One device's holders, by the two rules (see the module docstring)."""

    allocated: Weights
    """Each holder's part of the allocated time; adds up to at most 1."""
    allocation_method: str
    used: Weights
    """Each holder's part of the busy time and of the energy of busy time; at most 1."""
    usage_method: str


NOBODY = Split((), "", (), "")


class ClaimUnit(NamedTuple):
    """One claimant of the device (a workload, or a process without workloads) and the
    holders it stands for, each with its processes (that measure its activity)."""

    declared: float | None
    members: tuple[tuple[Holder, tuple[ProcessSample, ...]], ...]


#: Per device id, its last claims and what they were made of (its processes and workloads,
#: the very objects): the waiting step and the ledger's split ask for the same device's
#: claims in the same cycle (see :func:`claim_units`).
_CLAIMS: dict[str, tuple[object, object, list[ClaimUnit]]] = {}
claims_made = 0
"""Devices whose claims :func:`claim_units` made (the others were the same as last made: what
a test counts)."""


def claim_units(dev: DeviceSample) -> list[ClaimUnit]:
    """The claims on ``dev``: one unit a workload (with the processes it runs), or one a process
    where no workload is declared. Made once for the same processes and workloads (the very
    objects) of a device: the list returned is shared, and read only."""
    last = _CLAIMS.get(dev.id)
    if last is not None and last[0] is dev.processes and last[1] is dev.workloads:
        return last[2]
    global claims_made
    claims_made += 1
    units = _claims(dev)
    if len(_CLAIMS) >= 4096:  # (devices gone: a bound, not a cache of every device ever seen)
        _CLAIMS.clear()
    _CLAIMS[dev.id] = (dev.processes, dev.workloads, units)
    return units


def _claims(dev: DeviceSample) -> list[ClaimUnit]:
    """:func:`claim_units`, made."""
    procs = dev.processes or ()
    works = dev.workloads or ()
    # (the named tuples made with _new: a held device's claims are made again whenever its
    # processes move)
    if not works:
        return [_new(ClaimUnit, (None, ((_new(Holder, (p.user, None, None, p.job_id)), (p,)),)))
                for p in procs]
    units = []
    for work in works:
        mine = tuple(p for p in procs if len(works) == 1 or (work.job_id is not None
                                                             and p.job_id == work.job_id))
        units.append(_new(ClaimUnit, (work.share, _members(work, mine))))
    return units


def _members(work: Workload, mine: tuple[ProcessSample, ...]) -> tuple[
        tuple[Holder, tuple[ProcessSample, ...]], ...]:
    if work.user is not None or not mine:
        return ((_new(Holder, (work.user, work.namespace, work.pod, work.job_id)), mine),)
    # The source does not know the user: the users of the workload's processes, one each.
    return tuple((_new(Holder, (p.user, work.namespace, work.pod, work.job_id)), (p,))
                 for p in mine)


def _allocation(dev: DeviceSample, units: Sequence[ClaimUnit]) -> tuple[list[float], str]:
    """Each unit's part of the allocated time, and the method."""
    count = len(units)
    if dev.parent:
        return [1.0 / count] * count, "partition"
    declared = [u.declared for u in units]
    if any(d is not None for d in declared):
        given = sum(d for d in declared if d is not None)
        scale = 1.0 / given if given > 1.0 else 1.0
        rest = max(0.0, 1.0 - given * scale)
        undeclared = sum(1 for d in declared if d is None)
        return [d * scale if d is not None else rest / undeclared for d in declared], "declared"
    if count == 1:
        return [1.0], "exclusive"
    return [1.0 / count] * count, "equal"


def _measured(units: Sequence[ClaimUnit], procs: tuple[ProcessSample, ...],
              field: str) -> list[list[float]] | None:
    """Each unit's members' figures of ``field`` (summed over their processes), or ``None``
    when a process does not report it, belongs to no holder, or nothing was measured."""
    if not procs or any(getattr(p, field) is None for p in procs):
        return None
    assigned = {id(p) for u in units for _, mine in u.members for p in mine}
    if any(id(p) not in assigned for p in procs):
        return None  # e.g. several pods whose processes cannot be told apart
    figures = [[float(sum(getattr(p, field) for p in mine)) for _, mine in u.members]
               for u in units]
    return figures if sum(map(sum, figures)) > 0 else None


def _weights(units: Sequence[ClaimUnit], parts: Sequence[Sequence[float]]) -> Weights:
    out: dict[Holder, float] = {}
    for unit, unit_parts in zip(units, parts):
        for (holder, _), weight in zip(unit.members, unit_parts):
            if any(holder):
                out[holder] = out.get(holder, 0.0) + weight
    if len(out) < 2:
        return tuple(out.items())
    return tuple(sorted(out.items(), key=lambda kv: tuple(v or "" for v in kv[0])))


def _method_of(procs: Sequence[ProcessSample]) -> str:
    """The usage method of a device with one claimant: what :func:`split` would name."""
    if procs and all(p.utilization_percent is not None for p in procs) \
            and sum(p.utilization_percent for p in procs) > 0:  # type: ignore[misc]
        return "activity"
    if procs and all(p.memory_bytes is not None for p in procs) \
            and sum(p.memory_bytes for p in procs) > 0:  # type: ignore[misc]
        return "memory"
    return "equal"


def split(dev: DeviceSample) -> Split:
    """Who holds ``dev`` now, by declared share and by measured activity (module docstring).

    ``NOBODY`` when neither processes nor workloads hold it."""
    if not dev.workloads:
        return _processes_only(dev) if dev.processes else NOBODY
    units = claim_units(dev)
    if not units:
        return NOBODY
    if len(units) == 1 and len(units[0].members) == 1:
        # The common case (one process, or one workload): one holder has all of it.
        unit = units[0]
        holder, mine = unit.members[0]
        procs = dev.processes or ()
        weight = 1.0 if dev.parent or unit.declared is None else unit.declared
        method = "partition" if dev.parent else "exclusive" if unit.declared is None \
            else "declared"
        usage = _method_of(procs) if len(mine) == len(procs) else "equal"
        if not any(holder):
            return _new(Split, ((), method, (), usage))
        return _new(Split, (((holder, weight),), method, ((holder, 1.0),), usage))
    return general_split(dev, units)


def _processes_only(dev: DeviceSample) -> Split:
    """:func:`split` of a device held by processes only (no workloads), written out: the
    ledger and the exporter call it for every held device every cycle."""
    procs = dev.processes or ()
    count = len(procs)
    method = "partition" if dev.parent else "exclusive" if count == 1 else "equal"
    utils = [p.utilization_percent for p in procs]
    figures: list[float] | list[int] | None = None
    usage = "equal"
    if None not in utils and sum(utils) > 0:  # type: ignore[arg-type]
        figures, usage = utils, "activity"  # type: ignore[assignment]
    else:
        mems = [p.memory_bytes for p in procs]
        if None not in mems and sum(mems) > 0:  # type: ignore[arg-type]
            figures, usage = mems, "memory"  # type: ignore[assignment]
    total = sum(figures) if figures is not None else 0  # type: ignore[arg-type]
    alloc: dict[Holder, float] = {}
    used: dict[Holder, float] = {}
    each = 1.0 / count
    for i, p in enumerate(procs):
        holder = _new(Holder, (p.user, None, None, p.job_id))
        if holder.user is None and holder.job is None:
            continue  # nobody in particular: not attributed
        alloc[holder] = alloc.get(holder, 0.0) + each
        part = figures[i] / total if figures is not None else each  # type: ignore[index]
        used[holder] = used.get(holder, 0.0) + part
    if len(alloc) < 2:
        return _new(Split, (tuple(alloc.items()), method, tuple(used.items()), usage))
    order = sorted(alloc, key=lambda h: (h.user or "", h.job or ""))
    return _new(Split, (tuple((h, alloc[h]) for h in order), method,
                        tuple((h, used[h]) for h in order), usage))


def general_split(dev: DeviceSample, units: list[ClaimUnit]) -> Split:
    """:func:`split` without its fast path for one claimant."""
    shares, allocation_method = _allocation(dev, units)
    # Within a unit, its members share its part equally.
    allocated = _weights(units, [[s / len(u.members)] * len(u.members)
                                 for u, s in zip(units, shares)])
    procs = dev.processes or ()
    for field, method in (("utilization_percent", "activity"), ("memory_bytes", "memory")):
        figures = _measured(units, procs, field)
        if figures is not None:
            total = sum(map(sum, figures))
            used = _weights(units, [[f / total for f in fs] for fs in figures])
            return _new(Split, (allocated, allocation_method, used, method))
    equal = [[1.0 / len(units) / len(u.members)] * len(u.members) for u in units]
    return _new(Split, (allocated, allocation_method, _weights(units, equal), "equal"))


def merge_methods(methods: Sequence[str | None]) -> str | None:
    """One method for several rows: the one they share, ``mixed`` when they differ, ``None``
    when none is known."""
    known = {m for m in methods if m}
    if not known:
        return None
    return known.pop() if len(known) == 1 else MIXED


def waiting_by_holder(dev: DeviceSample) -> dict[Holder, str] | None:
    """Each holder's waiting reason in ``dev.waiting`` (the collector's classification), keyed
    as the splits key holders; ``None`` when the device was not classified."""
    if dev.waiting is None:
        return None
    return {_new(Holder, (w.user, w.namespace, w.pod, w.job_id)): w.reason for w in dev.waiting}

"""Who an interval of a device is billed to: partitions' shares of their physical device and
the holders' (users', pods', jobs') shares of a device's time."""

from __future__ import annotations

from allsmi.accounting.ledgerschema import Holder
from allsmi.schema import DeviceSample
from allsmi.usage import billing_shares

__all__ = ["Weights", "billing_shares", "holder_weights", "own_memory"]

_VALID = ("ok", "degraded")


def own_memory(devices: tuple[DeviceSample, ...]) -> dict[str, int]:
    """Memory in use of parents of partitions, less what their partitions report (the parent's
    figure includes theirs: adding both up would count it twice)."""
    held: dict[str, int] = {}
    for dev in devices:
        if dev.parent and dev.memory_used_bytes is not None and dev.health in _VALID:
            held[dev.parent] = held.get(dev.parent, 0) + dev.memory_used_bytes
    return {dev.id: max(0, dev.memory_used_bytes - held[dev.id]) for dev in devices
            if dev.id in held and dev.memory_used_bytes is not None}


Weights = tuple[tuple[Holder, float], ...]


def holder_weights(dev: DeviceSample) -> Weights:
    """Who holds ``dev`` now, and each holder's share of its time (the shares add up to 1).

    * With workloads (pods, jobs): an equal share per workload. Within a workload's share, the
      user is the workload's own (a batch job's owner); if the source does not know it, the
      users of the device's processes that belong to the workload (the same job id; all of
      them when the device has a single workload), an equal part per process.
    * Without workloads: an equal share per process, with its user and its job id (from its
      cgroup).
    * Neither: nobody (the time is not attributed).

    A holder with nothing known (no user, pod or job) is nobody; repeated holders are merged.
    """
    procs = dev.processes or ()
    works = dev.workloads or ()
    out: dict[Holder, float] = {}

    def give(holder: Holder, weight: float) -> None:
        if any(holder):
            out[holder] = out.get(holder, 0.0) + weight

    if works:
        each = 1.0 / len(works)
        for work in works:
            mine = () if work.user is not None else tuple(
                p for p in procs if len(works) == 1 or (work.job_id is not None
                                                         and p.job_id == work.job_id))
            if not mine:
                give(Holder(work.user, work.namespace, work.pod, work.job_id), each)
                continue
            for proc in mine:
                give(Holder(proc.user, work.namespace, work.pod, work.job_id), each / len(mine))
    elif procs:
        each = 1.0 / len(procs)
        for proc in procs:
            give(Holder(proc.user, None, None, proc.job_id), each)
    return tuple(sorted(out.items(), key=lambda kv: tuple(v or "" for v in kv[0])))

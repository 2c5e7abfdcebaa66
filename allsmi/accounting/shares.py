"""Who an interval of a device is billed to: partitions' shares of their physical device and
the holders' (users', pods', jobs') shares of a device's time.

The recorder computes these per device per cycle, so it caches them: :func:`holder_key` is
everything :func:`holder_weights` reads of a device, and :func:`partition_layout` everything
:func:`billing_shares` reads of a snapshot; equal keys give equal results.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Iterable

from allsmi.schema import DeviceSample
from allsmi.usage import Weights, billing_shares, holder_weights

__all__ = ["Weights", "billing_shares", "holder_key", "holder_weights", "own_memory",
           "partition_layout"]

_VALID = ("ok", "degraded")
_PROCESS_KEY = attrgetter("user", "job_id")
_WORKLOAD_KEY = attrgetter("user", "namespace", "pod", "job_id")
_PARTITION_KEY = attrgetter("id", "parent", "partition_share")


def holder_key(dev: DeviceSample) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """What :func:`holder_weights` reads of ``dev``, in order: its processes' users and job
    ids, its workloads' users, namespaces, pods and job ids. Memory, pids and names of the
    processes change every cycle and do not count."""
    return (tuple(map(_PROCESS_KEY, dev.processes or ())),
            tuple(map(_WORKLOAD_KEY, dev.workloads or ())))


def partition_layout(devices: Iterable[DeviceSample]) -> tuple[tuple[object, ...], ...]:
    """What :func:`billing_shares` reads of a snapshot: id, parent and declared share of each
    partition, in order (empty when nothing is partitioned)."""
    return tuple(_PARTITION_KEY(dev) for dev in devices if dev.parent)


def own_memory(devices: tuple[DeviceSample, ...]) -> dict[str, int]:
    """Memory in use of parents of partitions, less what their partitions report (the parent's
    figure includes theirs: adding both up would count it twice)."""
    held: dict[str, int] = {}
    for dev in devices:
        if dev.parent and dev.memory_used_bytes is not None and dev.health in _VALID:
            held[dev.parent] = held.get(dev.parent, 0) + dev.memory_used_bytes
    return {dev.id: max(0, dev.memory_used_bytes - held[dev.id]) for dev in devices
            if dev.id in held and dev.memory_used_bytes is not None}

"""Who an interval of a device is billed to: partitions' shares of their physical device and
the holders' (users', pods', jobs') shares of a device's time."""

from __future__ import annotations

from allsmi.schema import DeviceSample
from allsmi.usage import Weights, billing_shares, holder_weights

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

"""The simulated devices' identity as the real backends give it: the installed backend a
simulated one impersonates, a partition's share of its device, uuid-shaped ids."""

from __future__ import annotations

import math
import re
from typing import Any

from allsmi.backend_api import Backend

from .model import unit_hash

#: A MIG profile's compute slices: "3g.40gb" -> 3, "1c.3g.40gb" -> 1 (as NVML's MIG names).
_MIG_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.")
#: Compute slices of a GPU in MIG mode (A100, H100, H200, B200); an A30 has 4.
_MIG_SLICES, _MIG_SLICES_A30 = 7, 4

_A30 = re.compile(r"\bA30\b")


def installed_backend(name: str) -> "type[Backend] | None":
    """The backend class installed as ``name`` in the ``allsmi.backends`` entry-point group, or
    ``None`` when there is none or it cannot be imported.

    The default for callers of :func:`simulated_backends`; the registry (which this layer may not
    import) passes its own loader, :func:`allsmi.collection.registry.impersonated`, to the same effect.
    """
    from allsmi.support import distinfo
    group = "allsmi.backends"
    eps: Any = distinfo.entry_points(group)  # importlib.metadata's answer at a fraction of its cost
    if eps is None:
        from importlib.metadata import entry_points
        eps = entry_points(group=group)
    ep = next((e for e in eps if e.name == name), None)  # the first distribution wins
    if ep is None:
        return None
    try:
        cls = ep.load()
    except Exception:
        return None
    return cls if isinstance(cls, type) and issubclass(cls, Backend) else None


def partition_share(profile: str | None, model: str | None, siblings: int) -> float:
    """The share of its device a simulated partition holds, as the real backend reports it: a
    MIG profile's compute slices over the GPU's (3g.40gb on an H100 is 3/7), else 1/N of the
    device's N partitions (an AMD compute partition)."""
    found = _MIG_PROFILE.match(profile or "")
    if found is not None:
        total = _MIG_SLICES_A30 if _A30.search(model or "") else _MIG_SLICES
        slices = int(found.group(1) or found.group(2))
        if 0 < slices <= total:
            return slices / total
    return 1.0 / max(1, siblings)


def uuid_from(key: str) -> str:
    """A uuid-shaped id made from ``key`` (the same key, the same uuid)."""
    hexes = "".join(f"{int(unit_hash(key, i) * 2**32):08x}" for i in range(4))
    return f"{hexes[:8]}-{hexes[8:12]}-{hexes[12:16]}-{hexes[16:20]}-{hexes[20:32]}"


#: A MIG profile's name: its compute instance's slices ("1c." of "1c.3g.40gb"), its GPU
#: instance's compute slices and memory.
_MIG_NAME = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb")


def mig_instance_ids(profiles: "list[str | None] | tuple[str | None, ...]", model: str | None,
                     memory_total: int) -> tuple[tuple[int, int, int], ...]:
    """Each MIG instance's (MIG slot, GPU instance id, compute instance id), in the order
    ``profiles`` declares them, as nvidia-smi's ``GPU GI CI`` columns would list them once
    they were made in that order with ``nvidia-smi mig -cgi ... -C``.

    The GPU's memory is 8 slices (an A30's 4); a GPU instance takes the smallest power of two
    of them that holds its compute slices and its memory, at the first free start that is a
    multiple of its size, and its id is its node in the binary tree over the slices (NVML's
    numbering: on an 8-slice GPU the whole is 0, halves 1-2, quarters 3-6, eighths 7-14; an
    H100's 3g.40gb, 2g.20gb and 1g.10gb made in turn are GPU instances 1, 5 and 13). Its one
    compute instance is 0; consecutive ``Nc.`` profiles of the same GPU instance profile share
    a GPU instance while its compute slices last, their compute instances numbered from 0. An
    instance that fits nowhere (or names no profile) takes an id past the tree's, so that ids
    stay unique on the GPU. Pure: the same profiles, the same ids."""
    slices = _MIG_SLICES_A30 if _A30.search(model or "") else _MIG_SLICES
    mem_slices = 4 if slices == _MIG_SLICES_A30 else 8
    slice_bytes = memory_total / mem_slices if memory_total > 0 else 0
    free = [True] * mem_slices
    spare = 2 * mem_slices - 1  # (past the tree's last id)
    out: list[tuple[int, int, int]] = []
    shared: tuple[str, int, int] | None = None  # (GI profile, GI id, compute slices left)
    for slot, profile in enumerate(profiles):
        found = _MIG_NAME.match(profile or "")
        if found is None:
            out.append((slot, spare, 0))
            spare += 1
            shared = None
            continue
        ci, gi_compute, gi_gb = int(found.group(1) or 0), int(found.group(2)), int(found.group(3))
        gi_profile = profile[found.start(2):found.end(3)] if profile else ""
        if ci and shared is not None and shared[0] == gi_profile and shared[2] >= ci:
            gi_id, left = shared[1], shared[2]
            used = gi_compute - left
            out.append((slot, gi_id, used))
            shared = (gi_profile, gi_id, left - ci) if left - ci > 0 else None
            continue
        need = max(1, gi_compute if gi_compute < slices else mem_slices,
                   math.ceil(gi_gb * 2**30 / slice_bytes - 0.05) if slice_bytes else 1)
        size = 1
        while size < need and size < mem_slices:
            size *= 2
        start = next((p for p in range(0, mem_slices - size + 1, size)
                      if all(free[p:p + size])), None)
        if start is None or need > mem_slices:
            gi_id = spare
            spare += 1
        else:
            free[start:start + size] = [False] * size
            gi_id = mem_slices // size - 1 + start // size
        out.append((slot, gi_id, 0))
        shared = (gi_profile, gi_id, gi_compute - ci) if ci and gi_compute - ci > 0 else None
    return tuple(out)

"""The simulated devices' identity as the real backends give it: the installed backend a
simulated one impersonates, a partition's share of its device, uuid-shaped ids."""

from __future__ import annotations

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
    import) passes its own loader, :func:`allsmi.registry.impersonated`, to the same effect.
    """
    from allsmi import distinfo
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

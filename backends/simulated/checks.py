"""Checks of a scenario's values beyond their type and range, made once when it is loaded:
text that may reach a terminal, a device's PCI bus numbers, and its partitions (MIG
instances that the GPU can hold, memory that the device has)."""

from __future__ import annotations

import re
from typing import Any

from allsmi.schema.text import escaped

from .identity import mig_instance_ids

#: A backend's name: what the snapshot's ``backend`` says and ``backend:index`` refers to.
BACKEND_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
#: A MIG profile as NVML names it: ``3g.40gb``, ``1g.10gb+me``, ``1c.3g.40gb``.
MIG_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:\+me)?$")
#: GPUs with MIG (the A100, A30, H100, H200, B200 families and the RTX PRO Blackwell boards).
MIG_MODELS = re.compile(r"\b(A100|A800|A30|H100|H800|H200|H20|GH200|B100|B200|GB200|B300|GB300"
                        r"|RTX PRO [56]000)\b")
_A30 = re.compile(r"\bA30\b")


def text_problem(value: str, longest: int, as_processes_say: bool = False) -> str | None:
    """Why ``value`` cannot be a scenario's text, or ``None``: a control, format or
    bidirectional character (a terminal escape sequence, a newline) or more than ``longest``
    characters. ``as_processes_say``: text the simulated processes give (their users and
    command lines), which may hold anything a real process's may, as the hostile-name tests
    need: it is cleaned where every tool's text is, at the schema boundary."""
    shown = escaped(value)
    if shown != value and not as_processes_say:
        return f"must not hold control or format characters, got '{shown}'"
    if len(value) > longest:
        return f"must be at most {longest} characters long, got {len(value)}"
    return None


def bus_numbers(bus_base: int, count: int) -> range:
    """The PCI bus numbers (domain * 256 + bus) of an entry's ``count`` devices, 0x10 apart
    from ``bus_base``; past bus 0xff they go on in the next PCI domain."""
    return range(bus_base, bus_base + 0x10 * count, 0x10)


def partition_problem(instances: "tuple[dict[str, Any], ...]", model: str, memory_total: int,
                      mig: bool) -> tuple[int | None, str, str] | None:
    """Why a device cannot hold ``instances``, or ``None``: (the instance at fault or ``None``
    for all of them, its key, the reason). Each instance holds at most the device's memory, and
    all of them together no more than it has; MIG instances (``mig``) name a profile that
    the GPU has, and fit on it together, as ``nvidia-smi mig -cgi`` would make them."""
    for i, inst in enumerate(instances):
        if inst["memory_total_bytes"] > memory_total:
            return i, "memory_total_bytes", (f"must be at most the device's memory_total_bytes "
                                             f"({memory_total}), got {inst['memory_total_bytes']}")
    if not mig:
        total = sum(inst["memory_total_bytes"] for inst in instances)
        if total > memory_total:
            return None, "instances", (f"hold {total} bytes together, more than the device's "
                                       f"memory_total_bytes ({memory_total})")
        return None
    if not MIG_MODELS.search(model):
        return None, "instances", (f"{model!r} has no MIG (A100, A30, H100, H200, B200 and "
                                   "their kin have)")
    slices = 4 if _A30.search(model) else 7
    sizes = (1, 2, 4) if slices == 4 else (1, 2, 3, 4, 7)
    for i, inst in enumerate(instances):
        found = MIG_PROFILE.match(inst.get("profile", ""))
        if found is None or int(found.group(2)) not in sizes or not (
                0 < int(found.group(1) or 1) <= int(found.group(2))):
            return i, "profile", (f"must be a MIG profile of {model!r} (its GPU instances have "
                                  f"{', '.join(map(str, sizes))} compute slices: "
                                  f"'{sizes[-1]}g.NNgb', '1c.{sizes[-1]}g.NNgb'), "
                                  f"got {inst.get('profile')!r}")
    ids = mig_instance_ids([inst["profile"] for inst in instances], model, memory_total)
    spare = 2 * (4 if slices == 4 else 8) - 1  # (an id past the tree's: fits nowhere)
    gpu_instances: dict[int, int] = {}
    for i, (_, gi, _) in enumerate(ids):
        if gi >= spare:
            return i, "profile", (f"{instances[i]['profile']!r} does not fit on the {model!r} "
                                  "beside the instances before it")
        gpu_instances.setdefault(gi, i)
    used = sum(int(MIG_PROFILE.match(instances[i]["profile"]).group(2))  # type: ignore[union-attr]
               for i in gpu_instances.values())
    if used > slices:
        return None, "instances", (f"use {used} compute slices together; the {model!r} has "
                                   f"{slices}")
    memory = sum(instances[i]["memory_total_bytes"] for i in gpu_instances.values())
    if memory > memory_total:
        return None, "instances", (f"hold {memory} bytes together, more than the device's "
                                   f"memory_total_bytes ({memory_total})")
    return None

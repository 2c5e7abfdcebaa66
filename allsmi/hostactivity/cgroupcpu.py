"""CPU throttling of a process's cgroup and of each cgroup above it.

A CPU limit (``cpu.max``, v1 ``cpu.cfs_quota_us``) set on an ancestor throttles every cgroup
below it, and shows in the ancestor's ``cpu.stat`` only: a Kubernetes pod's limit is on the
pod's cgroup, above its containers'; a Slurm job's on the job's, above its steps'. So the
``cpu.stat`` of the process's cgroup and of each ancestor below the root of the hierarchy's
mount (at most :data:`MAX_LEVELS`) are read, each level's throttled share of its own periods
taken from its own two readings, and the most throttled level is the process's
(docs/activity.md).
"""

from __future__ import annotations

import os
from typing import Callable, MutableMapping, Sequence

#: Cgroups read per process, its own first: deeper ancestors are not read, and the reading
#: says so (a level not checked).
MAX_LEVELS = 16

#: One level of a reading: (its ``cpu.stat`` path, ``nr_periods``, ``nr_throttled``); the
#: counts are ``None`` where the file could not be read (or the level was not checked).
#: A level whose ``cpu.stat`` has no CPU bandwidth controller (no limit can be set there) is
#: left out.
Level = tuple[str, "int | None", "int | None"]

#: The path standing for the ancestors past :data:`MAX_LEVELS` (or above the root of a
#: cgroup namespace's own view), never read.
UNCHECKED = "(ancestors past the level limit)"
#: The path standing for a cgroup that could not be placed on a tree this process reads
#: (:mod:`allsmi.hostactivity.cgrouptree`): its throttling is not measured, never none.
UNRESOLVED = "(cgroup not found)"


def cgroup_levels(mount: str, path: str, below_root: bool = False) -> tuple[str, ...]:
    """The ``cpu.stat`` paths of cgroup ``path`` (as ``/proc/PID/cgroup`` names it) under the
    hierarchy mounted at ``mount``, then of each ancestor up to, not including, the mount's
    root (the process's own cgroup when it is the root); :data:`UNCHECKED` last where there
    are more than :data:`MAX_LEVELS`. ``below_root``: the mount's root is itself a cgroup
    below the hierarchy's root (a cgroup namespace's own view), so it is read too and the
    levels above it, which could not be, end the tuple as :data:`UNCHECKED`. A path with a
    ``.`` or ``..`` part (a cgroup outside this reader's cgroup namespace: the kernel writes
    it relative to the reader's) names no cgroup under ``mount`` (``()``: see
    :mod:`allsmi.hostactivity.cgrouptree`, which places it)."""
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        return ()
    if not parts and not below_root:
        return (os.path.join(mount, "cpu.stat"),)
    lowest = 0 if below_root else 1  # (the mount's root itself, where it is a cgroup to read)
    levels = [os.path.join(mount, *parts[:depth], "cpu.stat")
              for depth in range(len(parts), max(lowest - 1, len(parts) - MAX_LEVELS), -1)]
    if below_root or len(parts) > MAX_LEVELS:
        levels.append(UNCHECKED)
    return tuple(levels)


def read_levels(levels: Sequence[str], read: Callable[[str], bytes],
                parse: Callable[[bytes], tuple[int, int] | None],
                cache: MutableMapping[str, object] | None = None) -> tuple[tuple[Level, ...], bool]:
    """(each level's throttling now, whether the process's own ``cpu.stat`` could not be
    read). ``cache``: the files already read this cycle (the processes of one pod or job share
    their ancestors: each file is read once a cycle)."""
    out: list[Level] = []
    own_failed = False
    for index, path in enumerate(levels):
        if path in (UNCHECKED, UNRESOLVED):
            out.append((path, None, None))
            continue
        found = cache.get(path) if cache is not None else None
        if found is None:
            try:
                found = parse(read(path)) or ()
            except OSError:
                found = OSError
            if cache is not None:
                cache[path] = found
        if found is OSError:
            own_failed = own_failed or index == 0
            out.append((path, None, None))
        elif found:
            periods, throttled = found  # type: ignore[misc]
            out.append((path, periods, throttled))
    return tuple(out), own_failed


def throttled_fraction(now: Sequence[Level], before: Sequence[Level] | None
                       ) -> tuple[float | None, str | None, int]:
    """Share of the CPU-limit periods between two readings that ran out of quota, at the most
    throttled level (each level's ``nr_throttled`` over its ``nr_periods``, from its own two
    readings; 0 for a level where no period ran), that level's cgroup directory (``None``
    unless the share is above 0), and how many levels were not measured. A level not measured
    (read in only one of the readings, unreadable, a counter lower than before: its cgroup
    made again) leaves the figure a lower bound: kept where it shows throttling, ``None``
    where it would read 0 (not throttled is then unknown, never invented); either way the
    process is not known to be unthrottled. ``None`` too when no level has a CPU controller in
    both readings."""
    if before is None:
        return None, None, 0
    old = {path: (periods, throttled) for path, periods, throttled in before}
    fractions: list[tuple[float, str]] = []
    unmeasured = len(old.keys() - {path for path, _, _ in now})
    for path, periods, throttled in now:
        was = old.get(path)
        if was is None or None in (periods, throttled, was[0], was[1]) \
                or periods < was[0] or throttled < was[1]:  # type: ignore[operator]
            unmeasured += 1
            continue
        ran = periods - was[0]  # type: ignore[operator]
        share = (throttled - was[1]) / ran if ran else 0.0  # type: ignore[operator]
        fractions.append((min(1.0, share), path))
    top, where = max(fractions, key=lambda f: f[0], default=(None, None))
    if top is None or (unmeasured and not top):
        return None, None, unmeasured
    return top, os.path.dirname(where) if top and where else None, unmeasured

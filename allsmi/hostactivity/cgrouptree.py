"""Where the cgroup a ``/proc/PID/cgroup`` names lies on a cgroup tree this process can read.

The kernel writes each path of ``/proc/PID/cgroup`` relative to the root of the READER's
cgroup namespace, and a cgroup outside it with a ``..`` for each level up to the nearest
common ancestor (cgroup_namespaces(7)). On cgroup v2, containerd, CRI-O, Docker and Podman give
each container that is not privileged a cgroup namespace of its own, whose ``/sys/fs/cgroup``
shows its own cgroups only. So from such a container (the Kubernetes kit's DaemonSets, with
``hostPID: true``) another pod's process is in ``0::/../../kubepods-burstable-pod<uid>.slice/
cri-containerd-<id>.scope``, which names no directory there.

:class:`CgroupTree` reads the host's tree where it is mounted (``[activity] cgroup_root``;
``auto``: ``/sys/fs/cgroup`` in the host's cgroup namespace, in one of its own the kit's
``/host/sys/fs/cgroup`` where it is mounted). In a namespace of its own it finds, once, the
directory of that tree whose ``cgroup.procs`` lists this process (at most :data:`MAX_SEARCHED`
directories, :data:`MAX_DEPTH` deep): its namespace's root there is that directory less its own
path (``/proc/self/cgroup``), and each relative path is taken from there. That directory is
checked once a cycle (:meth:`CgroupTree.check`, one ``cgroup.procs``) and looked for again when
it no longer lists this process; one not found is looked for again after
:data:`RETRY_SECONDS`. A cgroup that cannot be placed is said, with why
(:func:`cgroup_cpu_levels`): its throttling is then not measured (docs/activity.md), never none.
"""

from __future__ import annotations

import os
import re
import time
from typing import Callable

from .cgroupcpu import cgroup_levels

#: The inode of the initial cgroup namespace (``PROC_CGROUP_INIT_INO``, ``linux/proc_ns.h``).
PROC_CGROUP_INIT_INO = 0xEFFFFFFB
#: ``[activity] cgroup_root``'s default: choose the tree as the module's docstring says.
AUTO = "auto"
#: Where the Kubernetes kit mounts the host's ``/sys/fs/cgroup`` (read-only).
KIT_ROOT = "/host/sys/fs/cgroup"
#: Directories of the host's tree looked at, at most, to find this process's own cgroup.
MAX_SEARCHED = 20_000
#: How deep under the tree's root it is looked for.
MAX_DEPTH = 32
#: Seconds before an own cgroup not found is looked for again.
RETRY_SECONDS = 60.0
#: Bytes of a ``cgroup.procs`` read (a pid is at most 8 digits: 100,000 pids and more).
MAX_PROCS = 1 << 20
#: What to do where other processes' cgroups cannot be placed.
FIX = ("mount the host's /sys/fs/cgroup read-only at /host/sys/fs/cgroup (the Kubernetes kit "
       "does), or name its mount with [activity] cgroup_root")


def parse_cgroup_file(data: bytes) -> list[tuple[str, str, str]] | None:
    """(hierarchy id, controllers, path) of each line of a ``/proc/PID/cgroup``; ``None`` when
    it is not what the kernel writes: the kernel writes each hierarchy once and cgroup names
    unescaped, so a name holding a newline (which whoever may create cgroups can give) makes
    lines of its own: a hierarchy or a controller twice, or a line that is not
    ``ID:CONTROLLERS:/PATH``, names no cgroup, never one the name chose."""
    lines = []
    hierarchies: set[str] = set()
    names: set[str] = set()
    for line in data.decode("utf-8", "replace").split("\n"):
        if not line:
            continue
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        own = [c for c in controllers.split(",") if c]
        if not hierarchy.isdigit() or not path.startswith("/") or hierarchy in hierarchies \
                or names.intersection(own):
            return None
        hierarchies.add(hierarchy)
        names.update(own)
        lines.append((hierarchy, controllers, path))
    return lines


def _parts(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split("/") if p)


def read_limited(path: str, limit: int) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(limit)


class CgroupTree:
    """The cgroup tree this process reads the throttling of other processes' cgroups on.

    ``own_root``: this process's ``/sys/fs/cgroup``; ``setting``: ``[activity] cgroup_root``
    (``auto`` or a path); ``pid``: this process's, as the tree's ``cgroup.procs`` lists it."""

    def __init__(self, proc_root: str = "/proc", own_root: str = "/sys/fs/cgroup",
                 setting: str = AUTO, pid: int | None = None,
                 monotonic: Callable[[], float] = time.monotonic, kit_root: str = KIT_ROOT
                 ) -> None:
        self.proc_root, self.own_root, self.setting = proc_root, own_root, setting
        self.kit_root = kit_root
        self.pid = os.getpid() if pid is None else pid
        self.monotonic = monotonic
        self._chosen: tuple[bool | None, str | None, str] | None = None
        self._found: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]] | str] = {}
        self._retry: dict[tuple[str, str], float] = {}
        self.generation = 0
        """Raised whenever a namespace root found is dropped: places found before are stale."""

    def namespace(self) -> bool | None:
        """Whether this process is in a cgroup namespace of its own (``None``: cannot tell: a
        kernel without cgroup namespaces, which is the host's then, or no ``self`` link)."""
        try:
            link = os.readlink(os.path.join(self.proc_root, "self", "ns", "cgroup"))
        except OSError:
            return None
        match = re.fullmatch(r"cgroup:\[(\d+)\]", link)
        return None if match is None else int(match.group(1)) != PROC_CGROUP_INIT_INO

    def chosen(self) -> tuple[bool | None, str | None, str]:
        """(:meth:`namespace`, the tree read (``None``: none where other processes' cgroups
        are: this process's own view alone), how it was chosen), found once."""
        if self._chosen is None:
            private = self.namespace()
            if self.setting != AUTO:
                root: str | None = self.setting
                how = f"{self.setting} ([activity] cgroup_root)"
            elif not private:
                root, how = self.own_root, self.own_root
            elif os.path.isdir(self.kit_root):
                root, how = self.kit_root, f"the host's, mounted at {self.kit_root}"
            else:
                root, how = None, (f"allsmi runs in a cgroup namespace of its own and sees only "
                                   f"its own cgroups under {self.own_root}: {FIX}")
            self._chosen = (private, root, how)
        return self._chosen

    def place(self, hierarchy: str, name: str, path: str
              ) -> tuple[str, tuple[str, ...], bool] | str:
        """Where cgroup ``path`` (as ``/proc/PID/cgroup`` names it) of hierarchy ``hierarchy``,
        mounted under the name ``name`` (``""``: v2), is: (its mount on the tree read, the
        cgroup's parts under it, whether that mount's root is a cgroup below the hierarchy's
        root: this process's own view), or why it cannot be placed."""
        parts = _parts(path)
        private, root, how = self.chosen()
        outside = "." in parts or ".." in parts
        if root is None:  # a namespace of its own, and only its own view of it
            if outside:
                return f"a cgroup outside allsmi's cgroup namespace; {how}"
            return os.path.join(self.own_root, name) if name else self.own_root, parts, True
        mount = os.path.join(root, name) if name else root
        if not private:
            if outside:  # (the namespace cannot be told: it is taken to be the host's)
                return f"a cgroup outside allsmi's cgroup namespace; {FIX}"
            return mount, parts, False
        base = self._base(hierarchy, mount)
        if isinstance(base, str):
            return base
        out = list(base)
        for part in parts:
            if part == "..":
                if not out:
                    return f"a cgroup above the root of {mount}"
                out.pop()
            elif part != ".":
                out.append(part)
        return mount, tuple(out), False

    def _base(self, hierarchy: str, mount: str) -> tuple[str, ...] | str:
        """The root of this process's cgroup namespace in ``mount`` (its parts), or why not."""
        key = (hierarchy, mount)
        found = self._found.get(key)
        if isinstance(found, tuple):
            return found[1]
        if found is not None and self.monotonic() < self._retry.get(key, 0.0):
            return found
        result = self._find(hierarchy, mount)
        self._found[key] = result
        if isinstance(result, str):
            self._retry[key] = self.monotonic() + RETRY_SECONDS
            return result
        return result[1]

    def _find(self, hierarchy: str, mount: str) -> tuple[tuple[str, ...], tuple[str, ...]] | str:
        """(this process's own cgroup in ``mount``, its namespace's root there), or why not."""
        mine = os.path.join(self.proc_root, "self", "cgroup")
        try:
            lines = parse_cgroup_file(read_limited(mine, 1 << 16))
        except OSError as exc:
            return f"{mine} unreadable ({exc.strerror or exc})"
        own = next((path for h, _, path in lines or () if h == hierarchy), None)
        if own is None or ".." in _parts(own) or "." in _parts(own):
            return f"allsmi's own cgroup of hierarchy {hierarchy} not in {mine}"
        own_parts = _parts(own)
        if hierarchy == "0" and not os.path.exists(os.path.join(mount, "cgroup.controllers")):
            return f"{mount} is not a cgroup v2 tree (no cgroup.controllers)"  # (v1's tmpfs)
        where, searched = self._search(mount)
        if where is None:
            return (f"allsmi's own cgroup (its pid in cgroup.procs) not found under {mount} "
                    f"({searched} cgroup(s) searched, at most {MAX_SEARCHED:,}): {FIX}")
        if own_parts and where[len(where) - len(own_parts):] != own_parts:
            return f"allsmi's own cgroup under {mount} is not its {own} ({mine})"
        return where, where[:len(where) - len(own_parts)]

    def _lists(self, directory: str) -> bool:
        """Whether ``directory``'s ``cgroup.procs`` lists this process."""
        try:
            data = read_limited(os.path.join(directory, "cgroup.procs"), MAX_PROCS)
        except OSError:
            return False
        return str(self.pid).encode() in data.split()

    def _search(self, mount: str) -> tuple[tuple[str, ...] | None, int]:
        """The parts of the directory under ``mount`` whose ``cgroup.procs`` lists this
        process (``None``: none within the bounds), and how many were looked at."""
        stack: list[tuple[str, ...]] = [()]
        searched = 0
        while stack and searched < MAX_SEARCHED:
            parts = stack.pop()
            where = os.path.join(mount, *parts)
            searched += 1
            if self._lists(where):
                return parts, searched
            if len(parts) >= MAX_DEPTH:
                continue
            try:
                with os.scandir(where) as entries:
                    names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            stack.extend(parts + (n,) for n in sorted(names, reverse=True))
        return None, searched

    def check(self) -> None:
        """Once a cycle: each own cgroup found must still list this process; one that does not
        is dropped (looked for again when next needed; :attr:`generation` says so)."""
        for key, found in list(self._found.items()):
            if isinstance(found, tuple) and not self._lists(os.path.join(key[1], *found[0])):
                del self._found[key]
                self._retry.pop(key, None)
                self.generation += 1

    def describe(self) -> str:
        """How other processes' cgroups are found (for ``allsmi doctor``)."""
        private, root, how = self.chosen()
        if root is None:
            return how
        if not private:
            return f"under {how}" + (" (allsmi is in the host's cgroup namespace)"
                                     if private is False else "")
        bases = ["/" + "/".join(v[1]) for v in self._found.values() if isinstance(v, tuple)]
        return (f"placed on {how}, from allsmi's own cgroup namespace"
                + (f" (rooted at {', '.join(bases)} there)" if bases else ""))


def cgroup_cpu_levels(data: bytes, tree: CgroupTree) -> tuple[tuple[str, ...], str | None]:
    """The ``cpu.stat`` paths of the cgroup a ``/proc/PID/cgroup`` names and of its ancestors
    below the hierarchy's root (:func:`allsmi.hostactivity.cgroupcpu.cgroup_levels`, its own
    first), on the tree :class:`CgroupTree` reads: the v2 (``0::``) one when its file exists,
    else v1's ``cpu`` controller; and why none, where a hierarchy that may hold the CPU
    controller names a cgroup that cannot be placed (or the file is not what the kernel
    writes: :func:`parse_cgroup_file`). ``((), None)``: no hierarchy with the CPU controller
    (no CPU limit can apply)."""
    lines = parse_cgroup_file(data)
    if lines is None:
        return (), ("names a hierarchy or a controller twice, or has a line the kernel does "
                    "not write (a cgroup name holding a newline)")
    why: dict[bool, str] = {}  # (v1's, where it has the CPU controller, says more)
    tries = [(h, "", path, False) for h, controllers, path in lines if h == "0" and not controllers]
    tries += [(h, name, path, True) for h, c, path in lines if "cpu" in c.split(",")
              for name in dict.fromkeys((c, "cpu,cpuacct", "cpu"))]
    for hierarchy, name, path, v1 in tries:
        placed = tree.place(hierarchy, name, path)
        if isinstance(placed, str):
            why.setdefault(v1, placed)
            continue
        mount, parts, below = placed
        levels = cgroup_levels(mount, "/".join(parts), below)
        if levels and os.path.exists(levels[0]):
            return levels, None
        why.setdefault(v1, f"its cgroup is not under {mount}")
    return (), why.get(True, why.get(False))

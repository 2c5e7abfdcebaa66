"""Which host signals this process can read here, for ``allsmi doctor`` (docs/activity.md).

Each signal is tried on this process itself (or the node) exactly as the readers read it, so
the answer is the readers' own: a container without ``/proc/pressure``, a kernel without delay
accounting, an exporter that cannot read other users' ``/proc/PID/io`` (not root, a
container's root without ``CAP_SYS_PTRACE``, or root of a user namespace of its own).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .node import read_infiniband, read_network, read_node
from .cgrouptree import AUTO, CgroupTree, cgroup_cpu_levels
from .procfs import ProcessReading, delay_accounting, read_proc_file, read_process

#: Capability bits of ``CapEff`` in ``/proc/PID/status`` (``linux/capability.h``).
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE = 1, 2, 19


class Signal(NamedTuple):
    name: str
    readable: bool
    detail: str


def effective_capabilities(proc_root: str = "/proc") -> int | None:
    """This process's effective capability set (``CapEff`` of ``/proc/self/status``), or
    ``None`` when it cannot be read."""
    try:
        with open(os.path.join(proc_root, "self", "status"), "rb") as handle:
            for line in handle:
                if line.startswith(b"CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return None


#: ``/proc/PID/uid_map`` of the initial user namespace: every uid is itself.
_INITIAL_UID_MAP = ["0", "0", "4294967295"]


def user_namespace_map(proc_root: str = "/proc") -> str | None:
    """This process's uid map (``inside outside count``, rows joined by ``; ``) where it runs in
    a user namespace other than the host's; ``None`` in the initial one, or where the map cannot
    be read (a kernel without user namespaces)."""
    try:
        with open(os.path.join(proc_root, "self", "uid_map"), "rb") as handle:
            rows = [line.split() for line in handle.read(4096).decode("ascii", "replace")
                    .splitlines() if line.strip()]
    except OSError:
        return None
    if rows == [_INITIAL_UID_MAP]:
        return None
    return "; ".join(" ".join(row) for row in rows) or "empty"


def others_io_access(euid: int, caps: int | None,
                     uid_map: str | None = None) -> tuple[bool, str]:
    """Whether a process of effective uid ``euid`` with effective capabilities ``caps`` can
    read other users' ``/proc/PID/io``, and why.

    The kernel asks two things, whatever the uid: opening the file (mode 0400, owned by the
    process's user) needs ``CAP_DAC_READ_SEARCH`` or ``CAP_DAC_OVERRIDE``, and reading it
    needs ptrace read access (``PTRACE_MODE_READ_FSCREDS``), which for another user's process
    is ``CAP_SYS_PTRACE``. Root has both unless they were dropped: a container's root keeps
    ``CAP_DAC_OVERRIDE`` but not ``CAP_SYS_PTRACE`` (Docker's default). The capabilities
    count in the target's user namespace: in a user namespace of its own (``uid_map``, from
    :func:`user_namespace_map`: a rootless container, ``unshare --user``) a full set does not
    reach processes outside it, and the holders' processes are taken to be outside."""
    who = "running as root" if euid == 0 else "not root"
    if caps is None:
        return False, (f"{who}, capabilities unknown (no CapEff in /proc/self/status): whether "
                       "other users' processes' read rates can be read is unknown")
    dac = ("CAP_DAC_READ_SEARCH" if caps >> CAP_DAC_READ_SEARCH & 1 else
           "CAP_DAC_OVERRIDE" if caps >> CAP_DAC_OVERRIDE & 1 else None)
    missing = [name for name, present in (("CAP_SYS_PTRACE", caps >> CAP_SYS_PTRACE & 1),
                                          ("CAP_DAC_READ_SEARCH", dac)) if not present]
    if not missing and uid_map is not None:
        return False, (f"{who} in a user namespace of its own (uid map {uid_map}): its "
                       "capabilities do not reach processes outside it, so other users' "
                       "processes' read rates are unknown unless they run inside it")
    if not missing:
        return True, f"{who}, with CAP_SYS_PTRACE and {dac}"
    lacking = " and ".join(missing)
    if euid == 0:
        why = f"running as root without {lacking}" + (
            " (a container's default)" if missing == ["CAP_SYS_PTRACE"] else "")
    else:
        why = f"not root and without {lacking}"
    return False, (f"{why}: other users' processes' read rates are unknown, so their holders "
                   "may be classified unknown")


def cgroup_signal(me: ProcessReading, tree: CgroupTree, proc_root: str = "/proc") -> Signal:
    """Whether CPU throttling can be read: of this process's cgroup (and those above it), and
    of other processes', placed as the sampler places them (``tree``). Another process is
    ``proc_root``/1 (with the host's PID namespace, the host's init: outside a container's own
    cgroup namespace, so its ``/proc/1/cgroup`` path is ``..``-relative there)."""
    limited = [path for path, periods, _ in me.cpu_levels if periods is not None]
    if limited:
        own = limited[0] + (f" and {len(limited) - 1} cgroup(s) above it"
                            if len(limited) > 1 else "")
    else:
        own = next((p for p in me.problems if "/cgroup" in p),
                   "no cpu.stat with throttling for this process's cgroup or those above it")
    where = os.path.join(proc_root, "1", "cgroup")
    try:
        why = cgroup_cpu_levels(read_proc_file(where), tree)[1]
    except OSError as exc:
        why = f"unreadable ({exc.strerror or exc})"
    root = tree.chosen()[1]
    if why is not None:
        others = f"other processes' cgroups cannot be found ({where}: {why})"
    elif root is None:
        others = f"other processes' cgroups cannot be found: {tree.describe()}"
    else:
        others = f"other processes' cgroups: {tree.describe()}"
    return Signal("cgroup CPU throttling", bool(limited) and why is None and root is not None,
                  f"{own}; {others}")


def host_signals(proc_root: str = "/proc", sys_root: str = "/sys",
                 cgroup_root: str = AUTO) -> list[Signal]:
    """Each host signal the waiting classification uses, whether it is readable, and why not;
    ``cgroup_root``: ``[activity] cgroup_root``."""
    tree = CgroupTree(proc_root, os.path.join(sys_root, "fs", "cgroup"), cgroup_root)
    me = read_process(os.getpid(), proc_root, tree, delay_accounting(proc_root))
    out: list[Signal] = []
    if me is None:
        out.append(Signal("process counters", False, f"{proc_root}/PID/stat unreadable"))
        return out
    out.append(Signal("process CPU and threads", True, f"{proc_root}/PID/stat"))
    out.append(Signal("threads in I/O wait", me.blocked_threads is not None,
                      f"{proc_root}/PID/task/*/stat" if me.blocked_threads is not None
                      else "; ".join(p for p in me.problems if "task" in p)))
    out.append(Signal("CPU wanted (schedstat)", me.runnable_ns is not None,
                      f"{proc_root}/PID/schedstat" if me.runnable_ns is not None
                      else "no schedstat (kernel without CONFIG_SCHED_INFO): CPU time alone"))
    own_io = me.read_chars is not None
    others, why = others_io_access(os.geteuid(), effective_capabilities(proc_root),
                                   user_namespace_map(proc_root))
    io = f"{proc_root}/PID/io ({why})" if others else f"{proc_root}/PID/io: {why}"
    out.append(Signal("read/write rates", own_io and others,
                      io if own_io else "; ".join(me.problems)))
    delayacct = delay_accounting(proc_root)
    out.append(Signal("block-I/O wait time (delay accounting)", delayacct,
                      "kernel.task_delayacct = 1" if delayacct else
                      "kernel.task_delayacct is off: threads in D state are counted instead"))
    out.append(cgroup_signal(me, tree, proc_root))
    node = read_node(proc_root, sys_root)
    out.append(Signal("CPU I/O wait", node.cpu_ticks is not None, f"{proc_root}/stat"))
    kinds = sorted(node.pressure_some_usec)
    out.append(Signal("pressure stall information", bool(kinds),
                      f"{proc_root}/pressure/{{{','.join(kinds)}}}" if kinds else
                      f"{proc_root}/pressure missing (kernel before 4.20 or psi=0)"))
    interfaces = read_network(sys_root)
    out.append(Signal("network bytes", bool(interfaces),
                      f"{len(interfaces)} interface(s) under {sys_root}/class/net"))
    ports, unreadable = read_infiniband(sys_root)
    detail = f"{len(ports)} port(s)" if ports or not unreadable else ""
    if unreadable:  # (their traffic is unknown: a quiet holder is then unknown, not nothing)
        detail += (", " if detail else "") + (
            f"{len(unreadable)} port(s) without readable byte counters ("
            + ", ".join(unreadable[:4]) + (", ..." if len(unreadable) > 4 else "")
            + "): traffic there unknown")
    out.append(Signal("InfiniBand/RoCE ports", bool(ports) and not unreadable,
                      detail if ports or unreadable else "no InfiniBand/RoCE port here"))
    return out

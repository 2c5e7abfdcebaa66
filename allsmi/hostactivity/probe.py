"""Which host signals this process can read here, for ``allsmi doctor`` (docs/activity.md).

Each signal is tried on this process itself (or the node) exactly as the readers read it, so
the answer is the readers' own: a container without ``/proc/pressure``, a kernel without delay
accounting, an exporter that is not root and so cannot read other users' ``/proc/PID/io``.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .node import read_infiniband, read_network, read_node
from .procfs import delay_accounting, read_process

#: CAP_SYS_PTRACE's bit in /proc/PID/status CapEff: reading another user's /proc/PID/io.
_CAP_SYS_PTRACE = 19


class Signal(NamedTuple):
    name: str
    readable: bool
    detail: str


def _may_read_others_io(proc_root: str) -> tuple[bool, str]:
    if os.geteuid() == 0:
        return True, "running as root"
    try:
        with open(os.path.join(proc_root, "self", "status"), "rb") as handle:
            for line in handle:
                if line.startswith(b"CapEff:"):
                    if int(line.split()[1], 16) >> _CAP_SYS_PTRACE & 1:
                        return True, "CAP_SYS_PTRACE"
    except (OSError, ValueError, IndexError):
        pass
    return False, ("not root and without CAP_SYS_PTRACE: other users' processes' read rates "
                   "are unknown, so their holders may be classified unknown")


def host_signals(proc_root: str = "/proc", sys_root: str = "/sys") -> list[Signal]:
    """Each host signal the waiting classification uses, whether it is readable, and why not."""
    me = read_process(os.getpid(), proc_root, os.path.join(sys_root, "fs", "cgroup"),
                      delay_accounting(proc_root))
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
    others, why = _may_read_others_io(proc_root)
    out.append(Signal("read/write rates", own_io and others,
                      f"{proc_root}/PID/io ({why})" if own_io else "; ".join(me.problems)))
    delayacct = delay_accounting(proc_root)
    out.append(Signal("block-I/O wait time (delay accounting)", delayacct,
                      "kernel.task_delayacct = 1" if delayacct else
                      "kernel.task_delayacct is off: threads in D state are counted instead"))
    out.append(Signal("cgroup CPU throttling", me.throttled_usec is not None,
                      me.cgroup or "no cpu.stat with throttling for this process's cgroup"))
    node = read_node(proc_root, sys_root)
    out.append(Signal("CPU I/O wait", node.cpu_ticks is not None, f"{proc_root}/stat"))
    kinds = sorted(node.pressure_some_usec)
    out.append(Signal("pressure stall information", bool(kinds),
                      f"{proc_root}/pressure/{{{','.join(kinds)}}}" if kinds else
                      f"{proc_root}/pressure missing (kernel before 4.20 or psi=0)"))
    net, interfaces = read_network(sys_root)
    out.append(Signal("network bytes", net is not None,
                      f"{interfaces} interface(s) under {sys_root}/class/net"))
    ib, ports = read_infiniband(sys_root)
    out.append(Signal("InfiniBand/RoCE ports", ib is not None,
                      f"{ports} port(s)" if ib is not None else "no InfiniBand/RoCE port here"))
    return out

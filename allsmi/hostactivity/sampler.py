"""What the holder processes and the node did over the last interval: rates from two readings.

:class:`HostActivitySampler` is asked once per collection cycle for the processes that hold
devices. It reads each of them (:func:`allsmi.hostactivity.procfs.read_process`) and the node
(:func:`allsmi.hostactivity.node.read_node`), and turns this reading and the previous one into
rates over the interval between them. A process seen for the first time, a reused pid, a
counter that went backwards or an interval shorter than :data:`MIN_WINDOW_SECONDS` leaves
its rates ``None`` (unknown), never 0. The node's network and InfiniBand/RoCE rates are
summed over the interfaces and ports read both times, each from its own two values
(:func:`summed_rate`): one that appears, disappears or goes backwards adds nothing to that
interval, and is counted (:func:`unmeasured`): the sum is then a part of the traffic, enough
to call it busy, never quiet. Readings of processes no longer asked for are dropped, so its
memory is bounded by the holder processes.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Collection, Mapping

from .cgroupcpu import UNRESOLVED, throttled_fraction
from .cgrouptree import CgroupTree
from .node import NodeReading, read_node
from allsmi.support.pidns import pid_view
from .portable import TICKS as PORTABLE_TICKS
from .procfs import FIND_CGROUP, ProcessReading, clock_ticks, delay_accounting, read_process
from .threads import summed_delta

#: Shorter intervals than this give meaningless rates: they are reported ``None``.
MIN_WINDOW_SECONDS = 0.2
#: Why CPU and I/O wait times are unknown where the clock tick rate is.
TICKS_UNKNOWN = ("clock ticks per second unknown (sysconf SC_CLK_TCK): CPU and I/O wait "
                 "times unknown")


@dataclass(frozen=True)
class ProcessActivity:
    """One process over the last interval (``None``: unknown)."""

    pid: int
    cpu_cores: float | None = None
    """CPU seconds per second (1.0: a full core)."""
    tgid: int | None = None
    """The process ``pid`` belongs to (``pid``, unless it is one of a process's threads: the
    figures are then the whole process's, the same as its other threads')."""
    runnable_fraction: float | None = None
    """Time its threads were on a CPU or waiting for one (schedstat), summed over them, as a
    share of the interval (at most 1)."""
    threads: int | None = None
    blocked_threads: int | None = None
    """Threads in uninterruptible sleep (I/O wait) when read."""
    blocked_fraction: float | None = None
    """Time its threads spent in block-I/O wait (delay accounting, each thread's
    ``delayacct_blkio_ticks``), summed over them, as a share of the interval (at most 1), where
    the kernel kept it over the whole interval."""
    threads_unmeasured: int = 0
    """Threads whose waits add nothing to :attr:`blocked_fraction` and
    :attr:`runnable_fraction` (:func:`allsmi.hostactivity.threads.summed_delta`: started while
    not every thread was read, ended, or read in one reading only): where any, those figures
    are a part of the process's waits, enough to call it waiting, never quiet."""
    read_bytes_per_second: float | None = None
    """Bytes read through ``read()`` (files, pipes, sockets) per second."""
    write_bytes_per_second: float | None = None
    disk_read_bytes_per_second: float | None = None
    disk_write_bytes_per_second: float | None = None
    throttled_fraction: float | None = None
    """Share of the CPU-limit periods in the interval that ran out of quota (``nr_throttled``
    over ``nr_periods``; 0 when no period ran: nothing was throttled), at the most throttled
    of its cgroup and the cgroup's ancestors
    (:func:`allsmi.hostactivity.cgroupcpu.throttled_fraction`)."""
    throttled_cgroup: str | None = None
    """The cgroup directory of that most throttled level, where it was throttled at all."""
    throttling_unmeasured: int = 0
    """Levels of its cgroup chain whose throttling over the interval is unknown (unreadable,
    read once, reset, past the level limit): where any, :attr:`throttled_fraction` is a lower
    bound or ``None``, enough to call it throttled, never unthrottled."""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeActivity:
    """The node over the last interval (``None``: unknown)."""

    cpu_iowait_percent: float | None = None
    pressure_percent: dict[str, float] = field(default_factory=dict)
    """Per kind (cpu, io, memory): share of the interval some task stalled on it (PSI)."""
    network_rx_bytes_per_second: float | None = None
    network_tx_bytes_per_second: float | None = None
    infiniband_rx_bytes_per_second: float | None = None
    infiniband_tx_bytes_per_second: float | None = None
    infiniband_ports: int = 0
    """InfiniBand/RoCE ports read this cycle: with ports, an InfiniBand rate of ``None`` is
    traffic unknown, not traffic absent."""
    network_unmeasured: int = 0
    """Interfaces of either reading that add nothing to the network rates (:func:`unmeasured`):
    where any, the rates are a part of the node's traffic (enough to call it busy, never quiet)."""
    infiniband_unmeasured: int = 0
    """The same of the InfiniBand/RoCE ports."""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostActivity:
    """One cycle's host evidence: per process asked for that still runs, and the node."""

    processes: dict[int, ProcessActivity]
    node: NodeActivity
    window_seconds: float | None = None
    """Seconds since the previous reading (``None`` on the first)."""


def _rate(new: int | None, old: int | None, seconds: float, scale: float = 1.0) -> float | None:
    if new is None or old is None or new < old:
        return None
    return (new - old) * scale / seconds


def _fraction(new: int | None, old: int | None, span: float | None) -> float | None:
    value = None if span is None else _rate(new, old, span)
    return None if value is None else min(1.0, value)


def _throttled(now: ProcessReading, before: ProcessReading | None
               ) -> tuple[float | None, str | None, int]:
    """Share of the CPU-limit periods between two readings that were throttled, at the most
    throttled level, that level's cgroup, and the levels not measured; 0 when none ran (no
    limit, or nothing used it); ``None`` when not read both times, from another cgroup, or a
    counter went backwards (the cgroup was made again)."""
    if before is None:
        return None, None, 0
    if before.cgroup_levels != now.cgroup_levels:
        return None, None, max(1, len(now.cgroup_levels))
    return throttled_fraction(now.cpu_levels, before.cpu_levels)


def _thread_waits(now: ProcessReading, b: ProcessReading | None, span: float,
                  ticks: int | None) -> tuple[float | None, float | None, int]:
    """(block-I/O wait, time on or waiting for a CPU, each a share of the interval, summed over
    the threads read both times; threads that add nothing to a known figure)."""
    if b is None or now.thread_counters is None or b.thread_counters is None:
        return (_fraction(now.blkio_ticks, b and b.blkio_ticks, span * ticks if ticks else None),
                _fraction(now.runnable_ns, b and b.runnable_ns, span * 1e9), 0)
    blkio, left_blkio = summed_delta(now.thread_counters, b.thread_counters,
                                     b.threads_complete, 1)
    run, left_run = summed_delta(now.thread_counters, b.thread_counters, b.threads_complete, 2)
    blocked = None if blkio is None or not ticks else min(1.0, blkio / (span * ticks))
    runnable = None if run is None else min(1.0, run / (span * 1e9))
    return blocked, runnable, max(left_blkio if blocked is not None else 0,
                                  left_run if runnable is not None else 0)


#: What a saturated 32-bit InfiniBand ``port_rcv_data``/``port_xmit_data`` reads (in bytes: the
#: counters count 4-byte words): PortCounters stop at their maximum instead of wrapping, so
#: one there moves no more, however busy the port (drivers without the 64-bit set).
IB_SATURATED = 4 * (2**32 - 1)


def summed_rate(now: Mapping[str, tuple[int, ...]], before: Mapping[str, tuple[int, ...]],
                index: int, seconds: float, saturated: int | None = None) -> float | None:
    """The rate of ``index`` summed over the counters (interfaces, ports) of two readings,
    each counter's change taken from its own two values: a counter in only one reading
    (appeared, disappeared, unreadable once), lower than before (reset, wrapped) or at
    ``saturated`` in either (stuck at its maximum) adds nothing; ``None`` when no counter has
    two usable values."""
    deltas = [value[index] - before[key][index] for key, value in now.items()
              if key in before and value[index] >= before[key][index]
              and saturated not in (value[index], before[key][index])]
    return sum(deltas) / seconds if deltas else None


def unmeasured(now: Mapping[str, tuple[int, ...]], before: Mapping[str, tuple[int, ...]],
               saturated: int | None = None) -> int:
    """How many counters (interfaces, ports) of either reading add nothing to
    :func:`summed_rate` in some direction: appeared, disappeared, lower than before or at
    ``saturated``. Their traffic in the interval is unknown, so the summed rate is a lower bound."""
    usable = sum(1 for key, value in now.items() if key in before and all(
        new >= old and saturated not in (new, old) for new, old in zip(value, before[key])))
    return len(now.keys() | before.keys()) - usable


def process_activity(now: ProcessReading, before: ProcessReading | None, seconds: float | None,
                     ticks: int | None) -> ProcessActivity:
    """The rates of one process between two readings of it (the same process: same start);
    ``ticks``: clock ticks per second (``None``: unknown, and so are the times in ticks)."""
    same = before is not None and before.start_ticks == now.start_ticks and seconds is not None \
        and seconds >= MIN_WINDOW_SECONDS
    b = before if same else None
    span = seconds if same and seconds else 1.0
    cpu = b and b.cpu_ticks if ticks else None
    blocked, runnable, unmeasured = _thread_waits(now, b, span, ticks)
    throttled, level, levels_unmeasured = _throttled(now, b)
    return ProcessActivity(
        pid=now.pid, tgid=now.tgid, threads=now.threads, blocked_threads=now.blocked_threads,
        cpu_cores=_rate(now.cpu_ticks, cpu, span, 1.0 / (ticks or 1)),
        blocked_fraction=blocked, runnable_fraction=runnable, threads_unmeasured=unmeasured,
        read_bytes_per_second=_rate(now.read_chars, b and b.read_chars, span),
        write_bytes_per_second=_rate(now.write_chars, b and b.write_chars, span),
        disk_read_bytes_per_second=_rate(now.disk_read_bytes, b and b.disk_read_bytes, span),
        disk_write_bytes_per_second=_rate(now.disk_write_bytes, b and b.disk_write_bytes, span),
        throttled_fraction=throttled, throttled_cgroup=level,
        throttling_unmeasured=levels_unmeasured,
        problems=now.problems if ticks else now.problems + (TICKS_UNKNOWN,))


def node_activity(now: NodeReading, before: NodeReading | None,
                  seconds: float | None) -> NodeActivity:
    """The node's rates between two readings."""
    ports = len(now.infiniband) + len(now.infiniband_unreadable)
    if before is None or seconds is None or seconds < MIN_WINDOW_SECONDS:
        return NodeActivity(infiniband_ports=ports, problems=now.problems)
    iowait = None
    if now.cpu_ticks and before.cpu_ticks and len(now.cpu_ticks) == len(before.cpu_ticks) > 4:
        delta = [max(0.0, a - b) for a, b in zip(now.cpu_ticks, before.cpu_ticks)]
        total = sum(delta) - sum(delta[8:10])  # guest time is already in user time
        iowait = round(100.0 * delta[4] / total, 2) if total > 0 else None
    pressure = {}
    for kind, total_usec in now.pressure_some_usec.items():
        share = _fraction(total_usec, before.pressure_some_usec.get(kind), seconds * 1e6)
        if share is not None:
            pressure[kind] = round(100.0 * share, 2)

    net_rx, net_tx = (summed_rate(now.network, before.network, i, seconds) for i in (0, 1))
    ib_rx, ib_tx = (summed_rate(now.infiniband, before.infiniband, i, seconds, IB_SATURATED)
                    for i in (0, 1))
    return NodeActivity(cpu_iowait_percent=iowait, pressure_percent=pressure,
                        network_rx_bytes_per_second=net_rx, network_tx_bytes_per_second=net_tx,
                        infiniband_rx_bytes_per_second=ib_rx, infiniband_tx_bytes_per_second=ib_tx,
                        infiniband_ports=ports, problems=now.problems,
                        network_unmeasured=unmeasured(now.network, before.network),
                        infiniband_unmeasured=unmeasured(now.infiniband, before.infiniband,
                                                         IB_SATURATED)
                        + len(now.infiniband_unreadable))


class HostActivitySampler:
    """Reads the holder processes and the node once per cycle and keeps the previous readings.

    Reads ``/proc`` and ``/sys`` on Linux; elsewhere (or with ``portable``) psutil, which has
    fewer signals (:mod:`allsmi.hostactivity.portable`). Not thread-safe: the collector calls
    it from its one cycle at a time.
    """

    def __init__(self, proc_root: str = "/proc", sys_root: str = "/sys",
                 cgroup_root: str | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 portable: bool | None = None, tree: CgroupTree | None = None) -> None:
        """``cgroup_root``: this process's ``/sys/fs/cgroup``; ``tree``: where other
        processes' cgroups are placed (:class:`allsmi.hostactivity.cgrouptree.CgroupTree`,
        ``[activity] cgroup_root``; by default ``auto`` over these roots)."""
        self.proc_root, self.sys_root = proc_root, sys_root
        self.cgroup_root = cgroup_root or f"{sys_root}/fs/cgroup"
        self.tree = tree if tree is not None else \
            CgroupTree(proc_root, self.cgroup_root, monotonic=monotonic)
        self._generation = self.tree.generation
        self.monotonic = monotonic
        self.portable = portable if portable is not None else \
            not sys.platform.startswith("linux") and proc_root == "/proc"
        """Whether psutil reads the host (no ``/proc`` here)."""
        self._ticks = clock_ticks() if not self.portable else PORTABLE_TICKS
        self._procs: dict[int, ProcessReading] = {}
        self._node: NodeReading | None = None
        self._at: float | None = None

    def sample(self, pids: Collection[int],
               detailed: Collection[int] | None = None) -> HostActivity:
        """The activity of ``pids`` (those still running) and of the node since the last call.

        Each thread's state is read only for the processes in ``detailed`` (all when ``None``):
        the classification needs it only for holders of devices below the idle threshold,
        and it costs a file per thread. Each process's cgroup is looked up once in its life
        (again each cycle while it cannot be placed, and after this process's own cgroup on the
        host's tree was found again: :meth:`allsmi.hostactivity.cgrouptree.CgroupTree.check`)."""
        now = self.monotonic()
        seconds = None if self._at is None else now - self._at
        if self.portable:
            return self._sample_portable(pids, now, seconds)
        node = read_node(self.proc_root, self.sys_root)
        # the drivers' pids are the host's: under another PID namespace's /proc they name other
        # processes, whose figures would be taken for the holders' (withheld: unknown, said)
        withheld = pid_view(self.proc_root).problem
        if withheld is not None:
            pids = ()
            node = replace(node, problems=node.problems + (f"holder processes not read: {withheld}",))
        # read each cycle: switched off (sysctl kernel.task_delayacct=0), the counters stop,
        # and an interval over which they did not move is not one without I/O wait
        delayacct = delay_accounting(self.proc_root)
        readings: dict[int, ProcessReading] = {}
        out: dict[int, ProcessActivity] = {}
        cache: dict[str, object] = {}  # the cgroup files read this cycle (shared ancestors)
        if pids:  # this process's own cgroup on the host's tree, where found, is still its
            self.tree.check()
        moved = self.tree.generation != self._generation  # (each process placed again)
        self._generation = self.tree.generation
        for pid in pids:
            before = self._procs.get(pid)
            known: object = before.cgroup_levels if before is not None and not moved \
                and UNRESOLVED not in before.cgroup_levels else FIND_CGROUP
            states = detailed is None or pid in detailed
            reading = read_process(pid, self.proc_root, self.tree, delayacct,
                                   thread_states=states, cpu_stat=known,
                                   tgid=before.tgid if before is not None else None, cache=cache)
            if reading is not None and before is not None \
                    and before.start_ticks != reading.start_ticks:  # another process: its own
                reading = read_process(pid, self.proc_root, self.tree, delayacct,
                                       thread_states=states, cache=cache)
            if reading is None:
                continue  # ended (or not a process; or ended as it was read again)
            readings[pid] = reading
            out[pid] = process_activity(reading, self._procs.get(pid), seconds, self._ticks)
        activity = HostActivity(out, node_activity(node, self._node, seconds), seconds)
        self._procs, self._node, self._at = readings, node, now
        return activity

    def _sample_portable(self, pids: Collection[int], now: float,
                         seconds: float | None) -> HostActivity:
        from .portable import read_node_psutil, read_process_psutil
        node = read_node_psutil()
        readings: dict[int, ProcessReading] = {}
        out: dict[int, ProcessActivity] = {}
        for pid in pids:
            reading = read_process_psutil(pid)
            if reading is not None:
                readings[pid] = reading
                out[pid] = process_activity(reading, self._procs.get(pid), seconds, self._ticks)
        activity = HostActivity(out, node_activity(node, self._node, seconds), seconds)
        self._procs, self._node, self._at = readings, node, now
        return activity

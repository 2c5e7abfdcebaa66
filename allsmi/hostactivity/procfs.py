"""One holder process's host counters at one moment, from ``/proc`` (Linux).

Read for the processes that hold a device only (never a walk of ``/proc``): ``stat`` (state,
CPU ticks, threads, start time, delay-accounting block-I/O ticks), the threads' ``stat`` and
``schedstat`` files (how many are in uninterruptible sleep, ``D``, and each one's block-I/O
and CPU waits: :mod:`allsmi.hostactivity.threads`), ``io`` (bytes read and written) and
``cgroup`` with the ``cpu.stat`` of the cgroup and its ancestors (CPU throttling:
:mod:`allsmi.hostactivity.cgroupcpu`). Each file that cannot be read leaves its
figures ``None`` and says why in :attr:`ProcessReading.problems`; nothing here raises.

``/proc/PID/io`` of another user's process needs ``CAP_SYS_PTRACE`` and ``CAP_DAC_READ_SEARCH``
(or ``CAP_DAC_OVERRIDE``), which root has unless they were dropped (a container's root lacks
``CAP_SYS_PTRACE``): an exporter without them cannot read it, and says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import MutableMapping

from .cgroupcpu import UNRESOLVED, Level, read_levels
from .cgrouptree import CgroupTree, cgroup_cpu_levels
from .threads import read_threads

#: Bytes read of any one /proc or cgroup file (they are a few hundred bytes).
_MAX_READ = 16384


def clock_ticks() -> int | None:
    """Kernel clock ticks per second (``USER_HZ``), the unit of ``stat``'s times (CPU time,
    ``delayacct_blkio_ticks``), as ``sysconf(_SC_CLK_TCK)`` reports it; ``None`` when it does
    not (the times are then not converted to seconds: never 100 assumed)."""
    try:
        ticks = int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return None
    return ticks if ticks > 0 else None


@dataclass(frozen=True)
class ProcessReading:
    """Cumulative counters of one process at one moment (``None``: could not be read)."""

    pid: int
    start_ticks: int
    """When the process started (ticks after boot): tells a reused pid from the same process."""
    state: str
    cpu_ticks: int
    """User plus system CPU time, in clock ticks."""
    threads: int
    blocked_threads: int | None = None
    """Threads in uninterruptible sleep (``D``) now, among :attr:`threads_seen`; ``None`` when
    not read, or when only some were (past :data:`allsmi.hostactivity.threads.MAX_THREADS`)
    and none of them was."""
    threads_seen: int = 0
    thread_counters: dict[int, tuple[int, int | None, int | None]] | None = None
    """Per thread id read: (start ticks, ``delayacct_blkio_ticks``, runnable ns) (see
    :data:`allsmi.hostactivity.threads.ThreadCounters`): every thread's where their states
    were read, else the main thread's alone; ``None`` where not read (psutil)."""
    threads_complete: bool = False
    """Whether :attr:`thread_counters` holds every thread of the process."""
    blkio_ticks: int | None = None
    """Delay accounting's block-I/O wait of the main thread (``delayacct_blkio_ticks``: the
    kernel writes the leader's own, not its threads'), when the kernel keeps it. The rates
    use :attr:`thread_counters` (each thread's own) where both readings have them."""
    read_chars: int | None = None
    """Bytes the process read through ``read()`` and friends (files, pipes, sockets): ``rchar``."""
    write_chars: int | None = None
    disk_read_bytes: int | None = None
    """Bytes it caused to be fetched from storage: ``read_bytes``."""
    disk_write_bytes: int | None = None
    runnable_ns: int | None = None
    """Main thread's time on a CPU plus time waiting for one (``/proc/PID/schedstat``), in
    nanoseconds: a thread that wants a CPU all the time is CPU-bound even where an
    oversubscribed node gives it little. The rates sum :attr:`thread_counters` instead."""
    cgroup: str | None = None
    """The ``cpu.stat`` file of its cgroup (v2, or v1's ``cpu`` controller), when found."""
    cgroup_levels: tuple[str, ...] = ()
    """The ``cpu.stat`` files of its cgroup and of the ancestors read with it, its own first;
    ``(UNRESOLVED,)`` where its cgroup could not be placed on a tree this process reads
    (:mod:`allsmi.hostactivity.cgrouptree`): its throttling is then not measured."""
    cpu_levels: tuple[Level, ...] = ()
    """Each level's (path, ``nr_periods``, ``nr_throttled``) now (those with a CPU controller)."""
    cpu_periods: int | None = None
    """Its own cgroup's CPU-limit enforcement periods so far (``cpu.stat`` ``nr_periods``)."""
    throttled_periods: int | None = None
    """Of them, those in which it ran out of its quota (``nr_throttled``). Not the throttled
    time (``throttled_usec``, v1 ``throttled_time``): the kernel adds it up per CPU, so a
    cgroup throttled on 8 CPUs at once counts 8 s a second, not a share of the interval."""
    tgid: int | None = None
    """The process (thread group) ``pid`` belongs to: ``pid`` itself, unless ``pid`` is one of
    its threads (whose ``/proc/TID`` files give the whole process's figures, so two of its
    threads listed are one process, not two); ``None`` when ``status`` could not be read."""
    problems: tuple[str, ...] = field(default=())
    """Why figures are ``None`` (e.g. ``"/proc/PID/io unreadable (another user's process:
    needs CAP_SYS_PTRACE ...)"``)."""


def read_proc_file(path: str) -> bytes:
    """The first :data:`_MAX_READ` bytes of ``path`` (raises ``OSError``). Unbuffered: a
    process's threads cost two small files each, every cycle, and a Python file object costs
    more than the reading."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        chunks: list[bytes] = []
        size = 0
        while size < _MAX_READ:
            chunk = os.read(fd, _MAX_READ - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def parse_stat(data: bytes) -> tuple[str, int, int, int, int | None] | None:
    """(state, utime+stime ticks, threads, start ticks, delayacct blkio ticks or ``None``) of a
    ``/proc/PID/stat`` line; ``None`` when it is not one. The command name may hold spaces and
    parentheses, so the fields are counted from its last ``)``."""
    end = data.rfind(b")")
    if end < 0:
        return None
    rest = data[end + 1:].split()
    try:
        state = rest[0].decode("ascii", "replace")
        cpu = int(rest[11]) + int(rest[12])
        threads = int(rest[17])
        start = int(rest[19])
        blkio = int(rest[39]) if len(rest) > 39 else None
    except (IndexError, ValueError):
        return None
    return state, cpu, threads, start, blkio


def parse_pairs(data: bytes) -> dict[str, int]:
    """The ``key: value`` (``/proc/PID/io``) or ``key value`` (``cpu.stat``) lines of a file;
    lines whose value is not a whole number are skipped."""
    out: dict[str, int] = {}
    for line in data.splitlines():
        parts = line.replace(b":", b" ", 1).split()
        if len(parts) == 2:
            try:
                out[parts[0].decode("ascii", "replace")] = int(parts[1])
            except ValueError:
                continue
    return out


def cgroup_cpu_stat(data: bytes, cgroup_root: str | CgroupTree) -> str | None:
    """The ``cpu.stat`` path of the process's own cgroup (:func:`cgroup_cpu_levels`'s first),
    ``None`` when there is none (or it cannot be placed)."""
    tree = cgroup_root if isinstance(cgroup_root, CgroupTree) else CgroupTree(own_root=cgroup_root)
    levels = cgroup_cpu_levels(data, tree)[0]
    return levels[0] if levels else None


def parse_throttling(data: bytes) -> tuple[int, int] | None:
    """(``nr_periods``, ``nr_throttled``) of a ``cpu.stat`` (v2, and v1's ``cpu``
    controller); ``None`` when it has neither (no CPU bandwidth controller)."""
    values = parse_pairs(data)
    if "nr_periods" in values and "nr_throttled" in values:
        return values["nr_periods"], values["nr_throttled"]
    return None


FIND_CGROUP = object()


def _thread_group(base: str) -> int | None:
    """``Tgid`` of ``/proc/PID/status``: the process ``PID`` is a thread of (``None``:
    unreadable)."""
    try:
        data = read_proc_file(os.path.join(base, "status"))
    except OSError:
        return None
    start = data.find(b"\nTgid:")
    if start < 0:
        return None
    try:
        return int(data[start + 6:data.find(b"\n", start + 6)].strip() or b"x")
    except ValueError:
        return None


def _start_ticks(base: str) -> int | None:
    """The start time in ``stat`` of the process at ``base`` now (``None``: it is gone)."""
    try:
        parsed = parse_stat(read_proc_file(os.path.join(base, "stat")))
    except OSError:
        return None
    return None if parsed is None else parsed[3]


def read_process(pid: int, proc_root: str = "/proc",
                 cgroup_root: str | CgroupTree = "/sys/fs/cgroup",
                 delayacct: bool = False, thread_states: bool = True,
                 cpu_stat: object = FIND_CGROUP, tgid: int | None = None,
                 cache: MutableMapping[str, object] | None = None) -> ProcessReading | None:
    """The counters of process ``pid`` now, or ``None`` when it is gone (or ``stat`` is not a
    process's). ``delayacct``: whether the kernel keeps delay accounting (else its ticks are 0
    whatever the process waited, and are reported ``None``). ``thread_states``: whether to
    read each thread (its state and its own waits: the costly part, two files per thread;
    else the main thread's waits alone). ``cpu_stat``: the ``cpu.stat`` paths of the cgroup
    and its ancestors when already known (:attr:`ProcessReading.cgroup_levels`; a path alone
    is the cgroup's own; ``None`` or ``()``: it has none), else found from
    ``/proc/PID/cgroup`` on ``cgroup_root`` (this process's ``/sys/fs/cgroup``, or the
    :class:`allsmi.hostactivity.cgrouptree.CgroupTree` that places it: a cgroup it cannot
    place is :data:`allsmi.hostactivity.cgroupcpu.UNRESOLVED`, not measured, and a
    problem says why); ``tgid``, the process ``pid`` belongs to when already known, else read
    from ``/proc/PID/status``; ``cache``, the cgroup files already read this cycle. A process
    that ends while it is read (or whose pid another process takes meanwhile) is ``None`` like
    one already gone, never a reading half of one process and half of nothing."""
    base = os.path.join(proc_root, str(pid))
    try:
        parsed = parse_stat(read_proc_file(os.path.join(base, "stat")))
    except OSError:
        return None
    if parsed is None:
        return None
    state, cpu, threads, start, blkio = parsed
    problems: list[str] = []
    if tgid is None:
        tgid = _thread_group(base)
    failed = False
    blocked, seen, complete = None, 0, False
    counters: dict[int, tuple[int, int | None, int | None]] | None = None
    runnable = None
    if thread_states:
        found = read_threads(base, read_proc_file, parse_stat, delayacct, schedstat=True)
        if found is None or not found.seen:
            failed = True
            problems.append(f"/proc/{pid}/task unreadable")
        else:
            blocked, seen, complete = found.blocked, found.seen, found.complete
            counters = found.counters
            runnable = counters.get(pid, (0, None, None))[2]
            if not complete:
                problems.append(f"/proc/{pid}/task: {found.listed} threads, {found.seen} read "
                                "(the others' I/O wait unknown)")
    io: dict[str, int] = {}
    try:
        io = parse_pairs(read_proc_file(os.path.join(base, "io")))
    except PermissionError:
        problems.append(f"/proc/{pid}/io unreadable (another user's process: needs "
                        "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, as root has outside a container)")
    except OSError as exc:
        failed = True
        problems.append(f"/proc/{pid}/io unreadable ({exc.strerror or exc})")
    if counters is None:  # the main thread's waits alone
        try:
            sched = read_proc_file(os.path.join(base, "schedstat")).split()
            runnable = int(sched[0]) + int(sched[1])
        except OSError:
            failed = True  # no CONFIG_SCHED_INFO (the CPU time alone decides), or gone
        except (IndexError, ValueError):
            pass
        counters = {pid: (start, blkio if delayacct else None, runnable)}
    levels: tuple[str, ...] = ()
    try:
        if cpu_stat is FIND_CGROUP:
            tree = cgroup_root if isinstance(cgroup_root, CgroupTree) else \
                CgroupTree(proc_root, cgroup_root)
            levels, why = cgroup_cpu_levels(read_proc_file(os.path.join(base, "cgroup")), tree)
            if why is not None:  # not measured: never taken for no limit
                levels = (UNRESOLVED,)
                problems.append(f"/proc/{pid}/cgroup: CPU throttling unknown: {why}")
        elif isinstance(cpu_stat, str):
            levels = (cpu_stat,)
        elif isinstance(cpu_stat, tuple):
            levels = cpu_stat
    except OSError as exc:
        failed = True  # throttling stays unknown, and not measured
        levels = (UNRESOLVED,)
        problems.append(f"/proc/{pid}/cgroup unreadable ({exc.strerror or exc}): CPU "
                        "throttling unknown")
    throttling, own_failed = read_levels(levels, read_proc_file, parse_throttling, cache)
    failed = failed or own_failed
    own = throttling[0] if throttling and levels and throttling[0][0] == levels[0] else None
    if (failed or tgid is None) and _start_ticks(base) != start:
        return None  # it ended (or its pid went to another process) while it was read
    return ProcessReading(
        pid=pid, start_ticks=start, state=state, cpu_ticks=cpu, threads=threads,
        blocked_threads=blocked, threads_seen=seen, blkio_ticks=blkio if delayacct else None,
        thread_counters=counters, threads_complete=complete,
        read_chars=io.get("rchar"), write_chars=io.get("wchar"),
        disk_read_bytes=io.get("read_bytes"), disk_write_bytes=io.get("write_bytes"),
        runnable_ns=runnable, cgroup=levels[0] if levels and levels[0] != UNRESOLVED else None,
        cgroup_levels=levels,
        cpu_levels=throttling, cpu_periods=own[1] if own else None,
        throttled_periods=own[2] if own else None, tgid=tgid, problems=tuple(problems))


def delay_accounting(proc_root: str = "/proc") -> bool:
    """Whether the kernel keeps per-task delay accounting (``kernel.task_delayacct``, 5.14+;
    older kernels keep it when booted with ``delayacct``, which this cannot tell: off)."""
    try:
        return read_proc_file(os.path.join(proc_root, "sys", "kernel", "task_delayacct")).strip() == b"1"
    except OSError:
        return False

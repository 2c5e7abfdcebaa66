"""One holder process's host counters at one moment, from ``/proc`` (Linux).

Read for the processes that hold a device only (never a walk of ``/proc``): ``stat`` (state,
CPU ticks, threads, start time, delay-accounting block-I/O ticks), the threads' ``stat`` files
(how many are in uninterruptible sleep, ``D``), ``io`` (bytes read and written) and ``cgroup``
with the cgroup's ``cpu.stat`` (CPU throttling). Each file that cannot be read leaves its
figures ``None`` and says why in :attr:`ProcessReading.problems`; nothing here raises.

``/proc/PID/io`` of another user's process needs ``CAP_SYS_PTRACE`` and ``CAP_DAC_READ_SEARCH``
(or ``CAP_DAC_OVERRIDE``), which root has unless they were dropped (a container's root lacks
``CAP_SYS_PTRACE``): an exporter without them cannot read it, and says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

#: Threads of one process whose states are read (a process may have thousands): the rest are
#: not looked at, and :attr:`ProcessReading.threads_seen` says how many were.
MAX_THREADS = 256
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
    """Threads in uninterruptible sleep (``D``) now, among :attr:`threads_seen`."""
    threads_seen: int = 0
    blkio_ticks: int | None = None
    """Delay accounting's block-I/O wait of the main thread (``delayacct_blkio_ticks``: the
    kernel writes the leader's own, not its threads'), when the kernel keeps it."""
    read_chars: int | None = None
    """Bytes the process read through ``read()`` and friends (files, pipes, sockets): ``rchar``."""
    write_chars: int | None = None
    disk_read_bytes: int | None = None
    """Bytes it caused to be fetched from storage: ``read_bytes``."""
    disk_write_bytes: int | None = None
    runnable_ns: int | None = None
    """Main thread's time on a CPU plus time waiting for one (``/proc/PID/schedstat``), in
    nanoseconds: a thread that wants a CPU all the time is CPU-bound even where an
    oversubscribed node gives it little."""
    cgroup: str | None = None
    """The ``cpu.stat`` file of its cgroup (v2, or v1's ``cpu`` controller), when found."""
    cpu_periods: int | None = None
    """The cgroup's CPU-limit enforcement periods so far (``cpu.stat`` ``nr_periods``)."""
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
    with open(path, "rb") as handle:
        return handle.read(_MAX_READ)


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


def cgroup_cpu_stat(data: bytes, cgroup_root: str) -> str | None:
    """The ``cpu.stat`` path of the cgroup a ``/proc/PID/cgroup`` names: the v2 (``0::``) one
    when its file exists, else v1's ``cpu`` controller. The kernel writes each hierarchy once
    and cgroup names unescaped: a name holding a newline (which whoever may create cgroups can
    give) makes lines of its own, so a file naming a hierarchy or a controller twice, or with
    a line that is not ``ID:CONTROLLERS:/PATH``, names no cgroup (``None``: throttling
    unknown), never one the name chose."""
    v1 = None
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
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and not controllers:
            candidate = os.path.join(cgroup_root, path.lstrip("/"), "cpu.stat")
            if os.path.exists(candidate):
                return candidate
        elif "cpu" in controllers.split(","):
            for name in (controllers, "cpu,cpuacct", "cpu"):
                candidate = os.path.join(cgroup_root, name, path.lstrip("/"), "cpu.stat")
                if os.path.exists(candidate):
                    v1 = candidate
                    break
    return v1


def parse_throttling(data: bytes) -> tuple[int, int] | None:
    """(``nr_periods``, ``nr_throttled``) of a ``cpu.stat`` (v2, and v1's ``cpu``
    controller); ``None`` when it has neither (no CPU bandwidth controller)."""
    values = parse_pairs(data)
    if "nr_periods" in values and "nr_throttled" in values:
        return values["nr_periods"], values["nr_throttled"]
    return None


def _blocked_threads(base: str) -> tuple[int | None, int]:
    """(threads in ``D`` state, threads looked at) of the process at ``base``."""
    try:
        tids = os.listdir(os.path.join(base, "task"))
    except OSError:  # (the process ended, or /proc hides it: read_process tells which)
        return None, 0
    blocked = seen = 0
    for tid in tids[:MAX_THREADS]:
        try:
            data = read_proc_file(os.path.join(base, "task", tid, "stat"))
        except OSError:
            continue  # the thread ended meanwhile
        end = data.rfind(b")")
        if end >= 0:
            seen += 1
            blocked += data[end + 2:end + 3] == b"D"
    return (blocked if seen else None), seen


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


def read_process(pid: int, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup",
                 delayacct: bool = False, thread_states: bool = True,
                 cpu_stat: object = FIND_CGROUP, tgid: int | None = None
                 ) -> ProcessReading | None:
    """The counters of process ``pid`` now, or ``None`` when it is gone (or ``stat`` is not a
    process's). ``delayacct``: whether the kernel keeps delay accounting (else its ticks are 0
    whatever the process waited, and are reported ``None``). ``thread_states``: whether to
    read each thread's state (the costly part: one file per thread). ``cpu_stat``: the
    cgroup's ``cpu.stat`` path when already known (``None``: it has none), else found from
    ``/proc/PID/cgroup``; ``tgid``, the process ``pid`` belongs to when already known, else read
    from ``/proc/PID/status``. A process that ends while it is read (or whose pid another
    process takes meanwhile) is ``None`` like one already gone, never a reading half of one
    process and half of nothing."""
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
    blocked, seen = _blocked_threads(base) if thread_states else (None, 0)
    failed = blocked is None and thread_states
    if failed:
        problems.append(f"/proc/{pid}/task unreadable")
    io: dict[str, int] = {}
    try:
        io = parse_pairs(read_proc_file(os.path.join(base, "io")))
    except PermissionError:
        problems.append(f"/proc/{pid}/io unreadable (another user's process: needs "
                        "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, as root has outside a container)")
    except OSError as exc:
        failed = True
        problems.append(f"/proc/{pid}/io unreadable ({exc.strerror or exc})")
    runnable = None
    try:
        sched = read_proc_file(os.path.join(base, "schedstat")).split()
        runnable = int(sched[0]) + int(sched[1])
    except OSError:
        failed = True  # a kernel without CONFIG_SCHED_INFO (the CPU time alone decides), or gone
    except (IndexError, ValueError):
        pass
    throttling = None
    try:
        if cpu_stat is FIND_CGROUP:
            cpu_stat = cgroup_cpu_stat(read_proc_file(os.path.join(base, "cgroup")), cgroup_root)
        if isinstance(cpu_stat, str):
            throttling = parse_throttling(read_proc_file(cpu_stat))
    except OSError:
        failed = True
        cpu_stat = cpu_stat if isinstance(cpu_stat, str) else None  # throttling stays unknown
    if (failed or tgid is None) and _start_ticks(base) != start:
        return None  # it ended (or its pid went to another process) while it was read
    return ProcessReading(
        pid=pid, start_ticks=start, state=state, cpu_ticks=cpu, threads=threads,
        blocked_threads=blocked, threads_seen=seen, blkio_ticks=blkio if delayacct else None,
        read_chars=io.get("rchar"), write_chars=io.get("wchar"),
        disk_read_bytes=io.get("read_bytes"), disk_write_bytes=io.get("write_bytes"),
        runnable_ns=runnable, cgroup=cpu_stat if isinstance(cpu_stat, str) else None,
        cpu_periods=throttling[0] if throttling else None,
        throttled_periods=throttling[1] if throttling else None, tgid=tgid,
        problems=tuple(problems))


def delay_accounting(proc_root: str = "/proc") -> bool:
    """Whether the kernel keeps per-task delay accounting (``kernel.task_delayacct``, 5.14+;
    older kernels keep it when booted with ``delayacct``, which this cannot tell: off)."""
    try:
        return read_proc_file(os.path.join(proc_root, "sys", "kernel", "task_delayacct")).strip() == b"1"
    except OSError:
        return False

"""A holder process's threads: their states and their own wait counters, and the interval's
waits summed over a changing set of threads.

``/proc/PID/stat``'s ``delayacct_blkio_ticks`` and ``/proc/PID/schedstat`` are the main
thread's own (the kernel writes the leader's there, not the process's): a data-loader thread
blocked on I/O, or waiting for a CPU, shows only in its own ``/proc/PID/task/TID/stat`` and
``/proc/PID/task/TID/schedstat``. :func:`read_threads` reads each thread's ``stat`` once, for
its state and its block-I/O wait together, and its ``schedstat``; :func:`summed_delta` adds up
the interval's wait thread by thread (docs/activity.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Mapping

#: Threads of one process that are read (a process may have thousands). Past it the reading
#: is partial: a state of none of the read threads in ``D`` is then unknown, not "none in I/O
#: wait" (the threads not read could be), and their waits add nothing. Each thread costs two
#: small files (``stat``, ``schedstat``): about 20 µs, so 1024 threads about 20 ms a cycle
#: (docs/activity.md, "Cost").
MAX_THREADS = 1024

#: Per thread id: (start ticks, ``delayacct_blkio_ticks`` or ``None``, ns on a CPU plus ns
#: waiting for one or ``None``). The start tells a reused thread id from the same thread.
ThreadCounters = Mapping[int, tuple[int, "int | None", "int | None"]]


@dataclass(frozen=True)
class ThreadsReading:
    """What the threads of one process said at one moment."""

    blocked: int | None
    """Threads in uninterruptible sleep (``D``) among those read; ``None`` when none were read,
    or when the reading is partial and none of those read was in ``D``."""
    seen: int
    """Threads read."""
    listed: int
    """Threads the ``task`` directory listed (``seen`` plus those not read or ended)."""
    counters: dict[int, tuple[int, int | None, int | None]]
    complete: bool
    """Whether every listed thread was read (none left out by :data:`MAX_THREADS`)."""


def read_threads(base: str, read: Callable[[str], bytes],
                 parse: Callable[[bytes], tuple[str, int, int, int, int | None] | None],
                 delayacct: bool, schedstat: bool, limit: int | None = None
                 ) -> ThreadsReading | None:
    """The threads of the process at ``base`` (``None``: its ``task`` directory is unreadable).
    Threads are read main thread first, then in the order of their ids, so that a process
    past the limit is read as the same threads from one cycle to the next.
    ``delayacct``: whether the kernel keeps delay accounting (else the block-I/O ticks are
    ``None``); ``schedstat``: whether to read each thread's ``schedstat``."""
    task = os.path.join(base, "task")
    try:
        names = os.listdir(task)
    except OSError:  # (the process ended, or /proc hides it: the caller tells which)
        return None
    leader = os.path.basename(base)
    tids = sorted((int(n) for n in names if n.isdigit()), key=lambda t: (str(t) != leader, t))
    bound = MAX_THREADS if limit is None else limit
    blocked = 0
    counters: dict[int, tuple[int, int | None, int | None]] = {}
    for tid in tids[:bound]:
        where = os.path.join(task, str(tid))
        try:
            parsed = parse(read(os.path.join(where, "stat")))
        except OSError:
            continue  # the thread ended meanwhile
        if parsed is None:
            continue
        runnable = None
        if schedstat:
            try:
                sched = read(os.path.join(where, "schedstat")).split()
                runnable = int(sched[0]) + int(sched[1])
            except (OSError, IndexError, ValueError):
                pass  # it ended meanwhile: its wait is not counted
        blocked += parsed[0] == "D"
        counters[tid] = (parsed[3], parsed[4] if delayacct else None, runnable)
    complete = len(tids) <= bound
    seen = len(counters)
    known = seen and (complete or blocked)
    return ThreadsReading(blocked if known else None, seen, len(tids), counters, complete)


def summed_delta(now: ThreadCounters, before: ThreadCounters, before_complete: bool,
                 index: int) -> tuple[int | None, int]:
    """(the change of counter ``index`` (1: block-I/O ticks, 2: runnable ns) over the interval,
    summed over the threads, ``None`` when no thread gives one; how many threads add nothing).

    Each thread's change is taken from its own two values (the same id and start in both
    readings). A thread only in ``now`` started in the interval when ``before`` read every
    thread: its counters (0 when it started) are all the interval's; otherwise it was not
    read before, and adds nothing. A thread only in ``before`` ended in the interval: its wait
    since then is unknown, and it adds nothing. So does a counter unreadable in either
    reading, or lower than before. The sum is then a part of the process's wait: a lower
    bound, never an invented or negative figure."""
    total, known, unmeasured = 0, False, 0
    for tid, values in now.items():
        old = before.get(tid)
        new_value = values[index]
        if old is not None and old[0] == values[0]:
            old_value = old[index]
            if new_value is None or old_value is None or new_value < old_value:
                unmeasured += 1
                continue
            total += new_value - old_value
        elif before_complete and new_value is not None:
            total += new_value  # (a thread id reused meanwhile: the old thread ended)
            unmeasured += old is not None
        else:
            unmeasured += 1 + (old is not None)
            continue
        known = True
    unmeasured += sum(1 for tid, old in before.items()
                      if tid not in now)  # (a reused id's old thread is counted above)
    return (total if known else None), unmeasured

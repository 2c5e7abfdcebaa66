"""Whether a holder below the idle threshold was quiet (docs/activity.md): each signal read,
none busy. :func:`not_quiet` says why not, the first signal unread or in between; the waiting
rule (:mod:`allsmi.collection.waiting`) calls a holder ``nothing`` only when it says nothing.
"""

from __future__ import annotations

from typing import Sequence

from .sampler import NodeActivity, ProcessActivity
from .settings import ActivitySettings


def rate_text(rate: float) -> str:
    """Bytes per second, in the evidence's words (``480 MB/s``)."""
    if rate >= 1e10:
        return f"{rate / 1e9:.0f} GB/s"
    return f"{rate / 1e6:.0f} MB/s" if rate >= 1e6 else f"{rate / 1e3:.0f} kB/s"


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, plural unless one (``3 processes``)."""
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('s') else 's'}"


def in_io_wait(a: ProcessActivity, s: ActivitySettings) -> bool:
    """Whether a process was in I/O wait: a thread of it in uninterruptible sleep when read,
    or its block-I/O wait (delay accounting) ``input_delay_fraction`` of the interval or more."""
    return bool(a.blocked_threads) or (a.blocked_fraction is not None
                                       and a.blocked_fraction >= s.input_delay_fraction)


def cpu_bound(a: ProcessActivity) -> float:
    """How CPU-bound a process was: its CPU time per second, or (where the node's CPUs are
    oversubscribed and give it less) its threads' time on a CPU or waiting for one, summed,
    as a share of the interval."""
    return max(a.cpu_cores or 0.0, a.runnable_fraction or 0.0)


def not_quiet(seen: Sequence[ProcessActivity], reads: Sequence[float | None], link: float | None,
             ib: float | None, node: NodeActivity, s: ActivitySettings, blocked: int = 0,
             unread: int = 0,
             link_directions: tuple[float | None, float | None] | None = None) -> str:
    """Why the holder cannot be called idle: the first signal unread or not quiet ("" none).
    ``link``: the device's interconnect bytes per second, rx plus tx of what is known;
    ``link_directions``: (rx, tx) it was made of, each of which must be known to call the
    links quiet."""
    if unread:  # what it did is unknown: the others' quiet says nothing of it
        return (f"{plural(unread, 'process')} of the holder's {len(seen) + unread} could not be "
                "read (ended, or hidden from this exporter)")
    if any(a.cpu_cores is None for a in seen):  # a process's problem, else a new process
        return next((a.problems[0] for a in seen if a.cpu_cores is None and a.problems),
                    "no measurement interval yet")
    if any(r is None for r in reads):
        problem = next((p for a in seen for p in a.problems if "/io" in p), "")
        return problem or "read rates unknown"
    if any(a.blocked_threads is None for a in seen):  # (not read, or past the thread limit)
        return next((p for a in seen for p in a.problems if "task" in p),
                    "its threads' states were not read")
    if blocked:  # some in I/O wait, too few for input: neither input nor idle
        return (f"{blocked} of {plural(len(seen), 'process')} in I/O wait (under "
                f"{s.input_blocked_fraction * 100:.0f} % of them)")
    unmeasured = sum(a.threads_unmeasured for a in seen)
    if unmeasured:  # their I/O and CPU waits unknown: the others' quiet says nothing of theirs
        return (f"threads' waits partly measured ({plural(unmeasured, 'thread')} started, "
                "ended or not read in the interval)")
    cpu = max(cpu_bound(a) for a in seen)
    if cpu >= s.quiet_cpu_fraction:
        return f"a process {cpu * 100:.0f} % on or waiting for a CPU (neither idle nor CPU-bound)"
    partly = [a for a in seen if a.throttling_unmeasured]
    unplaced = next((p for a in partly for p in a.problems if "/cgroup" in p), None)
    if unplaced:  # its cgroup not found: its limit, or one above it, may have throttled it
        return (f"cgroup CPU throttling not measured for {len(partly)} of "
                f"{plural(len(seen), 'process')} ({unplaced})")
    if partly:  # a level not measured may be the one whose limit throttled it (a pod's)
        throttled = max((a.throttled_fraction for a in partly if a.throttled_fraction is not None),
                        default=None)
        so_far = "" if throttled is None else f"; {throttled * 100:.0f} % where measured"
        return (f"cgroup CPU throttling partly measured for {len(partly)} of "
                f"{plural(len(seen), 'process')} (a cgroup level unreadable, new, reset, past "
                f"the level limit or above this exporter's cgroup namespace{so_far})")
    if link is not None and link_directions is not None and None in link_directions:
        # one direction quiet says nothing of the other (a GPM NVLink metric that failed)
        unknown = "received" if link_directions[0] is None else "sent"
        return f"device links' {unknown} bytes not reported"
    # the node's InfiniBand/RoCE, which makes a holder communication whatever its device's
    # links (inter-node traffic does not cross them): quiet only where measured
    links = "device links not reported" if link is None else "device links quiet"
    if node.infiniband_ports and (node.infiniband_rx_bytes_per_second is None
                                  or node.infiniband_tx_bytes_per_second is None):
        return (f"node InfiniBand/RoCE traffic not measured ({node.infiniband_ports} "
                f"port(s): new, reset or saturated; {links})")
    if node.infiniband_unmeasured:  # (the others' quiet says nothing of theirs)
        return (f"node InfiniBand/RoCE traffic partly measured ({node.infiniband_unmeasured}"
                f" port(s) new, gone, reset, saturated or without byte counters; {links})")
    if link is None:  # no links of its own: its network must be quiet too
        rx, tx = node.network_rx_bytes_per_second, node.network_tx_bytes_per_second
        if rx is None or tx is None:  # and its network must both be quiet
            return "device links and node network not reported" if ib is None \
                else "node network not reported (device links not reported)"
        if rx + tx >= s.communication_bytes_per_second:
            return f"node network at {rate_text(rx + tx)} (device links not reported)"
        if node.network_unmeasured:
            return (f"node network partly measured ({node.network_unmeasured} interface(s) "
                    "new, gone or reset; device links not reported)")
    return ""

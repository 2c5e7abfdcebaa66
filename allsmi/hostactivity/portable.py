"""The host readers through psutil, where ``/proc`` does not serve (macOS, the BSDs, Windows).

The same readings as :mod:`allsmi.hostactivity.procfs` and :mod:`allsmi.hostactivity.node`,
with what psutil has on the platform: CPU time, threads, the process's state (``disk-sleep``
counts as I/O wait), its I/O counters where the platform keeps them, and the node's network
bytes. Thread states, run-queue waits, cgroups, pressure stall information and InfiniBand are
Linux's and stay ``None`` here, which the classification then says.
"""

from __future__ import annotations

from typing import Any

from .node import NodeReading
from .procfs import ProcessReading

#: Ticks per second of the readings made here (psutil gives seconds).
TICKS = 100


def read_process_psutil(pid: int) -> ProcessReading | None:
    """The counters of process ``pid`` through psutil, or ``None`` when it is gone."""
    import psutil
    try:
        proc: Any = psutil.Process(pid)
        with proc.oneshot():
            times = proc.cpu_times()
            threads = proc.num_threads()
            status = proc.status()
            start = int(proc.create_time() * TICKS)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return None
    problems: list[str] = []
    io: Any = None
    try:
        io = proc.io_counters()
    except psutil.AccessDenied:
        problems.append(f"I/O counters of process {pid} unreadable (another user's process: "
                        "needs root)")
    except (AttributeError, NotImplementedError, psutil.Error):
        problems.append("this platform keeps no per-process I/O counters")
    blocked = 1 if status == psutil.STATUS_DISK_SLEEP else 0
    return ProcessReading(
        pid=pid, tgid=pid, start_ticks=start, state=status,
        cpu_ticks=int((times.user + times.system) * TICKS),
        threads=threads, blocked_threads=blocked, threads_seen=1,
        read_chars=getattr(io, "read_chars", getattr(io, "read_bytes", None)),
        write_chars=getattr(io, "write_chars", getattr(io, "write_bytes", None)),
        disk_read_bytes=getattr(io, "read_bytes", None),
        disk_write_bytes=getattr(io, "write_bytes", None), problems=tuple(problems))


def read_node_psutil() -> NodeReading:
    """The node's network bytes per interface (and CPU times) through psutil."""
    import psutil
    network: dict[str, tuple[int, int]] = {}
    try:
        for name, counters in psutil.net_io_counters(pernic=True).items():
            if name == "lo" or name.startswith(("lo0", "veth", "docker", "br-", "virbr")):
                continue
            network[name] = (counters.bytes_recv, counters.bytes_sent)
    except (OSError, psutil.Error):
        pass
    cpu: Any = psutil.cpu_times()
    ticks = tuple(float(getattr(cpu, name, 0.0)) * TICKS for name in
                  ("user", "nice", "system", "idle", "iowait"))
    return NodeReading(cpu_ticks=ticks, network=network,
                       problems=("no pressure stall information or InfiniBand counters off "
                                 "Linux",))

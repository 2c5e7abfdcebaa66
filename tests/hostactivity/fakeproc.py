"""Fake /proc and /sys trees for the host readers' tests."""

from __future__ import annotations

import os
from pathlib import Path

from allsmi.hostactivity.cgrouptree import CgroupTree
from allsmi.support.pidns import PROC_PID_INIT_INO


def pid_namespace(proc: Path, inode: int = PROC_PID_INIT_INO) -> None:
    """``proc/1/ns/pid`` naming PID namespace ``inode`` as the kernel's link does
    (``pid:[N]``): by default the initial one's, whose pids are those the drivers report."""
    ns = proc / "1" / "ns"
    ns.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(ns / "pid"):
        (ns / "pid").unlink()
    (ns / "pid").symlink_to(f"pid:[{inode}]")


#: The cgroup of a fake process unless told (v2, without the CPU controller: no limit).
DEFAULT_CGROUP = "0::/job.slice\n"


def stat_line(pid: int, state: str = "S", utime: int = 0, stime: int = 0, threads: int = 1,
              start: int = 1000, blkio: int | None = 0, comm: str = "python") -> str:
    """A /proc/PID/stat line with the fields the readers use (52 fields, as Linux 5.x)."""
    fields = ["0"] * 50
    fields[0] = state            # 3: state
    fields[11], fields[12] = str(utime), str(stime)  # 14, 15
    fields[17] = str(threads)    # 20: num_threads
    fields[19] = str(start)      # 22: starttime
    if blkio is None:
        fields = fields[:39]     # an old kernel: no delayacct_blkio_ticks
    else:
        fields[39] = str(blkio)  # 42: delayacct_blkio_ticks
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


def write_process(root: Path, pid: int, *, state: str = "S", cpu: int = 0, threads: int = 1,
                  blocked: int = 0, start: int = 1000, blkio: int | None = 0,
                  io: dict[str, int] | None = None, cgroup: str | None = DEFAULT_CGROUP,
                  comm: str = "python", sched: tuple[int, int] | None = None,
                  tgid: int | None = None) -> Path:
    """A fake /proc/PID; ``tgid``: write its ``status`` naming the process it is a thread of
    (``pid`` for a process's own), as the kernel does (its ``Name`` escaped)."""
    base = root / "proc" / str(pid)
    (base / "task").mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(root / "proc" / "1" / "ns" / "pid"):
        pid_namespace(root / "proc")
    (base / "stat").write_text(stat_line(pid, state, cpu, 0, threads, start, blkio, comm))
    for i in range(threads):  # the main thread's waits are the process's stat's and schedstat's
        tid = base / "task" / str(pid + i)
        tid.mkdir(exist_ok=True)
        (tid / "stat").write_text(stat_line(pid + i, "D" if i < blocked else "S", start=start,
                                            blkio=blkio if i == 0 else 0, comm=comm))
        if sched is not None:
            (tid / "schedstat").write_text(f"{sched[0]} {sched[1]} 10\n" if i == 0 else "0 0 0\n")
    if io is not None:
        (base / "io").write_text("".join(f"{k}: {v}\n" for k, v in io.items()))
    if cgroup is not None:
        (base / "cgroup").write_text(cgroup)
    if cgroup == DEFAULT_CGROUP and not (root / "sys" / "fs" / "cgroup" / "job.slice").exists():
        write_cgroup(root, "job.slice", "usage_usec 0\n")  # (it exists, as the kernel's do)
    if tgid is not None:
        name = comm.replace("\\", "\\\\").replace("\n", "\\n")
        (base / "status").write_text(f"Name:\t{name}\nUmask:\t0022\nState:\t{state}\n"
                                     f"Tgid:\t{tgid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t1\n")
    if sched is not None:  # ns on a CPU, ns waiting for one, timeslices
        (base / "schedstat").write_text(f"{sched[0]} {sched[1]} 10\n")
    return base


def write_node(root: Path, *, iowait: int = 0, total: int = 1000, psi_io_usec: int | None = 0,
               net: dict[str, tuple[int, int]] | None = None,
               ib: dict[str, tuple[int, int]] | None = None) -> None:
    proc = root / "proc"
    proc.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(proc / "1" / "ns" / "pid"):
        pid_namespace(proc)
    busy = total - iowait
    (proc / "stat").write_text(f"cpu  {busy} 0 0 0 {iowait} 0 0 0 0 0\ncpu0 1 0 0 0 0 0 0 0 0 0\n")
    if psi_io_usec is not None:
        (proc / "pressure").mkdir(exist_ok=True)
        for kind in ("cpu", "io", "memory"):
            value = psi_io_usec if kind == "io" else 0
            (proc / "pressure" / kind).write_text(
                f"some avg10=0.00 avg60=0.00 avg300=0.00 total={value}\n"
                f"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    for name, (rx, tx) in (net or {}).items():
        stats = root / "sys" / "class" / "net" / name / "statistics"
        stats.mkdir(parents=True, exist_ok=True)
        (stats / "rx_bytes").write_text(f"{rx}\n")
        (stats / "tx_bytes").write_text(f"{tx}\n")
    for name, (rx, tx) in (ib or {}).items():
        counters = root / "sys" / "class" / "infiniband" / name / "ports" / "1" / "counters"
        counters.mkdir(parents=True, exist_ok=True)
        (counters / "port_rcv_data").write_text(f"{rx}\n")
        (counters / "port_xmit_data").write_text(f"{tx}\n")


def write_cgroup(root: Path, path: str, text: str) -> None:
    where = root / "sys" / "fs" / "cgroup" / path.lstrip("/")
    where.mkdir(parents=True, exist_ok=True)
    (where / "cpu.stat").write_text(text)


def real_cgroups(root: Path, *pids: int) -> CgroupTree:
    """A cgroup tree under ``root`` holding the cgroups this machine's processes ``pids`` are
    in (v2's, and v1's ``cpu`` hierarchy), none with a CPU limit, read as the host's: the tests
    of real processes (which are about something else) then read their cgroups there, whatever
    cgroup namespace the suite runs in."""
    for pid in pids:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            hierarchy, controllers, path = line.split(":", 2)
            if hierarchy == "0" and not controllers:
                write_cgroup(root, path, "usage_usec 0\n")
            elif "cpu" in controllers.split(","):
                write_cgroup(root, f"{controllers}/{path.lstrip('/')}", "usage_usec 0\n")
    return CgroupTree(str(root / "no-proc"), str(root / "sys" / "fs" / "cgroup"))

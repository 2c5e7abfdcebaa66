"""Whether the pids of a ``/proc`` tree are the host's: those the device drivers report.

The kernel drivers know processes by their pid in the initial (host) PID namespace, and so do
NVML, amdsmi and the NPU tools. A ``/proc`` mounted for another PID namespace (allsmi in a
container without ``hostPID: true`` or ``--pid=host``) shows that namespace's pids: a driver's
pid there names another process, or none. Its ``cgroup``, ``stat`` and ``io`` are then someone
else's, so what is read per pid there is withheld (unknown), never attributed to the wrong
holder. A procfs shows the PID namespace of whoever mounted it, not the reader's: told here
from the tree itself, in this order:

1. ``ROOT/1/ns/pid``: its init's namespace is the tree's; the initial one's inode is fixed
   (``PROC_PID_INIT_INO``). Reading it needs ptrace access to pid 1 (root with
   ``CAP_SYS_PTRACE``, or a full capability set);
2. else ``ROOT/self/ns/pid``, this process's own namespace, always readable: the initial one
   means the tree is the initial one's (a process of the initial namespace is shown in no
   other namespace's tree). Another one: the tree is the initial one's where it shows kernel
   threads (pid 2, ``kthreadd``, is one only there: a host ``/proc`` mounted into a
   container at ``/host/proc``), else not;
3. a ``self`` link that leads nowhere: this process is not in the tree's namespace, which is
   then not the initial one; a ``self`` without ``ns``: a kernel without PID namespaces (one
   namespace, the host's);
4. anything else (no ``self``, a test's fake tree): cannot tell, and what it cannot tell is
   treated as not the host's.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

#: The inode of the initial PID namespace (``PROC_PID_INIT_INO``, ``include/linux/proc_ns.h``).
PROC_PID_INIT_INO = 0xEFFFFFFC
#: ``PF_KTHREAD`` of ``/proc/PID/stat``'s flags (field 9): a kernel thread.
PF_KTHREAD = 0x00200000
#: What to do about it, in every message that withholds a reading.
FIX = ("run allsmi in the host's PID namespace (Kubernetes: hostPID: true; "
       "docker: --pid=host)")


class PidView(NamedTuple):
    """Whether the pids of :attr:`proc_root` are the host's (``host``: ``None`` when it cannot
    be told), and how that was told or why not (``detail``)."""

    proc_root: str
    host: bool | None
    detail: str

    @property
    def problem(self) -> str | None:
        """Why per-pid readings under :attr:`proc_root` are withheld (``None``: they are not)."""
        if self.host:
            return None
        what = "is not" if self.host is False else "cannot be told to be"
        return (f"{self.proc_root} {what} the host's PID namespace ({self.detail}): the device "
                f"drivers report host pids, which there name other processes or none; {FIX}")


def namespace_inode(link: str) -> int | None:
    """The inode of a ``pid:[N]`` namespace link (raises ``OSError``); ``None`` when it is
    not one."""
    match = re.fullmatch(r"pid:\[(\d+)\]", os.readlink(link))
    return int(match.group(1)) if match else None


def kernel_thread(proc_root: str, pid: int = 2) -> bool:
    """Whether ``pid`` under ``proc_root`` is a kernel thread (``False``: unreadable)."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as handle:
            data = handle.read(4096)
        return bool(int(data[data.rindex(b")") + 1:].split()[6]) & PF_KTHREAD)
    except (OSError, ValueError, IndexError):
        return False


def pid_view(proc_root: str = "/proc") -> PidView:
    """Whether the pids under ``proc_root`` are the host's (the module's docstring says how)."""
    root = str(proc_root)
    initial = f"pid:[{PROC_PID_INIT_INO}]"
    try:
        ino = namespace_inode(os.path.join(root, "1", "ns", "pid"))
        if ino is not None:
            return PidView(root, ino == PROC_PID_INIT_INO,
                           f"{root}/1/ns/pid is pid:[{ino}]"
                           + ("" if ino == PROC_PID_INIT_INO else f", not the initial {initial}"))
        first = f"{root}/1/ns/pid is not a namespace link"
    except OSError as exc:
        first = f"{root}/1/ns/pid unreadable ({exc.strerror or exc})"
    self_link = os.path.join(root, "self")
    try:
        ino = namespace_inode(os.path.join(self_link, "ns", "pid"))
    except OSError:
        ino = None
        if os.path.islink(self_link) and not os.path.exists(self_link):
            return PidView(root, False, f"{first}; this process is not in its PID namespace "
                                        f"({root}/self leads nowhere)")
        if os.path.islink(self_link) and os.path.isdir(self_link) \
                and not os.path.lexists(os.path.join(self_link, "ns", "pid")):
            return PidView(root, True, f"{first}; a kernel without PID namespaces")
    if ino == PROC_PID_INIT_INO:
        return PidView(root, True, f"{first}; this process is in the initial PID namespace")
    if ino is None:
        return PidView(root, None, f"{first}; no {root}/self/ns/pid")
    if kernel_thread(root):
        return PidView(root, True, f"{first}; this process is in pid:[{ino}], and {root} "
                                   "shows kernel threads: the initial PID namespace")
    return PidView(root, False, f"{first}; this process is in pid:[{ino}], not the initial "
                                f"{initial}, and {root} shows no kernel thread")

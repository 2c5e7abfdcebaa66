"""Local facts about the processes ``rbln-smi`` lists: owner, and which RBLN nodes they hold.

Both lookups are best effort: a pid that does not exist here (another pid
namespace, already exited) or that we may not inspect gives ``None``.
"""

from __future__ import annotations

import os
import re

_NODE = re.compile(r"^/dev/(rbln\d+)$")


def process_user(pid: int) -> str | None:
    """The user name owning ``pid`` on this host, or ``None``."""
    import psutil  # imported here so that loading the backend stays cheap

    try:
        return psutil.Process(pid).username()
    except (psutil.Error, OSError, ValueError, OverflowError, KeyError):
        # KeyError: a uid with no passwd entry (common inside containers).
        return None


def rbln_nodes_opened_by(pid: int, proc_root: str = "/proc") -> frozenset[str] | None:
    """Kernel names (``"rbln3"``) of the ``/dev/rblnN`` nodes ``pid`` holds open.

    ``None`` when the process's descriptors cannot be read (no ``/proc``, no
    such pid, or another user's process without the privilege to look).
    """
    fd_dir = os.path.join(proc_root, str(pid), "fd")
    try:
        entries = os.listdir(fd_dir)
    except OSError:
        return None
    nodes: set[str] = set()
    for entry in entries:
        try:
            target = os.readlink(os.path.join(fd_dir, entry))
        except OSError:
            continue  # closed between listdir and readlink
        match = _NODE.match(target)
        if match:
            nodes.add(match.group(1))
    return frozenset(nodes)

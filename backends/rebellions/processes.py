"""Which device each ``rbln-smi`` context (process) runs on, with its memory in bytes.

A context names its device only by ``npu``, and ``npu`` is *not* unique: under
load the tool numbers devices per workload, so a node running four jobs prints
``npu`` 0 four times (see ``fixtures/rebellions/README.md``). A context is
placed by the first rule that gives exactly one device:

1. a ``device`` (``rblnN``) or ``uuid`` key, if a tool version prints one;
2. the only device with that ``npu``;
3. the only candidate whose ``/dev/rblnN`` node the (local) process holds open;
4. the listing order: the tool prints the devices of each workload together,
   ``npu`` counting 0, 1, 2... from each workload's first device, in the
   order the contexts list their processes. When the listing splits into such
   runs, the contexts' pids (in order of first appearance) map one-to-one to
   the first runs, every context's ``npu`` exists in its run, and the rule
   agrees with every context rule 2 placed, the k-th pid's contexts go to the
   k-th run.

Anything still ambiguous is left unattributed, with a warning, rather than
guessed. Memory of several contexts of one pid on one device is summed.
Owners come from :mod:`allsmi.backends._common.owners`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from allsmi.schema import units
from allsmi.schema import ProcessSample

from allsmi.backends._common.cells import index_key, int_cell, shorten, text_of

LookupUser = Callable[[int], "str | None"]
LookupNodes = Callable[[int], "frozenset[str] | None"]

#: Largest pid any supported OS hands out (Linux caps pid_max at 2**22).
_MAX_PID = 2**31 - 1
_NODE = re.compile(r"^/dev/(rbln[0-9]+)\Z")  # not \d: it takes digits of other scripts too
_PREVIEW_CHARS = 80


class DieLike(Protocol):
    """What attribution needs of a parsed device row."""

    position: int
    id: str
    uuid: str | None
    kernel_name: str | None
    npu: int | str | None
    processes: tuple[ProcessSample, ...]


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


@dataclass
class _ProcessTotal:
    """Contexts of one pid on one die, summed (one process may hold several)."""

    command: str | None = None
    memory_bytes: int = 0
    memory_known: bool = True
    #: the contexts' ``util_info`` (percent of the die) summed; unknown if one lacks it
    utilization: float = 0.0
    utilization_known: bool = True


@dataclass(frozen=True)
class _Context:
    position: int
    pid: int
    npu: int | str | None
    raw: Mapping[str, Any]
    memory_bytes: int | None


def _read_contexts(contexts: list[Any], warnings: list[str]) -> list[_Context]:
    found = []
    for position, ctx in enumerate(contexts):
        label = f"context row {position}"
        if not isinstance(ctx, dict):
            warnings.append(f"{label}: not an object ({shorten(repr(ctx), _PREVIEW_CHARS)}); skipped")
            continue
        pid = int_cell(ctx.get("pid"))
        if pid is None or not 0 < pid <= _MAX_PID:
            warnings.append(f"{label}: unreadable pid {ctx.get('pid')!r}; skipped")
            continue
        raw_memory = ctx.get("memalloc", ctx.get("memory"))
        memory = units.parse_size_bytes(raw_memory)
        if memory is not None and memory < 0:
            memory = None
        if memory is None and not units.is_missing(raw_memory):
            warnings.append(f"{label} (pid {pid}): unreadable memalloc {raw_memory!r}; "
                            "memory reported as unknown")
        found.append(_Context(position, pid, index_key(ctx.get("npu")), ctx, memory))
    return found


def _listing_runs(dies: Sequence[DieLike]) -> list[list[DieLike]] | None:
    """The device listing cut where ``npu`` restarts at 0; ``None`` if it does not count 0, 1, 2..."""
    runs: list[list[DieLike]] = []
    for die in sorted(dies, key=lambda d: d.position):
        if not isinstance(die.npu, int):
            return None
        if die.npu == 0:
            runs.append([die])
        elif runs and runs[-1][-1].npu == die.npu - 1:
            runs[-1].append(die)
        else:
            return None
    return runs


def _by_listing_order(contexts: Sequence[_Context], dies: Sequence[DieLike],
                      by_npu: Mapping[int | str, list[DieLike]]) -> dict[tuple[int, int | str], DieLike]:
    """Rule 4 of the module docstring: ``(pid, npu) -> die``, or empty when it does not hold."""
    runs = _listing_runs(dies)
    if not runs:
        return {}
    order: list[int] = []
    for ctx in contexts:
        if ctx.pid not in order:
            order.append(ctx.pid)
    if len(order) > len(runs):
        return {}
    placed: dict[tuple[int, int | str], DieLike] = {}
    for pid, run in zip(order, runs):
        by_position = {d.npu: d for d in run}
        for ctx in contexts:
            if ctx.pid != pid:
                continue
            die = by_position.get(ctx.npu) if ctx.npu is not None else None
            if die is None:
                return {}
            unique = by_npu.get(ctx.npu, []) if ctx.npu is not None else []
            if len(unique) == 1 and unique[0] is not die:
                return {}
            placed[(pid, ctx.npu)] = die  # type: ignore[index]
    return placed


def attribute_contexts(contexts: object, dies: Sequence[DieLike], lookup_user: LookupUser,
                       lookup_nodes: LookupNodes, warnings: list[str]) -> None:
    """Set each die's ``processes`` from the report's ``contexts`` (see the module docstring)."""
    if contexts is None:
        return
    if not isinstance(contexts, list):
        warnings.append(f"'contexts' is {type(contexts).__name__}, not a list; no processes read")
        return
    rows = _read_contexts(contexts, warnings)
    by_kernel = {d.kernel_name: d for d in dies if d.kernel_name}
    by_uuid = {d.uuid: d for d in dies if d.uuid}
    by_npu: dict[int | str, list[DieLike]] = {}
    for die in dies:
        if die.npu is not None:
            by_npu.setdefault(die.npu, []).append(die)
    listing: dict[tuple[int, int | str], DieLike] | None = None

    totals: dict[tuple[str, int], _ProcessTotal] = {}
    unattributed: list[str] = []
    nodes_cache: dict[int, frozenset[str] | None] = {}
    for ctx in rows:
        die, why = _resolve(ctx, by_kernel, by_uuid, by_npu, lookup_nodes, nodes_cache)
        if die is None and why.startswith("npu") and "matches" in why:
            if listing is None:
                listing = _by_listing_order(rows, dies, by_npu)
            die = listing.get((ctx.pid, ctx.npu)) if ctx.npu is not None else None
        if die is None:
            unattributed.append(f"pid {ctx.pid}: {why}")
            continue
        total = totals.setdefault((die.id, ctx.pid), _ProcessTotal())
        total.command = total.command or text_of(ctx.raw.get("process")) or text_of(ctx.raw.get("cmd"))
        if ctx.memory_bytes is None:
            total.memory_known = False
        else:
            total.memory_bytes += ctx.memory_bytes
        util = units.parse_percent(ctx.raw.get("util_info"))
        if util is None:
            total.utilization_known = False
        else:
            total.utilization += util

    if unattributed:
        shown = "; ".join(unattributed[:3]) + ("; ..." if len(unattributed) > 3 else "")
        warnings.append(f"{len(unattributed)} process context(s) not attributed to a device ({shown})")

    users: dict[int, str | None] = {}
    per_die: dict[str, list[ProcessSample]] = {}
    for (die_id, pid), total in sorted(totals.items(), key=lambda item: item[0][1]):
        if pid not in users:
            users[pid] = lookup_user(pid)
        per_die.setdefault(die_id, []).append(ProcessSample(
            pid=pid, user=users[pid], command=total.command,
            memory_bytes=total.memory_bytes if total.memory_known else None,
            utilization_percent=min(100.0, total.utilization) if total.utilization_known
            else None))
    for die in dies:
        die.processes = tuple(per_die.get(die.id, ()))


def _resolve(ctx: _Context, by_kernel: Mapping[str, DieLike], by_uuid: Mapping[str, DieLike],
             by_npu: Mapping[int | str, list[DieLike]], lookup_nodes: LookupNodes,
             nodes_cache: dict[int, frozenset[str] | None]) -> tuple[DieLike | None, str]:
    kernel = text_of(ctx.raw.get("device"))
    if kernel is not None:
        return by_kernel.get(kernel), f"device {kernel!r} not in the device list"
    uuid = text_of(ctx.raw.get("uuid"))
    if uuid is not None:
        return by_uuid.get(uuid), f"uuid {uuid!r} not in the device list"
    if ctx.npu is None:
        return None, "no npu, device or uuid"
    candidates = by_npu.get(ctx.npu, [])
    if len(candidates) == 1:
        return candidates[0], ""
    if not candidates:
        return None, f"npu {ctx.npu!r} not in the device list"
    if ctx.pid not in nodes_cache:
        nodes_cache[ctx.pid] = lookup_nodes(ctx.pid)
    nodes = nodes_cache[ctx.pid]
    if nodes:
        held = [d for d in candidates if d.kernel_name in nodes]
        if len(held) == 1:
            return held[0], ""
    return None, f"npu {ctx.npu!r} matches {len(candidates)} devices"

"""Processes holding an Intel GPU, from DRM fdinfo (the kernel's ``drm-usage-stats``).

For every open file of a process that is a DRM node (``<proc>/<pid>/fd/<n>`` links to
``/dev/dri/...``), ``<proc>/<pid>/fdinfo/<n>`` has ``key: value`` lines:

* ``drm-driver: i915|xe``, ``drm-pdev: 0000:4d:00.0`` (the GPU), ``drm-client-id: 17`` (one
  client may be open through several descriptors: counted once);
* engine time: i915 ``drm-engine-<class>: <ns> ns`` (busy nanoseconds, a counter) with
  ``drm-engine-capacity-<class>: <n>`` engines of that class; xe ``drm-cycles-<class>: <n>`` and
  ``drm-total-cycles-<class>: <n>`` (the client's cycles summed over the class's engines, and
  the GPU's clock: the share is their ratio over the class's capacity);
* memory: ``drm-total-<region>: <n> KiB`` and ``drm-resident-<region>: <n> KiB`` per memory
  region (``local0``/``vram0``: the GPU's own memory; ``system``: host memory).

A process's engine share is its busiest engine class's share between two readings (in percent
of that class's capacity); its memory is what it holds resident in device-local regions.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

_SIZE = re.compile(r"^([0-9]+)\s*(|B|KiB|MiB|GiB)\Z")  # not \d: it takes other scripts' digits
_SCALE = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
_LOCAL = ("local", "vram")


@dataclass
class Client:
    """One DRM client of one process on one GPU."""

    pid: int
    pdev: str
    client_id: str
    engine_ns: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, int] = field(default_factory=dict)
    total_cycles: dict[str, int] = field(default_factory=dict)
    local_bytes: int | None = None


def _size(text: str) -> int | None:
    match = _SIZE.match(text.strip())
    return int(match.group(1)) * _SCALE[match.group(2)] if match else None


def parse_fdinfo(pid: int, text: str, drivers: tuple[str, ...], fd: str = "") -> Client | None:
    """One fdinfo file (of descriptor ``fd``); ``None`` unless it is a DRM client of ``drivers``
    with a PCI device. A client without ``drm-client-id`` (which the kernel's format requires) is
    known by its descriptor, the same from one sample to the next."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    if values.get("drm-driver") not in drivers or not values.get("drm-pdev"):
        return None
    client = Client(pid, values["drm-pdev"].lower(), values.get("drm-client-id", f"fd:{fd}"))
    resident: dict[str, int] = {}
    total: dict[str, int] = {}
    for key, value in values.items():
        if key.startswith("drm-engine-capacity-"):
            if value.isdecimal():
                client.capacity[key[len("drm-engine-capacity-"):]] = int(value)
        elif key.startswith("drm-engine-"):
            number = value.split()[0] if value else ""
            if number.isdecimal():
                client.engine_ns[key[len("drm-engine-"):]] = int(number)
        elif key.startswith("drm-total-cycles-"):
            if value.isdecimal():
                client.total_cycles[key[len("drm-total-cycles-"):]] = int(value)
        elif key.startswith("drm-cycles-"):
            if value.isdecimal():
                client.cycles[key[len("drm-cycles-"):]] = int(value)
        elif key.startswith(("drm-resident-", "drm-total-")):
            region = key.split("-", 2)[2]
            size = _size(value)
            if size is not None and region.startswith(_LOCAL):
                (resident if key.startswith("drm-resident-") else total)[region] = size
    held = resident or total
    client.local_bytes = sum(held.values()) if held else None
    return client


def scan(proc: str, drivers: tuple[str, ...]) -> list[Client]:
    """Every DRM client of ``drivers`` that this user may read under ``proc`` (another user's
    processes are unreadable without privileges: they are missing, never guessed). Raises
    ``OSError`` when ``proc`` itself cannot be listed (no process is known then)."""
    clients: dict[tuple[int, str, str], Client] = {}
    pids = [int(p) for p in os.listdir(proc) if p.isdecimal()]
    for pid in pids:
        fd_dir = os.path.join(proc, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if not os.readlink(os.path.join(fd_dir, fd)).startswith("/dev/dri/"):
                    continue
                with open(os.path.join(proc, str(pid), "fdinfo", fd), encoding="ascii",
                          errors="replace") as handle:
                    text = handle.read(65536)
            except OSError:
                continue
            client = parse_fdinfo(pid, text, drivers, fd)
            if client is not None:
                clients.setdefault((pid, client.pdev, client.client_id), client)
    return list(clients.values())


def engine_share(before: Client | None, now: Client, wall_seconds: float) -> float | None:
    """The client's busiest engine class between two readings, in percent (``None`` without a
    usable earlier reading)."""
    if before is None or wall_seconds <= 0:
        return None
    shares = []
    # Both counters are summed over the class's engines (i915's ns, xe's cycles): divided by
    # the class's capacity, a client keeping one of four compute engines busy is at 25 %.
    for engine, ns in now.engine_ns.items():
        old = before.engine_ns.get(engine)
        if old is not None and ns >= old:
            shares.append(100.0 * (ns - old) / (wall_seconds * 1e9) / _capacity(now, engine))
    for engine, cycles in now.cycles.items():
        old, total, old_total = (before.cycles.get(engine), now.total_cycles.get(engine),
                                 before.total_cycles.get(engine))
        if None not in (old, total, old_total) and total > old_total and cycles >= old:  # type: ignore[operator]
            shares.append(100.0 * (cycles - old) / (total - old_total)  # type: ignore[operator]
                          / _capacity(now, engine))
    return min(100.0, max(shares)) if shares else None


def _capacity(client: Client, engine: str) -> int:
    """``drm-engine-capacity-<class>``: how many engines the class's counter sums (1 without it)."""
    return max(1, client.capacity.get(engine, 1))

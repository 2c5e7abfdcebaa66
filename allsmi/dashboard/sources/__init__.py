"""Where the dashboard's snapshots come from.

A *source* hands the app the current state of one or more hosts. Reading
it (:meth:`Source.hosts`) is cheap and never blocks, so the UI thread can
call it on a timer. Anything slow (network fetches) happens in
:meth:`Source.refresh`, which the app runs in a thread worker, one call at
a time. The local node's collector already samples in its own thread, so
its :meth:`NodeSource.refresh` has nothing to do.

Sources take an injectable monotonic ``clock`` so tests can freeze the age
of the data that the screen shows.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence

from allsmi.schema import Snapshot

Clock = Callable[[], float]


def shared_devices(pairs: Iterable[tuple[str, str]]) -> dict[str, tuple[int, tuple[str, ...]]]:
    """``(host key, device id)`` pairs -> for each host that reports a device another host reports
    too: how many such devices, and those other hosts (:attr:`HostState.shared`)."""
    hosts_of: dict[str, set[str]] = {}
    for host, ident in pairs:
        hosts_of.setdefault(ident, set()).add(host)
    count: dict[str, int] = {}
    others: dict[str, set[str]] = {}
    for keys in hosts_of.values():
        if len(keys) > 1:
            for key in keys:
                count[key] = count.get(key, 0) + 1
                others.setdefault(key, set()).update(keys - {key})
    return {key: (n, tuple(sorted(others[key]))) for key, n in count.items()}


@dataclass(frozen=True)
class HostState:
    """One host as the dashboard knows it right now."""

    key: str
    """Stable identity within the source: the address (``host:port``, the Prometheus
    instance) in a cluster, the hostname for the local node."""
    name: str
    """The hostname the host reports, once known; else the same as ``key``."""
    snapshot: Snapshot | None
    """The most recent snapshot that arrived (kept while the host is unreachable)."""
    received: float | None
    """Monotonic time at which ``snapshot`` arrived; ``None`` before the first one."""
    address: str | None = None
    """Where it is fetched from (URL or Prometheus instance); ``None`` for the local node."""
    error: str | None = None
    """Why the last attempt failed; ``None`` while the host answers."""
    retry_at: float | None = None
    """Monotonic time of the next attempt while failing."""
    problems: tuple[str, ...] = ()
    """What was wrong in the host's last answer (values nulled or left out), for the screen."""
    process_details: bool | None = None
    """``False`` when the host does not export process command lines and users."""
    answered: tuple[int, int] | None = None
    """(polls answered, polls asked) over the last few, when the host both answered and failed
    among them (it is flapping); ``None`` otherwise."""
    summary: Any = None
    """The host's totals (:class:`allsmi.dashboard.state.model.Totals`) when its source computes them
    without sending every device (a large fleet through Prometheus); ``None`` otherwise."""
    shared: int = 0
    """How many of this host's devices (by id) another host of the source reports too: one node
    read twice (``allsmi serve`` and a textfile snapshot through node_exporter, or two addresses
    of one node), so every total counts them twice."""
    shared_with: tuple[str, ...] = ()
    """Those other hosts, where the source knows them."""

    @property
    def reachable(self) -> bool:
        """Whether the last attempt succeeded."""
        return self.error is None

    def age(self, now: float) -> float | None:
        """Seconds since the data arrived, or ``None`` before the first snapshot."""
        return None if self.received is None else max(0.0, now - self.received)


class Source(Protocol):
    """What :class:`allsmi.dashboard.screen.app.DashboardApp` reads."""

    interval: float
    """Seconds between refreshes."""
    cluster: bool
    """Whether this is a fleet (cluster overview, host column) or one node."""
    fetches: bool
    """Whether :meth:`refresh` does anything (the app then runs refresh rounds)."""

    def hosts(self) -> Sequence[HostState]:
        """The current state of every host; cheap and non-blocking."""

    def refresh(self, cancelled: Callable[[], bool]) -> None:
        """Fetch what is due (may block on I/O; runs in a worker thread, never twice at once).

        Must return soon after ``cancelled()`` turns true.
        """

    def history(self) -> Sequence[tuple[str, Snapshot]]:
        """Snapshots from before the app started (host, snapshot), oldest first."""

    def close(self) -> None:
        """Release connections and threads."""


class CollectorLike(Protocol):
    """The part of :class:`allsmi.collection.collector.Collector` the dashboard uses (duck-typed)."""

    interval: float

    @property
    def latest(self) -> Snapshot | None: ...

    @property
    def history(self) -> tuple[Snapshot, ...]: ...


class NodeSource:
    """The local node, read from a collector that samples in its own thread."""

    cluster = False
    fetches = False
    """No refresh rounds needed: the collector has its own thread."""

    def __init__(self, collector: CollectorLike, clock: Clock = time.monotonic) -> None:
        self.collector = collector
        self.interval = float(collector.interval)
        self.clock = clock
        self._seen: Snapshot | None = None
        self._received: float | None = None

    def hosts(self) -> Sequence[HostState]:
        snap = self.collector.latest
        if snap is None:
            return [HostState("localhost", "localhost", None, None)]
        if snap is not self._seen:
            self._seen, self._received = snap, self.clock()
        return [HostState(snap.host.hostname, snap.host.hostname, snap, self._received)]

    def refresh(self, cancelled: Callable[[], bool]) -> None:
        """Nothing to do: the collector samples on its own thread."""

    def subscribe(self, callback: Callable[[], None]) -> bool:
        """Call ``callback()`` on the collector's thread after each of its cycles, so the app
        reads each snapshot as it is made instead of polling for it; ``False`` (and nothing
        subscribed) when the collector offers no such hook."""
        subscribe = getattr(self.collector, "subscribe", None)
        if subscribe is None:
            return False
        subscribe(lambda _snapshot: callback())
        return True

    def history(self) -> Sequence[tuple[str, Snapshot]]:
        return [(s.host.hostname, s) for s in self.collector.history]

    def close(self) -> None:
        """The collector belongs to the caller, who closes it."""


class StaticSource:
    """Fixed snapshots stepped by hand: deterministic screens for tests and demos.

    ``frames`` is a list of frames; each frame maps a host name to its
    snapshot, or to an error message for an unreachable host. :meth:`advance`
    moves to the next frame (the last one stays).
    """

    def __init__(self, frames: Sequence[dict[str, Snapshot | str]], *, interval: float = 1.0,
                 cluster: bool = False, clock: Clock = time.monotonic) -> None:
        if not frames:
            raise ValueError("StaticSource needs at least one frame")
        self.frames = list(frames)
        self.interval = interval
        self.cluster = cluster
        self.clock = clock
        self.position = 0
        self._last_good: dict[str, tuple[Snapshot, float]] = {}
        self._lock = threading.Lock()
        self.refreshes = 0
        self.fetches = True
        self._remember()

    @classmethod
    def of(cls, snapshots: Sequence[Snapshot], **kwargs: Any) -> "StaticSource":
        """One host whose snapshots are shown one after the other."""
        return cls([{s.host.hostname: s} for s in snapshots], **kwargs)

    def _remember(self) -> None:
        for host, value in self.frames[self.position].items():
            if isinstance(value, Snapshot):
                self._last_good[host] = (value, self.clock())

    def advance(self) -> None:
        """Show the next frame."""
        with self._lock:
            if self.position < len(self.frames) - 1:
                self.position += 1
                self._remember()

    def hosts(self) -> Sequence[HostState]:
        with self._lock:
            out = []
            for host, value in self.frames[self.position].items():
                good = self._last_good.get(host)
                snap, received = good if good else (None, None)
                error = value if isinstance(value, str) else None
                name = snap.host.hostname if snap is not None else host
                out.append(HostState(host, name, snap, received,
                                     address=host if self.cluster else None, error=error))
            return out

    def refresh(self, cancelled: Callable[[], bool]) -> None:
        self.refreshes += 1

    def history(self) -> Sequence[tuple[str, Snapshot]]:
        return []

    def close(self) -> None:
        """Nothing to release."""

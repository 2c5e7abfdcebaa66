"""Rendering the exposition once per collection cycle and handing out the bytes.

:class:`Exposition` subscribes to the collector. On every snapshot it updates
the counters and renders the text format (0.0.4) and OpenMetrics once; a
scrape only picks the prepared bytes (gzipped lazily, once, on first demand).
So a scrape never calls a vendor library, its latency does not depend on the
hardware, and a hundred concurrent scrapers cost no more hardware calls than
one.

:class:`SnapshotMetrics` is the prometheus_client custom collector: stateless,
it builds fresh metric families from the state it is given, so vanished
devices vanish from the output on their own.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from prometheus_client.registry import Collector

from allsmi import __version__
from allsmi.exporter.counters import UsageCounters
from allsmi.exporter.families import BackendCounter, CounterValues, build_families
from allsmi.exporter.textformat import LabelBlocks, render_openmetrics, render_text
from allsmi.schema import Snapshot

log = logging.getLogger(__name__)

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"
#: An encoding (gzip, JSON) asked for within this long is prepared every cycle.
WARM_FOR_SECONDS = 600.0


class SnapshotMetrics(Collector):
    """A custom collector over one snapshot and the counters accumulated so far.

    It keeps nothing between calls: every :meth:`collect` builds new families
    from the arguments given at construction.
    """

    def __init__(self, snapshot: Snapshot, *, counters: Mapping[str, CounterValues] | None = None,
                 backend_counters: Mapping[str, BackendCounter] | None = None,
                 backends_shown: Iterable[str] | None = None,
                 declared_groups: Mapping[str, Mapping[str, str]] | None = None,
                 processes: bool = False) -> None:
        self.snapshot = snapshot
        self.options: dict[str, Any] = dict(
            counters=counters, backend_counters=backend_counters,
            backends_shown=None if backends_shown is None else frozenset(backends_shown),
            declared_groups=declared_groups, processes=processes)

    def collect(self) -> Iterable[Any]:
        """Fresh metric families for the snapshot."""
        return build_families(self.snapshot, version=__version__, **self.options)


def render_snapshot(snapshot: Snapshot, *, processes: bool = False) -> str:
    """The text-format (0.0.4) exposition of one snapshot.

    Info, gauges, resource groups and backend families. Counter families are
    omitted: one snapshot has no interval to count over, and a counter at 0
    would read as "used no energy". ``allsmi serve`` exports them.
    """
    return render_text(SnapshotMetrics(snapshot, processes=processes).collect()).decode("utf-8")


@dataclass
class Rendered:
    """The exposition of one collection cycle, in both formats; gzip made on first demand."""

    snapshot: Snapshot
    text: bytes
    openmetrics: bytes
    _cache: dict[str, bytes] = field(default_factory=dict)
    _asked: set[tuple[str, bool]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def body(self, *, openmetrics: bool, gzipped: bool) -> bytes:
        """The bytes every scraper asking for this format and encoding gets."""
        return self._asked_for("openmetrics" if openmetrics else "text", gzipped)

    def snapshot_json(self, *, gzipped: bool = False) -> bytes:
        """``allsmi.output.to_json`` of the snapshot, rendered once on first demand."""
        return self._asked_for("json", gzipped)

    def encodings(self) -> list[tuple[str, bool]]:
        """(kind, gzipped) of every encoding a request asked for."""
        return sorted(self._asked)

    def _asked_for(self, kind: str, gzipped: bool) -> bytes:
        self._asked.add((kind, gzipped))
        return self._encoded(kind, gzipped)

    def warm(self, encodings: list[tuple[str, bool]]) -> None:
        """Make these encodings now rather than on the next request."""
        for kind, gzipped in encodings:
            self._encoded(kind, gzipped)

    def _plain(self, kind: str) -> bytes:
        if kind == "text":
            return self.text
        if kind == "openmetrics":
            return self.openmetrics
        from allsmi.output import to_json
        return to_json(self.snapshot).encode("utf-8")

    def _encoded(self, kind: str, gzipped: bool) -> bytes:
        key = kind + (".gz" if gzipped else "")
        cached = self._cache.get(key)
        if cached is None:
            plain = self._encoded(kind, False) if gzipped else b""
            with self._lock:  # concurrent first requests encode once, not once each
                cached = self._cache.get(key)
                if cached is None:
                    cached = gzip.compress(plain, compresslevel=6, mtime=0) if gzipped \
                        else self._plain(kind)
                    self._cache[key] = cached
        return cached


class Exposition:
    """Keeps the latest rendered exposition; feed it with :meth:`on_snapshot`."""

    def __init__(self, *, processes: bool = False, max_gap_seconds: float | None = None,
                 declared_groups: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.processes = processes
        self.counters = UsageCounters() if max_gap_seconds is None else UsageCounters(max_gap_seconds)
        self.declared_groups = dict(declared_groups or {})
        self._current: Rendered | None = None
        self._ready = threading.Event()
        self._wanted: dict[tuple[str, bool], float] = {}

    @property
    def current(self) -> Rendered | None:
        """The latest exposition, or ``None`` before the first collection cycle."""
        return self._current

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the first exposition exists (or ``timeout``)."""
        return self._ready.wait(timeout)

    def metrics(self, snapshot: Snapshot) -> SnapshotMetrics:
        """The custom collector over ``snapshot`` and the counters as they stand."""
        return SnapshotMetrics(snapshot, counters=self.counters.devices(),
                               backend_counters=self.counters.backends(),
                               backends_shown=self.counters.backends_present(),
                               declared_groups=self.declared_groups, processes=self.processes)

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Account for ``snapshot`` and render it (the collector calls this once per cycle)."""
        self.counters.update(snapshot)
        families = list(self.metrics(snapshot).collect())
        blocks = LabelBlocks()  # each device's label block is escaped once for both formats
        rendered = Rendered(snapshot, render_text(families, blocks),
                            render_openmetrics(families, blocks))
        previous = self._current
        now = time.monotonic()
        if previous is not None:
            for encoding in previous.encodings():
                self._wanted[encoding] = now
        # Encodings requested recently (gzip, JSON) are made here, on the collector's
        # thread, so that no scraper waits ~20 ms for the gzip of a 1.7 MB exposition.
        for encoding, asked in list(self._wanted.items()):
            if now - asked > WARM_FOR_SECONDS:
                del self._wanted[encoding]
        rendered.warm(list(self._wanted))
        self._current = rendered  # one reference swap: readers see the old or the new, whole
        self._ready.set()

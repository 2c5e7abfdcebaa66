"""Rendering the exposition at most once per scrape and handing out the bytes.

:class:`Exposition` subscribes to the collector. On every snapshot it updates
the counters (the integrals need every cycle) and keeps the snapshot; the text
format (0.0.4) is rendered only when someone asks (a scrape, ``/ready`` or
``/api/v1/snapshot``), once per collection cycle however many ask, from the
latest snapshot and the counters as they stand. OpenMetrics, gzip and the
snapshot's JSON are made once per cycle on first demand too. An exporter
nobody scrapes renders nothing (rendering was most of an idle exporter's own
CPU: issue 36), and one scraped every 15 s renders once in 15 cycles. Once
every cycle is being asked for (:data:`AHEAD_AFTER` in a row), each is rendered
ahead on the collector's thread with the encodings asked for, so that a scrape
only picks prepared bytes; renders never outnumber requests by more than one.
A scrape never calls a vendor library, its latency does not depend on the
hardware, and a hundred concurrent scrapers cost no more hardware calls, and
no more rendering, than one.

:class:`SnapshotMetrics` is the prometheus_client custom collector: stateless,
it builds fresh metric families from the state it is given, so vanished
devices vanish from the output on their own.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from prometheus_client.registry import Collector

from allsmi import __version__
from allsmi.exporter.builder import (BackendCounter, CounterValues, ExporterHealth, GroupPrice,
                                     build_families, exporter_families)
from allsmi.exporter.counters import UsageCounters
from allsmi.exporter.holders import DEFAULT_MAX_HOLDER_SERIES, HolderKey, HolderValues
from allsmi.exporter.textformat import LabelBlocks, render_openmetrics, render_text
from allsmi.schema import Snapshot
from allsmi.usage import DEFAULT_IDLE_THRESHOLD_PERCENT, DEFAULT_MAX_GAP_SECONDS

log = logging.getLogger(__name__)

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"
#: A cycle is rendered ahead, on the collector's thread, once this many cycles in a row were
#: each asked for (scrapers as frequent as the cycles: every cycle would be rendered anyway,
#: and a scrape then only picks prepared bytes); otherwise on its first request. So renders
#: never outnumber requests by more than one.
AHEAD_AFTER = 2
#: ``/ready`` turns 503 when the last whole exposition is older than this (``allsmi serve``
#: sets it to :data:`STALE_PERIODS` collection periods).
DEFAULT_STALE_AFTER_SECONDS = 60.0
#: How many collection periods (``--interval`` plus ``--timeout``, the longest a cycle can
#: take before the next one starts) an exposition may age before ``/ready`` says 503.
STALE_PERIODS = 3


class SnapshotMetrics(Collector):
    """A custom collector over one snapshot and the counters accumulated so far.

    It keeps nothing between calls: every :meth:`collect` builds new families
    from the arguments given at construction.
    """

    def __init__(self, snapshot: Snapshot, *, counters: Mapping[str, CounterValues] | None = None,
                 holder_counters: Mapping[HolderKey, HolderValues] | None = None,
                 backend_counters: Mapping[str, BackendCounter] | None = None,
                 backends_shown: Iterable[str] | None = None,
                 declared_groups: Mapping[str, Mapping[str, str]] | None = None,
                 group_prices: Mapping[str, GroupPrice] | None = None,
                 processes: bool = False,
                 bad_shares: Mapping[tuple[str, str], BackendCounter] | None = None) -> None:
        self.snapshot = snapshot
        self.options: dict[str, Any] = dict(
            counters=counters, holder_counters=holder_counters, backend_counters=backend_counters,
            backends_shown=None if backends_shown is None else frozenset(backends_shown),
            declared_groups=declared_groups, group_prices=group_prices, processes=processes,
            bad_shares=bad_shares)

    def collect(self) -> Iterable[Any]:
        """Fresh metric families for the snapshot."""
        return build_families(self.snapshot, version=__version__, **self.options)


def render_snapshot(snapshot: Snapshot, *, processes: bool = False,
                    group_prices: Mapping[str, GroupPrice] | None = None,
                    declared_groups: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The text-format (0.0.4) exposition of one snapshot.

    Info, gauges, resource groups and backend families; with ``group_prices`` the groups'
    price and budget gauges, as ``allsmi serve`` publishes them. Counter families are
    omitted: one snapshot has no interval to count over, and a counter at 0
    would read as "used no energy". ``allsmi serve`` exports them.
    """
    return render_text(SnapshotMetrics(snapshot, processes=processes, group_prices=group_prices,
                                       declared_groups=declared_groups).collect()).decode("utf-8")


@dataclass
class Rendered:
    """The exposition of one collection cycle, made for its first request: the text format
    rendered, OpenMetrics, gzip and JSON made on first demand (an exporter nobody scrapes with
    OpenMetrics never renders it).

    ``families`` are the metric families both formats are written from, with ``blocks`` the
    label blocks the text format escaped (reused by OpenMetrics). ``complete`` is ``False`` for
    the fallback served when a cycle could not be rendered at all (only the exporter's own
    families).
    """

    snapshot: Snapshot
    text: bytes
    families: list[Any]
    blocks: LabelBlocks | None = None
    processes: bool = False
    complete: bool = True
    _cache: dict[str, bytes] = field(default_factory=dict)
    _asked: set[tuple[str, bool]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def body(self, *, openmetrics: bool, gzipped: bool) -> bytes:
        """The bytes every scraper asking for this format and encoding gets."""
        return self._asked_for("openmetrics" if openmetrics else "text", gzipped)

    def snapshot_json(self, *, gzipped: bool = False) -> bytes:
        """``allsmi.output.to_json`` of the snapshot, rendered once on first demand.

        Users and command lines are withheld (``"process_details": false``)
        unless the exporter publishes processes (``--processes``).
        """
        return self._asked_for("json", gzipped)

    def prepared(self, kind: str, gzipped: bool) -> bool:
        """Whether ``kind`` (``text``, ``openmetrics`` or ``json``) is made already in that
        encoding, so that handing it out costs nothing (the connection loop's thread answers
        only such requests; the others wait for the thread pool)."""
        return kind == "text" and not gzipped or kind + (".gz" if gzipped else "") in self._cache

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
            return render_openmetrics(self.families, self.blocks)
        from allsmi.output import to_json
        return to_json(self.snapshot, process_details=self.processes).encode("utf-8")

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


class NotRendered(Exception):
    """The latest cycle is still to be rendered (:meth:`Exposition.latest` without ``render``)."""


class Exposition:
    """Keeps the counters and the latest snapshot; feed it with :meth:`on_snapshot`, read the
    exposition (rendered on first demand, once per cycle) from :attr:`current`.

    A cycle that cannot be rendered whole is visible, never silent: each failed rendering
    counts in ``allsmi_exporter_render_errors_total`` (as do a snapshot with duplicate device
    ids and a failed counter update, at the cycle); the devices whose families fail are left
    out and the others are served; if nothing can be rendered, only the exporter's own
    families are served. :meth:`readiness` turns false when the newest cycle that rendered
    whole arrived more than ``stale_after_seconds`` ago, or when the ``ledger`` (an
    ``allsmi.accounting.recorder.LedgerRecorder``, read through its attributes only) holds
    intervals it could not write.
    """

    def __init__(self, *, processes: bool = False, max_gap_seconds: float | None = None,
                 declared_groups: Mapping[str, Mapping[str, str]] | None = None,
                 group_prices: Mapping[str, GroupPrice] | None = None,
                 stale_after_seconds: float = DEFAULT_STALE_AFTER_SECONDS,
                 ledger: Any = None, clock: Callable[[], float] = time.monotonic,
                 idle_threshold_percent: float = DEFAULT_IDLE_THRESHOLD_PERCENT,
                 max_holder_series: int = DEFAULT_MAX_HOLDER_SERIES) -> None:
        self.processes = processes
        self.counters = UsageCounters(
            DEFAULT_MAX_GAP_SECONDS if max_gap_seconds is None else max_gap_seconds,
            idle_threshold_percent=idle_threshold_percent, holder_users=processes,
            max_holder_series=max_holder_series)
        self.declared_groups = dict(declared_groups or {})
        self.group_prices = dict(group_prices or {})
        self.stale_after_seconds = stale_after_seconds
        self.ledger = ledger
        self.web_config: Any = None
        """The ``--web-config`` watcher (``allsmi.exporter.webreload.WebConfigWatcher``, read
        through ``last_reload_ok`` only), whose outcome is published; ``None`` without one."""
        self.render_errors = 0
        self.renders = 0
        """Cycles rendered so far (at most one per cycle, only for a request)."""
        self._clock = clock
        self._created = time.time()
        self._whole_at: float | None = None
        # The counters and the snapshot waiting to be rendered change together, under _lock
        # (the collector's thread updates, a request's thread renders).
        self._lock = threading.Lock()
        self._pending: tuple[Snapshot, float] | None = None
        self._rendering = False  # the cycle taken from _pending is being rendered
        self._current: Rendered | None = None
        self._requested = False  # the latest cycle was asked for
        self._streak = 0  # cycles in a row that were asked for
        self._ready = threading.Event()

    @property
    def current(self) -> Rendered | None:
        """The latest cycle's exposition (rendered now if this is its first request), or
        ``None`` before the first collection cycle."""
        self._requested = True
        return self._rendered()

    def latest(self, *, render: bool = True) -> Rendered | None:
        """:attr:`current`; with ``render=False`` it never renders (for the connection loop's
        thread, which a rendering would hold up for every connection) and raises
        :class:`NotRendered` when the latest cycle is still to be rendered."""
        if render:
            return self.current
        self._requested = True
        # _rendering is set before _pending is cleared: one of the two is always seen
        if self._pending is not None or self._rendering:
            raise NotRendered()
        return self._current

    def _rendered(self) -> Rendered | None:
        if self._pending is not None or self._rendering:
            with self._lock:  # a rendering under way ends first: its cycle, not the last one
                pending = self._pending
                if pending is not None:
                    # flagged before the cycle is taken, so that a request reading both
                    # without the lock always sees one of them (and waits for the rendering)
                    self._rendering = True
                    self._pending = None
                    try:
                        self._current = self._render_cycle(*pending)
                    finally:
                        self._rendering = False
        return self._current

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the first collection cycle has arrived (or ``timeout``)."""
        return self._ready.wait(timeout)

    def readiness(self, *, render: bool = True) -> tuple[bool, str]:
        """(ready, why): what ``/ready`` answers (the latest cycle is rendered to know; without
        ``render``, :class:`NotRendered` is raised instead, as by :meth:`latest`)."""
        if self.latest(render=render) is None:
            return False, "no collection cycle has completed yet"
        age = None if self._whole_at is None else self._clock() - self._whole_at
        if age is None or age > self.stale_after_seconds:
            shown = "never rendered" if age is None else f"{age:.1f} s old"
            return False, (f"the exposition is stale ({shown}, limit {self.stale_after_seconds:g} s): "
                           f"{self.render_errors} collection cycle(s) failed to render")
        # Every interval not written yet, from before the attempt until it succeeds (only a
        # first attempt that is going normally is given a few seconds: see
        # LedgerRecorder.unwritten_overdue).
        unwritten = _count(self.ledger, "unwritten_overdue" if hasattr(
            self.ledger, "unwritten_overdue") else "unwritten")
        if unwritten:
            error = getattr(self.ledger, "last_error", None) or "unknown error"
            return False, f"ledger: {unwritten} interval(s) not written yet: {error}"
        return True, "ready"

    def health(self) -> ExporterHealth:
        """The exporter's own counts, as published."""
        ledger = self.ledger
        return ExporterHealth(
            created=self._created, render_errors=self.render_errors,
            holder_overflow_seconds=self.counters.holder_counters.overflow_seconds,
            ledger_write_errors=None if ledger is None else _count(ledger, "write_errors"),
            ledger_unwritten=None if ledger is None else _count(ledger, "unwritten"),
            ledger_dropped=None if ledger is None else _count(ledger, "dropped_intervals"),
            ledger_refused=None if ledger is None else _count(ledger, "refused_intervals"),
            web_config_reloaded=None if self.web_config is None
            else bool(getattr(self.web_config, "last_reload_ok", True)))

    def metrics(self, snapshot: Snapshot) -> SnapshotMetrics:
        """The custom collector over ``snapshot`` and the counters as they stand."""
        return SnapshotMetrics(snapshot, counters=self.counters.devices(),
                               holder_counters=self.counters.holders(),
                               backend_counters=self.counters.backends(),
                               backends_shown=self.counters.backends_present(),
                               declared_groups=self.declared_groups,
                               group_prices=self.group_prices, processes=self.processes,
                               bad_shares=self.counters.bad_shares())

    def _render(self, snapshot: Snapshot) -> Rendered:
        families = list(self.metrics(snapshot).collect())
        families.extend(exporter_families(self.health()))
        blocks = LabelBlocks()  # each device's label block is escaped once for both formats
        return Rendered(snapshot, render_text(families, blocks), families, blocks, processes=self.processes)

    def _render_partial(self, snapshot: Snapshot) -> Rendered:
        """Render without the devices whose families fail; else only the exporter's families."""
        good = []
        for dev in snapshot.devices:
            try:
                self._render(replace(snapshot, devices=(dev,)))
            except Exception:  # noqa: BLE001 - that device is left out, the others served
                log.exception("exposition: device %r left out of this cycle", dev.id)
            else:
                good.append(dev)
        try:
            return self._render(replace(snapshot, devices=tuple(good)))
        except Exception:  # noqa: BLE001
            log.exception("exposition: this collection cycle cannot be rendered; serving only "
                          "the exporter's own metrics")
        families = exporter_families(self.health())
        return Rendered(replace(snapshot, devices=()), render_text(families), families,
                        processes=self.processes, complete=False)

    def _render_cycle(self, snapshot: Snapshot, arrived: float) -> Rendered:
        """Render the cycle that arrived at ``arrived`` (on ``clock``); under ``_lock``."""
        self.renders += 1
        try:
            rendered = self._render(snapshot)
        except Exception:  # noqa: BLE001 - visible as a render error, never silent
            log.exception("exposition: rendering failed; retrying device by device")
            self.render_errors += 1
            rendered = self._render_partial(snapshot)
        if rendered.complete:
            self._whole_at = arrived
        return rendered

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Account for ``snapshot`` and keep it to be rendered on the next request (the
        collector calls this once per cycle)."""
        ids = [d.id for d in snapshot.devices]
        errors = 0
        if len(set(ids)) != len(ids):  # duplicate series would make Prometheus refuse the scrape
            seen: set[str] = set()
            kept = []
            for dev in snapshot.devices:
                if dev.id not in seen:
                    seen.add(dev.id)
                    kept.append(dev)
            log.error("exposition: %d device(s) with a duplicate id left out", len(ids) - len(kept))
            snapshot = replace(snapshot, devices=tuple(kept))
            errors += 1
        with self._lock:
            try:
                self.counters.update(snapshot)
            except Exception:  # noqa: BLE001 - the gauges are still worth serving
                log.exception("exposition: updating the counters failed")
                errors += 1
            self.render_errors += errors
            requested, self._requested = self._requested, False
            self._streak = self._streak + 1 if requested else 0
            previous = self._current
            # one reference swap: a request renders the old cycle or this one, whole
            self._pending = (snapshot, self._clock())
        if self._streak >= AHEAD_AFTER:
            # Scraped every cycle: rendered here, with the encodings the last cycle's scrapers
            # asked for (a 1.7 MB OpenMetrics body takes ~20 ms to gzip), so that no scraper
            # waits for a rendering.
            rendered = self._rendered()
            if rendered is not None and previous is not None:
                try:
                    rendered.warm(previous.encodings())
                except Exception:  # noqa: BLE001 - made again on demand (and fails there, loudly)
                    log.exception("exposition: preparing the snapshot JSON or gzip failed")
        self._ready.set()


def _count(obj: Any, name: str) -> int:
    """An integer attribute of a duck-typed object (0 when absent or not a number)."""
    value = getattr(obj, name, 0) if obj is not None else 0
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

"""The fleet source: every node's exporter series, read from a Prometheus-compatible store
(Prometheus, VictoriaMetrics, Thanos, Mimir).

A refresh asks the store's instant-query API (``/api/v1/query``, :mod:`.promquery`) for what
the screen shows. Always: the totals per host, per resource group and per vendor (read from
the shipped recording rules when loaded, else computed by the store,
:mod:`allsmi.dashboard.sources.promsummary`), the time of each node's last scrape, and the targets
that stopped answering (``up == 0``). Devices: every host's when the fleet has at most
``device_budget`` devices (the whole fleet in the device table, as for ``--hosts``), else only
the hosts the user opened (:meth:`PrometheusSource.focus`), so that a refresh at a thousand
hosts moves kilobytes, not hundreds of megabytes. How many devices each host has comes from
the recorded per-host totals when they exist (no query over every device series), else from
one ``count by (instance)``. Device series are read and checked by :mod:`.promseries`.

What changes slowly is asked on a slower schedule (every :data:`STATIC_SECONDS`): which
instances report the same devices (one node scraped twice) is a join over every device's
identity, asked in the background and shown with its age (:attr:`PrometheusSource.shared_age`).

What Prometheus does not carry stays unknown: host CPU and memory, clock
when not exported, processes unless the exporter runs with ``--processes``.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Sequence

from allsmi.schema import Snapshot
from allsmi.snapshot_parse import MAX_DEVICES, MAX_PROBLEMS

from allsmi.dashboard.sources.fetch import redact
from allsmi.support.nethint import redact_url
from allsmi.schema.text import clean_text
from allsmi.dashboard.state.model import GONE_GRACE_SECONDS
from allsmi.dashboard.sources.promquery import MAX_BODY_BYTES, PrometheusError, Query, answer_vector, instance_matcher, make_query
from allsmi.dashboard.sources.promquery import MAX_WARNINGS, plausible_time, sample_value, spawn
from allsmi.dashboard.sources.promseries import (DEVICE_INFO, DEVICE_UP, GROUP_INFO, LAST_COLLECT, MAX_WORKLOADS, PROCESS_MEMORY,
                         SHARED_DEVICES, VALUE_METRICS, WORKLOAD_INFO, build_snapshots, device_queries, selector)
from allsmi.dashboard.sources.promsummary import GROUPINGS, fleet_totals, recorded_totals
from allsmi.dashboard.sources import Clock, HostState
from allsmi.dashboard.state.totals import Totals

__all__ = ["DEFAULT_DEVICE_BUDGET", "DEVICE_INFO", "DEVICE_UP", "GROUP_INFO", "LAST_COLLECT", "MAX_BODY_BYTES",
           "MAX_WORKLOADS", "PROCESS_MEMORY", "SHARED_DEVICES", "STATIC_SECONDS", "VALUE_METRICS",
           "WORKLOAD_INFO", "PrometheusError", "PrometheusSource", "Query", "answer_vector", "build_snapshots",
           "device_queries", "instance_matcher", "make_query", "selector"]

#: Up to this many devices in the fleet, every host's devices are fetched on each refresh.
DEFAULT_DEVICE_BUDGET = 4096
#: Seconds between two asks for what changes slowly (which instances share devices).
STATIC_SECONDS = 60.0


class PrometheusSource:
    """A fleet read from Prometheus; every ``instance`` with allsmi series is a host."""

    cluster = True
    fetches = True

    def __init__(self, url: str, *, interval: float = 5.0, timeout: float = 10.0,
                 max_backoff: float = 60.0, clock: Clock = time.monotonic,
                 query: Query | None = None, device_budget: int = DEFAULT_DEVICE_BUDGET,
                 ca_file: str | None = None) -> None:
        self.url = redact_url(url.rstrip("/"), keep_user=False)
        """The server's address as shown (credentials replaced by ``***``)."""
        self.interval = interval
        self.timeout = timeout
        self.max_backoff = max_backoff
        self.clock = clock
        self.device_budget = device_budget
        self._query = query or make_query(url, ca_file)
        self._lock = threading.Lock()
        self._states: dict[str, HostState] = {}
        self._error: str | None = None
        self._failures = 0
        self._retry_at: float | None = None
        self._focus: frozenset[str] = frozenset()
        self._totals: dict[str, dict[str, Totals]] = {}
        self._missing_since: dict[str, float] = {}
        """Instances Prometheus stopped answering for: dropped after the grace."""
        self.detailed = True
        """Whether the last refresh fetched every host's devices (the fleet fits the budget)."""
        self._shared: dict[str, int] = {}
        self._shared_at: float | None = None
        self._shared_started = 0.0
        self._shared_future: "Future[Any] | None" = None
        self._warned: dict[str, None] = {}
        """Warnings of the answers to this refresh's queries (a partial answer), in order."""
        self.note: str | None = None
        """What the last refresh left out because an answer was too large (shown on screen)."""

    def _ask(self, promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        """One query; the warnings of a partial answer are kept for the refresh's note."""
        at, result = self._query(promql, timeout)
        warned = getattr(result, "warnings", ())
        if warned:
            with self._lock:
                self._warned.update(dict.fromkeys(redact(w) for w in warned))
        return at, result

    def hosts(self) -> Sequence[HostState]:
        with self._lock:
            if not self._states:
                return [HostState(self.url, self.url, None, None, address=self.url,
                                  error=self._error, retry_at=self._retry_at)]
            return list(self._states.values())

    def focus(self, keys: Iterable[str]) -> None:
        """Fetch the devices of these hosts from the next refresh on (large fleets only)."""
        with self._lock:
            self._focus = frozenset(keys)

    def totals(self, by: str) -> dict[str, Totals]:
        """Fleet totals by ``resource_group`` or ``vendor`` from the last refresh, computed by
        Prometheus over every host (whether or not its devices were fetched)."""
        with self._lock:
            return dict(self._totals.get(by, {}))

    def refresh(self, cancelled: Callable[[], bool]) -> None:
        """Ask Prometheus; on failure mark every host and back off."""
        if self._retry_at is not None and self.clock() < self._retry_at:
            return
        asked = self.clock()
        with self._lock:
            self._warned.clear()
        try:
            stamps_f = spawn(self._ask, f"timestamp({LAST_COLLECT})", self.timeout)
            down_f = spawn(self._ask, "up == 0", self.timeout)  # only the targets that are down
            shared_f = self._shared_due(asked)
            recorded = recorded_totals(self._ask, self.timeout)  # the shipped rules, if loaded
            per_instance = self._device_counts(recorded.get("instance"))
            # A node with more devices than a snapshot may hold is not shown device by device.
            oversized = {i: n for i, n in per_instance.items() if n > MAX_DEVICES}
            fleet_devices = sum(n for i, n in per_instance.items() if i not in oversized)
            everyone = fleet_devices <= self.device_budget
            with self._lock:
                focus = self._focus
            known = set(per_instance)
            wanted = None if everyone else sorted((focus & known) - set(oversized))
            if wanted is None and known and known <= set(oversized):
                wanted = []  # every node is too large to be shown device by device: nothing to ask
            series: list[dict[str, Any]] = []
            evaluated = 0.0
            notes: list[str] = []
            if wanted is None or wanted:
                for promql in device_queries(wanted, exclude=sorted(oversized) if wanted is None else ()):
                    try:
                        at, result = self._ask(promql, self.timeout)
                    except PrometheusError as exc:
                        if "larger than" not in str(exc):
                            raise
                        if PROCESS_MEMORY in promql:  # the devices stay, without their processes
                            notes.append(f"processes not shown: {exc}")
                            continue
                        if WORKLOAD_INFO in promql:
                            notes.append(f"workloads not shown: {exc}")
                            continue
                        notes.append(f"devices not shown (totals only): {exc}")
                        series, everyone = [], False
                        break
                    evaluated = max(evaluated, at)
                    series.extend(result)
            totals: dict[str, dict[str, Totals]] = {}
            if not everyone:  # a large fleet: the store computes what the overview shows
                totals = dict(recorded)
                futures = {by: spawn(fleet_totals, self._ask, by, self.timeout)
                           for by in GROUPINGS if by not in totals}
                totals.update({by: future.result() for by, future in futures.items()})
            at, stamps = stamps_f.result()
            evaluated = max(evaluated, at)
            _, ups = down_f.result()
            if shared_f is not None:  # the first answer is waited for; later ones land in the background
                self._take_shared(shared_f)
            if cancelled():
                return
            scraped = {s.get("metric", {}).get("instance", ""): v for s in stamps
                       if isinstance(s, dict) and plausible_time(v := sample_value(s))}
            down = {s.get("metric", {}).get("instance", "") for s in ups
                    if isinstance(s, dict) and sample_value(s) == 0}
            problems: dict[str, list[str]] = {}
            snapshots = build_snapshots(series, evaluated, scraped, problems)
            for instance, count in oversized.items():
                problems.setdefault(instance, []).insert(0, (
                    f"reports {count:.0f} devices, more than {MAX_DEVICES}: its devices are not shown"))
            shared = self._shared
            if shared and self._shared_at is not None:  # asked on a slower schedule: say how old
                notes.append(f"same-device check {max(0.0, asked - self._shared_at):.0f} s old "
                             f"(asked every {STATIC_SECONDS:.0f} s)")
            with self._lock:
                warned = list(self._warned)
            if warned:  # a partial answer: what is shown may lack some hosts or devices
                notes.insert(0, f"Prometheus answered in part ({'; '.join(warned[:MAX_WARNINGS])}"
                                f"{' ...' if len(warned) > MAX_WARNINGS else ''}): numbers may be incomplete")
            if not everyone and not wanted:  # say why the devices and groups views are empty
                notes.append(f"{fleet_devices:.0f} devices, over {self.device_budget}: totals only "
                             "(Enter on a host in the cluster view shows its devices)")
        except PrometheusError as exc:
            self._fail(str(exc))
            return
        except Exception as exc:  # an answer of a shape nobody expected: still this source's failure
            self._fail(clean_text(f"unexpected Prometheus answer ({type(exc).__name__}: {exc})", 300))
            return
        with self._lock:
            self._error, self._failures, self._retry_at = None, 0, None
            self.note = "; ".join(notes) or None
            self.detailed = everyone
            self._totals = {by: totals.get(by, {}) for by in ("resource_group", "vendor")}
            seen = set(snapshots) | set(totals.get("instance", {})) | set(oversized)
            for instance in sorted(seen):
                # Age as Prometheus sees it (its clock, not the node's): evaluation minus scrape time.
                age = max(0.0, evaluated - scraped.get(instance, evaluated))
                error = "target down (up == 0); showing its last scrape" if instance in down else None
                snap = snapshots.get(instance)
                if snap is None and not everyone and instance in focus:
                    previous = self._states.get(instance)
                    snap = previous.snapshot if previous is not None else None
                summary = totals.get("instance", {}).get(instance)
                if summary is None and instance in oversized:
                    summary = Totals(instance, devices=int(min(oversized[instance], 2**31)))
                self._states[instance] = HostState(instance, instance, snap, asked - age,
                                                   address=instance, error=error,
                                                   problems=tuple(problems.get(instance, ())[:MAX_PROBLEMS]),
                                                   summary=summary, shared=shared.get(instance, 0))
            for instance in seen:
                self._missing_since.pop(instance, None)
            for instance, state in list(self._states.items()):
                if instance not in seen:
                    since = self._missing_since.setdefault(instance, asked)
                    if asked - since > GONE_GRACE_SECONDS:  # gone for good: forget it
                        del self._states[instance], self._missing_since[instance]
                        continue
                    reason = "target down (up == 0)" if instance in down else "no series in Prometheus"
                    self._states[instance] = HostState(instance, state.name, state.snapshot,
                                                       state.received, address=instance, error=reason,
                                                       summary=state.summary)

    def _device_counts(self, recorded: dict[str, Totals] | None) -> dict[str, float]:
        """Devices and partitions per instance: from the recorded per-host totals when the rules
        are loaded (no query over every device series), else counted by the store."""
        if recorded:
            return {i: float(t.devices + t.partitions) for i, t in recorded.items()
                    if t.devices + t.partitions > 0}
        _, counts = self._ask(f"count by (instance) ({DEVICE_INFO})", self.timeout)
        return {s.get("metric", {}).get("instance", ""): v for s in counts
                if isinstance(s, dict) and (v := sample_value(s)) is not None}

    def _shared_due(self, now: float) -> "Future[Any] | None":
        """The shared-devices query: started when its last answer is older than
        :data:`STATIC_SECONDS`; returned (to be waited for) only while there is no answer yet."""
        running = self._shared_future
        if running is not None and running.done():
            self._take_shared(running)
            running = None
        if running is None and (self._shared_at is None or now - self._shared_at >= STATIC_SECONDS):
            running = self._shared_future = spawn(self._ask, SHARED_DEVICES, self.timeout)
            self._shared_started = now
        return running if self._shared_at is None else None

    def _take_shared(self, future: "Future[Any]") -> None:
        """Keep a finished shared-devices answer; a failed one keeps the last (and its age)."""
        if future is self._shared_future:
            self._shared_future = None
        try:
            _, both = future.result()
        except Exception:
            if self._shared_at is None:  # nothing to show yet: the refresh fails, as any query
                raise
            return
        self._shared = {s.get("metric", {}).get("instance", ""): int(v) for s in both
                        if isinstance(s, dict) and (v := sample_value(s)) is not None and 1 <= v <= MAX_DEVICES}
        self._shared_at = self._shared_started

    @property
    def shared_age(self) -> float | None:
        """Seconds since the shared-devices answer on screen was asked (``None`` before the first)."""
        return None if self._shared_at is None else max(0.0, self.clock() - self._shared_at)

    def _fail(self, message: str) -> None:
        with self._lock:
            self._failures += 1
            self._error = message
            self._retry_at = self.clock() + min(self.max_backoff, self.interval * 2 ** (self._failures - 1))
            for instance, state in list(self._states.items()):
                self._states[instance] = HostState(instance, state.name, state.snapshot, state.received,
                                                   address=instance, error=message,
                                                   retry_at=self._retry_at, summary=state.summary)

    def history(self) -> Sequence[tuple[str, Snapshot]]:
        return []

    def close(self) -> None:
        """Nothing to release: queries run in daemon threads, each bounded by the timeout."""

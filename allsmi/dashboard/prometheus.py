"""The fleet source: every node's exporter series, read from a Prometheus server.

A refresh asks Prometheus' instant-query API (``/api/v1/query``) for what the
screen shows. Always: the totals per host, per resource group and per vendor
(computed by Prometheus, :mod:`allsmi.dashboard.promsummary`), the time of each
node's last scrape, and ``up`` for targets that stopped answering. Devices:
every host's when the fleet has at most ``device_budget`` devices (the whole
fleet in the device table, as for ``--hosts``), else only the hosts the user
opened (:meth:`PrometheusSource.focus`), so that a refresh at a thousand hosts
moves kilobytes, not hundreds of megabytes. Device series are asked for with
only the labels that identify them (``max by (__name__, instance, uuid)``);
identity comes once per device from ``allsmi_device_info``. Series are grouped
by ``instance`` into one :class:`Snapshot` per node and joined on ``uuid``
(the exporter's device id). Gauge values are scaled back from Prometheus base
units to the schema's units.

What Prometheus does not carry stays unknown: host CPU and memory, clock
when not exported, processes unless the exporter runs with ``--processes``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import threading
import time
import urllib.parse
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Sequence

from allsmi.fields import ENERGY_FIELD, MEASUREMENTS
from allsmi.schema import ATTRIBUTION_SOURCES, DeviceSample, HostSample, ProcessSample, Snapshot, Workload
from allsmi.snapshot_parse import MAX_DEVICES, MAX_PROBLEMS, checked_int, checked_measurement

from .fetch import HttpError, redact, split_credentials, tls_context
from .fetch import get as http_get
from .model import GONE_GRACE_SECONDS
from .totals import Totals
from .promsummary import GROUPINGS, fleet_totals, recorded_totals
from .sources import Clock, HostState

DEVICE_INFO = "allsmi_device_info"
#: Per instance, how many of its devices (by uuid) another instance reports too: one node
#: scraped twice (``allsmi serve`` and a textfile snapshot through node_exporter), counted
#: twice. One series per such instance, none on a healthy fleet.
SHARED_DEVICES = (f"count by (instance) (count by (uuid, instance) ({DEVICE_INFO}) and on (uuid) "
                  f"(count by (uuid) (count by (uuid, instance) ({DEVICE_INFO})) > 1))")
DEVICE_UP = "allsmi_device_up"
GROUP_INFO = "allsmi_resource_group_info"
PROCESS_MEMORY = "allsmi_process_memory_bytes"
WORKLOAD_INFO = "allsmi_device_workload_info"
#: Workloads kept per device (as the snapshot parser keeps).
MAX_WORKLOADS = 256
LAST_COLLECT = "allsmi_last_collect_timestamp_seconds"
#: metric name -> (schema field, scale from schema unit to the metric's base unit)
VALUE_METRICS: dict[str, tuple[str, float]] = {
    **{m.metric: (m.field, m.scale) for m in MEASUREMENTS},
    ENERGY_FIELD.metric: (ENERGY_FIELD.field, ENERGY_FIELD.scale),
}
#: Unix times outside (0, 2**33) (the year 2242) are not a scrape's or an evaluation's time.
_LATEST_TIME = float(2**33)
_NOT_GROUP_LABELS = {"__name__", "instance", "job", "resource_group"}
MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest query answer read: a device query of a fleet within the device budget is a few MiB
(about 2 KiB a device). A larger device answer leaves the devices out for that refresh (totals
only), a larger process answer leaves the processes out; the screen says which."""
#: Up to this many devices in the fleet, every host's devices are fetched on each refresh.
DEFAULT_DEVICE_BUDGET = 4096

Query = Callable[[str, float], tuple[float, list[dict[str, Any]]]]


class PrometheusError(Exception):
    """Prometheus could not be asked or answered with an error."""


def instance_matcher(instances: Iterable[str] | None) -> str:
    """``instance=~"a|b"`` for these instances (RE2, escaped for a PromQL string); "" for all."""
    if instances is None:
        return ""
    pattern = "|".join(re.escape(i) for i in sorted(instances))
    return 'instance=~"' + pattern.replace("\\", "\\\\").replace('"', '\\"') + '"'


def selector(instances: Iterable[str] | None = None) -> str:
    """The series a node view needs, with every label (tests and small fleets)."""
    names = [DEVICE_INFO, DEVICE_UP, GROUP_INFO, PROCESS_MEMORY, WORKLOAD_INFO, *VALUE_METRICS]
    extra = instance_matcher(instances)
    return '{__name__=~"' + "|".join(names) + '"' + ("," + extra if extra else "") + "}"


def device_queries(instances: Iterable[str] | None = None, exclude: Sequence[str] = ()) -> list[str]:
    """The queries that fetch the devices of ``instances`` (all when ``None``, but those in
    ``exclude``), lean on labels: identity and group labels in full, the values keyed by name,
    instance and uuid only."""
    extra = instance_matcher(instances)
    if exclude:
        extra = instance_matcher(exclude).replace("=~", "!~", 1)
    extra = "," + extra if extra else ""
    values = "|".join([DEVICE_UP, *VALUE_METRICS])
    return ['{__name__=~"' + f"{DEVICE_INFO}|{GROUP_INFO}" + '"' + extra + "}",
            'max by (__name__, instance, uuid) ({__name__=~"' + values + '"' + extra + "})",
            "{" + f'__name__="{PROCESS_MEMORY}"' + extra + "}",
            "{" + f'__name__="{WORKLOAD_INFO}"' + extra + "}"]


def make_query(url: str, ca_file: str | None = None) -> Query:
    """An instant-query function for the Prometheus at ``url`` (direct, no proxy, no redirects,
    the whole answer within the timeout)."""
    parts = urllib.parse.urlsplit(url)
    try:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # a port that is not a number or out of range
        valid = False
    if not valid:
        raise ValueError(f"invalid Prometheus URL {redact(url)!r} (expected http://host:port)")
    bare, authorization = split_credentials(url)
    base = bare.rstrip("/")
    headers = {"Accept": "application/json", "Accept-Encoding": "gzip", "User-Agent": "allsmi-view"}
    context = tls_context(ca_file) if ca_file is not None else None  # ValueError names a bad file
    if authorization:  # user:password@ in the URL: basic authentication, sent only there
        headers["Authorization"] = authorization

    def query(promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        try:
            answer = http_get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}",
                              headers=headers, timeout=timeout, max_bytes=MAX_BODY_BYTES,
                              context=context)
        except HttpError as exc:
            text = str(exc)
            raise PrometheusError(f"Prometheus {text}" if text.startswith("timed out")
                                  else f"cannot reach Prometheus: {text}") from None
        try:
            doc = json.loads(answer.body)
        except (ValueError, RecursionError):
            if answer.status != 200:
                raise PrometheusError(f"HTTP {answer.status} from Prometheus") from None
            raise PrometheusError("Prometheus answered with something that is not JSON") from None
        return answer_vector(doc, answer.status)

    return query


def answer_vector(doc: Any, status: int = 200) -> tuple[float, list[dict[str, Any]]]:
    """(evaluation time, samples) from an instant-query answer; :class:`PrometheusError` for any
    other shape (an error, a matrix, ``data`` that is not an object, samples that are not objects)."""
    if not isinstance(doc, dict):
        raise PrometheusError("Prometheus answer is not a JSON object")
    if doc.get("status") != "success":
        error = doc.get("error")
        reason = error if isinstance(error, str) and error else f"HTTP {status}"
        raise PrometheusError(f"query failed: {reason[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise PrometheusError(f"unexpected Prometheus answer: 'data' is a {type(data).__name__}, not an object")
    if data.get("resultType") != "vector":
        kind = data.get("resultType")
        raise PrometheusError(f"expected a vector, got {str(kind)[:40]!r}")
    result = data.get("result")
    if result is None:
        result = []
    if not isinstance(result, list):
        raise PrometheusError("unexpected Prometheus answer: 'result' is not a list")
    samples = [s for s in result if isinstance(s, dict) and isinstance(s.get("metric", {}), dict)]
    if len(samples) != len(result):
        raise PrometheusError("unexpected Prometheus answer: a sample is not an object with labels")
    for sample in samples:
        metric = sample.setdefault("metric", {})
        if not all(isinstance(v, str) for v in metric.values()):
            raise PrometheusError("unexpected Prometheus answer: a label value is not a string")
    evaluated = max((t for s in samples if _plausible_time(t := _time(s))), default=time.time())
    return evaluated, samples


def _plausible_time(when: float | None) -> bool:
    return when is not None and 0.0 < when < _LATEST_TIME


def _time(sample: dict[str, Any]) -> float:
    try:
        return float(sample["value"][0])
    except (KeyError, IndexError, TypeError, ValueError):
        return 0.0


def _value(sample: dict[str, Any]) -> float | None:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _int(text: str | None) -> int | None:
    try:
        return None if text in (None, "") else int(text)  # type: ignore[arg-type]
    except ValueError:
        return None


def build_snapshots(series: Sequence[dict[str, Any]], evaluated: float,
                    scraped: dict[str, float] | None = None,
                    problems: dict[str, list[str]] | None = None) -> dict[str, Snapshot]:
    """One snapshot per ``instance`` from the selector's result (pure; tested on its own).

    Every value passes the snapshot parser's checks (the ranges declared in
    :mod:`allsmi.fields`, whole numbers for bytes, indexes and pids): a value that fails is
    unknown, and what was wrong is listed per instance in ``problems``."""
    scraped = scraped or {}
    problems = {} if problems is None else problems

    def sink(instance: str) -> list[str]:
        return problems.setdefault(instance, [])
    devices: dict[str, dict[str, dict[str, Any]]] = {}
    order: dict[str, list[str]] = {}
    group_labels: dict[tuple[str, str], dict[str, str]] = {}
    values: list[tuple[str, str, str, float]] = []
    processes: dict[tuple[str, str], list[ProcessSample]] = {}
    extra: dict[str, int] = {}
    workloads: dict[tuple[str, str], list[Workload]] = {}
    attributed: set[str] = set()  # instances publishing workloads: a device without one has none
    for sample in series:
        metric = sample.get("metric") or {}
        name = metric.get("__name__", "")
        instance = metric.get("instance", "")
        uuid = metric.get("uuid", "")
        if name == DEVICE_INFO and uuid:
            if len(devices.get(instance, ())) >= MAX_DEVICES and uuid not in devices[instance]:
                extra[instance] = extra.get(instance, 0) + 1  # as many as a snapshot may hold
                continue
            fields: dict[str, Any] = {
                "id": uuid, "uuid": uuid, "vendor": metric.get("vendor", "") or "unknown",
                "kind": metric.get("kind", "") or "gpu", "backend": metric.get("backend", ""),
                "index": checked_int(_int(metric.get("index")), f"{uuid} index", sink(instance), 0, 2**31),
                "name": metric.get("model") or None,
                "bus_id": metric.get("bus_id") or None,
                "driver_version": metric.get("driver_version") or None,
                "firmware_version": metric.get("firmware_version") or None,
                "parent": metric.get("parent_uuid") or None,
                "resource_group": metric.get("resource_group") or None, "health": "unknown"}
            devices.setdefault(instance, {})[uuid] = fields
            order.setdefault(instance, []).append(uuid)
        elif name == GROUP_INFO:
            group_labels[(instance, metric.get("resource_group", ""))] = {
                k: v for k, v in metric.items() if k not in _NOT_GROUP_LABELS}
        elif name == PROCESS_MEMORY and uuid:
            pid = checked_int(_int(metric.get("pid")), f"{uuid} process pid", sink(instance), 0, 2**32)
            if pid is not None:
                memory = checked_int(_value(sample), f"{uuid} process {pid} memory", sink(instance))
                processes.setdefault((instance, uuid), []).append(ProcessSample(
                    pid=pid, user=metric.get("user") or None, command=metric.get("command") or None,
                    memory_bytes=memory))
        elif name == WORKLOAD_INFO and uuid:
            attributed.add(instance)
            held = workloads.setdefault((instance, uuid), [])
            if metric.get("source") in ATTRIBUTION_SOURCES and len(held) < MAX_WORKLOADS:
                held.append(Workload(source=metric["source"], **{
                    k: metric.get(k) or None for k in ("namespace", "pod", "container", "job_id", "user")}))
        elif uuid:
            value = _value(sample)
            if value is not None:
                values.append((instance, uuid, name, value))
    for instance, uuid, name, value in values:
        fields = devices.get(instance, {}).get(uuid)
        if fields is None:
            continue
        if name == DEVICE_UP:
            fields["health"] = "ok" if value >= 1 else "lost"
        elif name in VALUE_METRICS:
            field, scale = VALUE_METRICS[name]
            # Not a plausible reading: unknown, as the snapshot parser does, and said so.
            fields[field] = checked_measurement(field, value / scale, f"{uuid} {name}", sink(instance))
    for instance, count in extra.items():
        sink(instance).insert(0, f"{MAX_DEVICES + count} devices, only the first {MAX_DEVICES} kept")
    out: dict[str, Snapshot] = {}
    for instance, by_uuid in devices.items():
        samples = []
        for uuid in order[instance]:
            fields = by_uuid[uuid]
            fields["labels"] = group_labels.get((instance, fields["resource_group"] or ""), {})
            fields["processes"] = tuple(sorted(processes.get((instance, uuid), ()), key=lambda p: p.pid))
            held = workloads.get((instance, uuid))
            fields["workloads"] = tuple(held) if held is not None else () if instance in attributed else None
            samples.append(DeviceSample(**fields))
        samples.sort(key=lambda d: (d.vendor, d.parent is not None, d.index if d.index is not None else 1 << 30))
        when = scraped.get(instance, evaluated)
        if not _plausible_time(when):
            when = evaluated
        out[instance] = Snapshot(timestamp=dt.datetime.fromtimestamp(when, dt.timezone.utc),
                                 host=HostSample(hostname=instance), devices=tuple(samples))
    return out


def _spawn(fn: Callable[..., Any], *args: Any) -> "Future[Any]":
    """``fn(*args)`` in a daemon thread (never joined at exit, unlike an executor's threads, so
    a slow Prometheus cannot keep the process alive after the dashboard quit)."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="allsmi-promql").start()
    return future


class PrometheusSource:
    """A fleet read from Prometheus; every ``instance`` with allsmi series is a host."""

    cluster = True
    fetches = True

    def __init__(self, url: str, *, interval: float = 5.0, timeout: float = 10.0,
                 max_backoff: float = 60.0, clock: Clock = time.monotonic,
                 query: Query | None = None, device_budget: int = DEFAULT_DEVICE_BUDGET,
                 ca_file: str | None = None) -> None:
        self.url = redact(url.rstrip("/"))
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
        self.note: str | None = None
        """What the last refresh left out because an answer was too large (shown on screen)."""

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
        try:
            stamps_f = _spawn(self._query, f"timestamp({LAST_COLLECT})", self.timeout)
            ups_f = _spawn(self._query, "up", self.timeout)
            shared_f = _spawn(self._query, SHARED_DEVICES, self.timeout)
            _, counts = self._query(f"count by (instance) ({DEVICE_INFO})", self.timeout)
            per_instance = {s.get("metric", {}).get("instance", ""): v for s in counts
                            if isinstance(s, dict) and (v := _value(s)) is not None}
            # A node with more devices than a snapshot may hold is not shown device by device.
            oversized = {i: n for i, n in per_instance.items() if n > MAX_DEVICES}
            fleet_devices = sum(n for i, n in per_instance.items() if i not in oversized)
            everyone = fleet_devices <= self.device_budget
            with self._lock:
                focus = self._focus
            known = set(per_instance)
            wanted = None if everyone else sorted((focus & known) - set(oversized))
            series: list[dict[str, Any]] = []
            evaluated = 0.0
            notes: list[str] = []
            if wanted is None or wanted:
                for promql in device_queries(wanted, exclude=sorted(oversized) if wanted is None else ()):
                    try:
                        at, result = self._query(promql, self.timeout)
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
            if not everyone:  # a large fleet: Prometheus computes what the overview shows
                totals = recorded_totals(self._query, self.timeout)  # the shipped rules, if loaded
                futures = {by: _spawn(fleet_totals, self._query, by, self.timeout)
                           for by in GROUPINGS if by not in totals}
                totals.update({by: future.result() for by, future in futures.items()})
            at, stamps = stamps_f.result()
            evaluated = max(evaluated, at)
            _, ups = ups_f.result()
            _, both = shared_f.result()
            if cancelled():
                return
            scraped = {s.get("metric", {}).get("instance", ""): v for s in stamps
                       if isinstance(s, dict) and _plausible_time(v := _value(s))}
            down = {s.get("metric", {}).get("instance", "") for s in ups
                    if isinstance(s, dict) and _value(s) == 0}
            problems: dict[str, list[str]] = {}
            snapshots = build_snapshots(series, evaluated, scraped, problems)
            for instance, count in oversized.items():
                problems.setdefault(instance, []).insert(0, (
                    f"reports {count:.0f} devices, more than {MAX_DEVICES}: its devices are not shown"))
            shared = {s.get("metric", {}).get("instance", ""): int(v) for s in both
                      if isinstance(s, dict) and (v := _value(s)) is not None and 1 <= v <= MAX_DEVICES}
        except PrometheusError as exc:
            self._fail(str(exc))
            return
        except Exception as exc:  # an answer of a shape nobody expected: still this source's failure
            self._fail(f"unexpected Prometheus answer ({type(exc).__name__}: {exc})"[:300])
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

"""The snapshot JSON read back into schema objects, trusting nothing in it.

:func:`allsmi.output.snapshot_from_dict` delegates here. A snapshot that
arrives from another host (``allsmi view --hosts``) is data from the network:
every value is checked for its type, for being a finite number and for the
plausible range that :mod:`allsmi.schema.fields` declares, before a schema object is
built (the schema then cleans the text, :mod:`allsmi.schema.text`). What is wrong
but local (one value, one label, one process, one device) is set to ``None``
or left out and described in ``problems``; what makes the whole document
unusable (not an object, another ``schema_version``, no timestamp, ``devices``
not a list) raises :class:`SnapshotFormatError`.

Sizes are bounded too: at most :data:`MAX_DEVICES` devices and
:data:`MAX_PROCESSES` processes per device are kept (the rest is counted in
``problems``), so what one host can make the reader keep is bounded.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from allsmi.schema.fields import MEASURED_FIELDS
from allsmi.schema import (ATTRIBUTION_SOURCES, BACKEND_STATES, COMPUTE_ACTIVE_SOURCES,
                           HEALTH_STATES, PROCESS_ACTIVITY, WAITING_REASONS, WORKLOAD_FIELDS,
                           BackendStatus, DeviceSample, HolderWaiting, HostSample, ProcessSample,
                           Snapshot, Workload)

#: Devices kept from one snapshot (a node with more is not a node).
MAX_DEVICES = 4096
#: Processes kept per device.
MAX_PROCESSES = 1024
#: Workloads kept per device.
MAX_WORKLOADS = 256
#: Backend and attribution statuses kept.
MAX_STATUSES = 256
#: Problems described in full; more are only counted.
MAX_PROBLEMS = 20
#: Largest integer accepted for byte counts and ids (beyond it is not a measurement).
MAX_INT = 2**63 - 1

_RANGES: dict[str, tuple[float | None, float | None]] = {
    m.field: (m.minimum, m.maximum) for m in MEASURED_FIELDS}
_INT_FIELDS = frozenset(name for name in _RANGES if name.endswith("_bytes"))
_REQUIRED_TEXT = ("vendor", "kind", "backend")
_OPTIONAL_TEXT = ("uuid", "name", "bus_id", "driver_version", "firmware_version", "parent",
                  "resource_group")


class SnapshotFormatError(ValueError):
    """A snapshot JSON document does not have the public shape."""


def _show(value: Any) -> str:
    """A short, escaped rendering of a bad value for a problem message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "\u2026"


class _Report:
    """Collects what was wrong; only the first :data:`MAX_PROBLEMS` are spelled out."""

    def __init__(self, sink: list[str] | None) -> None:
        self.sink = sink
        self.count = 0

    def add(self, where: str, what: str) -> None:
        self.count += 1
        if self.sink is not None and len(self.sink) < MAX_PROBLEMS:
            self.sink.append(f"{where}: {what}")

    def finish(self) -> None:
        if self.sink is not None and self.count > len(self.sink):
            self.sink.append(f"... {self.count - len(self.sink)} more")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any, where: str, report: _Report, low: float | None = None,
            high: float | None = None, integer: bool = False) -> float | int | None:
    """``value`` if it is a finite number within [low, high] (an int when ``integer``), else None."""
    if value is None:
        return None
    if not _is_number(value):
        report.add(where, f"{_show(value)} is not a number")
        return None
    if isinstance(value, float) and not math.isfinite(value):
        report.add(where, f"{_show(value)} is not a finite number")
        return None
    if abs(value) > MAX_INT or (low is not None and value < low) or (high is not None and value > high):
        report.add(where, f"{_show(value)} is out of range")
        return None
    if integer:
        if isinstance(value, float):
            if not value.is_integer():
                report.add(where, f"{_show(value)} is not a whole number")
                return None
            return int(value)
        return value
    return float(value)


def checked_measurement(field: str, value: float | None, where: str,
                        problems: list[str] | None = None) -> float | int | None:
    """A measurement read elsewhere (a Prometheus sample) checked as a snapshot's is: a finite
    number within the range :mod:`allsmi.schema.fields` declares for ``field`` and within
    :data:`MAX_INT`, byte counts rounded to whole numbers; else ``None``, and the problem
    described in ``problems``."""
    low, high = _RANGES[field]
    report = _Report(problems)
    number = _number(value, where, report, low, high)
    if number is None or field not in _INT_FIELDS:
        return number
    return int(round(number))


def checked_int(value: float | int | None, where: str, problems: list[str] | None = None,
                low: int = 0, high: int = MAX_INT) -> int | None:
    """A whole number within [low, high] (an index, a pid, a byte count), else ``None`` with
    the problem described in ``problems``."""
    report = _Report(problems)
    number = _number(value, where, report, low, high)
    return None if number is None else int(round(number))


def _text(value: Any, where: str, report: _Report) -> str | None:
    if value is None or isinstance(value, str):
        return value
    report.add(where, f"{_show(value)} is not a string")
    return None


def _object(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise SnapshotFormatError(f"{where}: expected an object")
    return raw


def _labels(raw: Any, where: str, report: _Report) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        report.add(where, "expected an object of strings")
        return {}
    out = {}
    for key, value in raw.items():
        if isinstance(value, str):
            out[key] = value
        else:
            report.add(f"{where}.{key}", f"{_show(value)} is not a string")
    return out


def _detail_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, bool)) or (isinstance(value, int) and abs(value) <= MAX_INT)


def _details(raw: Any, where: str, report: _Report) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        report.add(where, "expected an object")
        return {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, list) and all(_detail_scalar(v) for v in value):
            out[key] = tuple(value)
        elif not isinstance(value, list) and _detail_scalar(value):
            out[key] = value
        else:
            report.add(f"{where}.{key}", "not a string, finite number, boolean or list of them")
    return out


def _processes(raw: Any, where: str, report: _Report) -> tuple[ProcessSample, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        report.add(where, "expected a list or null")
        return None
    if len(raw) > MAX_PROCESSES:
        report.add(where, f"{len(raw)} processes, only the first {MAX_PROCESSES} kept")
    out = []
    for i, proc in enumerate(raw[:MAX_PROCESSES]):
        here = f"{where}[{i}]"
        if not isinstance(proc, dict):
            report.add(here, "expected an object")
            continue
        pid = proc.get("pid")
        if not _is_number(pid) or isinstance(pid, float) or not 0 <= pid <= 2**32:
            report.add(f"{here}.pid", f"{_show(pid)} is not a process id")
            continue
        out.append(ProcessSample(
            pid=pid, user=_text(proc.get("user"), f"{here}.user", report),
            command=_text(proc.get("command"), f"{here}.command", report),
            memory_bytes=_number(proc.get("memory_bytes"), f"{here}.memory_bytes", report, 0, None, True),
            **{name: _number(proc.get(name), f"{here}.{name}", report, 0, 100, False)
               for name in PROCESS_ACTIVITY},
            **{name: _text(proc.get(name), f"{here}.{name}", report)
               for name in ("job_id", "pod_uid", "container_id")}))
    return tuple(out)


def _objects(raw: Any, where: str, report: _Report, what: str) -> list[tuple[str, dict[str, Any]]] | None:
    """``[(where, object)]`` of the first :data:`MAX_WORKLOADS` objects of the list ``raw``
    (``what`` names them in the report; anything else in it is reported and left out), or
    ``None`` when ``raw`` is ``null`` or not a list (reported)."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        report.add(where, "expected a list or null")
        return None
    if len(raw) > MAX_WORKLOADS:
        report.add(where, f"{len(raw)} {what}, only the first {MAX_WORKLOADS} kept")
    out = []
    for i, item in enumerate(raw[:MAX_WORKLOADS]):
        if isinstance(item, dict):
            out.append((f"{where}[{i}]", item))
        else:
            report.add(f"{where}[{i}]", "expected an object; left out")
    return out


def _workloads(raw: Any, where: str, report: _Report) -> tuple[Workload, ...] | None:
    """``workloads``: ``null`` (no attribution source active) or a list of workload objects."""
    items = _objects(raw, where, report, "workloads")
    if items is None:
        return None
    out = []
    for here, work in items:
        source = work.get("source")
        if source not in ATTRIBUTION_SOURCES:
            report.add(f"{here}.source", f"{_show(source)} is not one of "
                       f"{', '.join(ATTRIBUTION_SOURCES)}; left out")
            continue
        out.append(Workload(source, **{name: _text(work.get(name), f"{here}.{name}", report)
                                       for name in WORKLOAD_FIELDS[1:]},
                            share=_number(work.get("share"), f"{here}.share", report, 0.0, 1.0)
                            or None))
    return tuple(out)


def _waiting(raw: Any, where: str, report: _Report) -> tuple[HolderWaiting, ...] | None:
    """``waiting``: ``null`` (not classified) or a list of holder classifications."""
    items = _objects(raw, where, report, "holders")
    if items is None:
        return None
    out = []
    for here, item in items:
        reason = item.get("reason")
        if reason not in WAITING_REASONS:
            report.add(f"{here}.reason", f"{_show(reason)} is not one of "
                       f"{', '.join(WAITING_REASONS)}; read as unknown")
            reason = "unknown"
        out.append(HolderWaiting(
            reason, _text(item.get("evidence"), f"{here}.evidence", report) or "",
            **{name: _text(item.get(name), f"{here}.{name}", report)
               for name in ("user", "namespace", "pod", "job_id")}))
    return tuple(out)


def _device(raw: Any, where: str, report: _Report) -> DeviceSample | None:
    if not isinstance(raw, dict):
        report.add(where, "expected an object; device left out")
        return None
    ident = raw.get("id")
    if not isinstance(ident, str) or not ident:
        report.add(f"{where}.id", f"{_show(ident)} is not a device id; device left out")
        return None
    fields: dict[str, Any] = {"id": ident}
    for name in _REQUIRED_TEXT:
        value = _text(raw.get(name), f"{where}.{name}", report)
        fields[name] = value if value else "unknown"
    for name in _OPTIONAL_TEXT:
        fields[name] = _text(raw.get(name), f"{where}.{name}", report)
    health = raw.get("health", "unknown")
    if health not in HEALTH_STATES:
        report.add(f"{where}.health", f"{_show(health)} is not one of {', '.join(HEALTH_STATES)}")
        health = "unknown"
    fields["health"] = health
    fields["index"] = _number(raw.get("index"), f"{where}.index", report, 0, 2**31, True)
    share = _number(raw.get("partition_share"), f"{where}.partition_share", report, 0.0, 1.0)
    fields["partition_share"] = share if share != 0 else None
    for name, (low, high) in _RANGES.items():
        fields[name] = _number(raw.get(name), f"{where}.{name}", report, low, high, name in _INT_FIELDS)
    source = raw.get("compute_active_source")
    if source is not None and source not in COMPUTE_ACTIVE_SOURCES:
        report.add(f"{where}.compute_active_source",
                   f"{_show(source)} is not one of {', '.join(COMPUTE_ACTIVE_SOURCES)}")
        source = None
    fields["compute_active_source"] = source
    fields["labels"] = _labels(raw.get("labels"), f"{where}.labels", report)
    fields["details"] = _details(raw.get("details"), f"{where}.details", report)
    fields["processes"] = _processes(raw.get("processes", []), f"{where}.processes", report)
    fields["workloads"] = _workloads(raw.get("workloads"), f"{where}.workloads", report)
    fields["waiting"] = _waiting(raw.get("waiting"), f"{where}.waiting", report)
    return DeviceSample(**fields)


def _backend(raw: Any, where: str, report: _Report) -> BackendStatus | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        report.add(where, "expected an object with a name; left out")
        return None
    status = raw.get("status")
    if status not in BACKEND_STATES:
        report.add(f"{where}.status", f"{_show(status)} is not one of {', '.join(BACKEND_STATES)}")
        status = "error"
    message = _text(raw.get("message"), f"{where}.message", report) or ""
    duration = _number(raw.get("duration_seconds"), f"{where}.duration_seconds", report, 0.0, None)
    return BackendStatus(name=raw["name"], status=status, message=message, duration_seconds=duration)


def _timestamp(value: Any) -> dt.datetime:
    if not isinstance(value, str):
        raise SnapshotFormatError(f"timestamp: {_show(value)} is not an RFC 3339 time")
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SnapshotFormatError(f"timestamp: {_show(value)} is not an RFC 3339 time") from None
    try:
        # UTC, as every snapshot's time (shown as "UTC", written back with a "Z"); no offset
        # is a time in UTC
        when = when.replace(tzinfo=dt.timezone.utc) if when.tzinfo is None \
            else when.astimezone(dt.timezone.utc)
        when.timestamp()
    except (OverflowError, ValueError, OSError):
        raise SnapshotFormatError(f"timestamp: {_show(value)} is out of range") from None
    return when


def parse_snapshot(data: Any, problems: list[str] | None = None) -> Snapshot:
    """A :class:`Snapshot` from the public JSON object; see the module docstring.

    ``problems`` (when given) receives one line per value that was nulled or
    left out (at most :data:`MAX_PROBLEMS`, then a count).
    """
    report = _Report(problems)
    data = _object(data, "snapshot")
    version = data.get("schema_version")
    if type(version) is not int or version != 1:
        raise SnapshotFormatError(f"unsupported schema_version {_show(version)}")
    when = _timestamp(data.get("timestamp"))
    raw_host = _object(data.get("host"), "host")
    hostname = _text(raw_host.get("hostname"), "host.hostname", report) or ""
    host = HostSample(
        hostname=hostname,
        cpu_utilization_percent=_number(raw_host.get("cpu_utilization_percent"),
                                        "host.cpu_utilization_percent", report, 0.0, 100.0),
        memory_used_bytes=_number(raw_host.get("memory_used_bytes"), "host.memory_used_bytes",  # type: ignore[arg-type]
                                  report, 0, None, True),
        memory_total_bytes=_number(raw_host.get("memory_total_bytes"), "host.memory_total_bytes",  # type: ignore[arg-type]
                                   report, 0, None, True))
    raw_devices = data.get("devices")
    if raw_devices is None:
        raw_devices = []
    if not isinstance(raw_devices, list):
        raise SnapshotFormatError("devices: expected a list")
    if len(raw_devices) > MAX_DEVICES:
        report.add("devices", f"{len(raw_devices)} devices, only the first {MAX_DEVICES} kept")
    devices = [d for i, raw in enumerate(raw_devices[:MAX_DEVICES])
               if (d := _device(raw, f"devices[{i}]", report)) is not None]
    backends = _statuses(data.get("backends"), "backends", report)
    attribution = _statuses(data.get("attribution"), "attribution", report)
    report.finish()
    return Snapshot(timestamp=when, host=host, devices=tuple(devices), backends=backends,
                    attribution=attribution)


def _statuses(raw: Any, where: str, report: _Report) -> tuple[BackendStatus, ...]:
    """``backends`` or ``attribution``: a list of ``{"name", "status", "message", "duration_seconds"}``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        report.add(where, "expected a list")
        return ()
    if len(raw) > MAX_STATUSES:
        report.add(where, f"{len(raw)} entries, only the first {MAX_STATUSES} kept")
    return tuple(b for i, item in enumerate(raw[:MAX_STATUSES])
                 if (b := _backend(item, f"{where}[{i}]", report)) is not None)

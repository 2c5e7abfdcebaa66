"""Snapshot JSON and CSV: the machine-readable forms of a :class:`Snapshot`.

These are public interfaces (see the README): field names come from the
schema, so the JSON keys and CSV columns match ``allsmi.schema.fields``. Neither
path imports textual, rich or prometheus_client.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
from dataclasses import fields as dc_fields
from typing import Any

from allsmi.schema import (BackendStatus, DeviceSample, HolderWaiting, HostSample, ProcessSample,
                           Snapshot, Workload)

_UTC = dt.timezone.utc


def rfc3339(snapshot: Snapshot) -> str:
    """The snapshot time as RFC 3339 UTC with a ``Z`` and millisecond precision: a time with
    another offset (a snapshot read from a peer that wrote ``+02:00``) is converted to UTC
    first, a naive one is taken as UTC, and the year has its four digits."""
    when = snapshot.timestamp
    if when.utcoffset():
        when = when.astimezone(_UTC)
    return f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:" \
           f"{when.minute:02d}:{when.second:02d}.{when.microsecond // 1000:03d}Z"


_DEVICE_FIELDS = tuple(f.name for f in dc_fields(DeviceSample))
_PROCESS_FIELDS = tuple(f.name for f in dc_fields(ProcessSample))
_HOST_FIELDS = tuple(f.name for f in dc_fields(HostSample))
_BACKEND_FIELDS = tuple(f.name for f in dc_fields(BackendStatus))


def _flat(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    # A direct field walk: dataclasses.asdict deep-copies and is several times slower.
    return {name: getattr(obj, name) for name in names}


def _process(proc: ProcessSample, details: bool) -> dict[str, Any]:
    data = _flat(proc, _PROCESS_FIELDS)
    if not details:  # withheld: who runs what is not published without --processes
        data["user"] = data["command"] = None
    return data


def _workload(work: Workload, details: bool) -> dict[str, Any]:
    data = work.to_dict()
    if not details:  # a workload's user is a person's name, withheld like a process's
        data["user"] = None
    return data


def _waiting(wait: HolderWaiting, details: bool) -> dict[str, Any]:
    data = wait.to_dict()
    if not details:  # the holder's user, withheld like a workload's
        data["user"] = None
    return data


def device_dict(dev: DeviceSample, process_details: bool = True) -> dict[str, Any]:
    """One device as the JSON object of the public interface.

    ``process_details=False`` keeps each process's pid and memory but sets its
    ``user`` and ``command`` to ``null``, and each workload's ``user`` too.
    """
    data = _flat(dev, _DEVICE_FIELDS)
    data["labels"] = dict(dev.labels)
    data["processes"] = None if dev.processes is None else \
        [_process(p, process_details) for p in dev.processes]
    data["workloads"] = None if dev.workloads is None else \
        [_workload(w, process_details) for w in dev.workloads]
    data["waiting"] = None if dev.waiting is None else \
        [_waiting(w, process_details) for w in dev.waiting]
    data["details"] = {k: list(v) if isinstance(v, tuple) else v for k, v in dev.details.items()}
    return data


def snapshot_dict(snapshot: Snapshot, process_details: bool | None = None) -> dict[str, Any]:
    """The whole snapshot as the JSON object of the public interface.

    ``process_details``: ``False`` withholds every process's ``user`` and
    ``command`` (``allsmi serve`` without ``--processes``) and the document
    says so with a top-level ``"process_details": false``; ``True`` states
    ``"process_details": true``; ``None`` (a local snapshot) leaves the key out
    unless the snapshot itself was received without details.
    """
    details = snapshot.process_details and process_details is not False
    data: dict[str, Any] = {
        "schema_version": snapshot.schema_version,
        "timestamp": rfc3339(snapshot),
        "host": _flat(snapshot.host, _HOST_FIELDS),
        "devices": [device_dict(d, details) for d in snapshot.devices],
        "backends": [_flat(b, _BACKEND_FIELDS) for b in snapshot.backends],
        "attribution": [_flat(a, _BACKEND_FIELDS) for a in snapshot.attribution],
    }
    if process_details is not None or not details:
        data["process_details"] = details
    return data


def to_json(snapshot: Snapshot, indent: int | None = 2, process_details: bool | None = None) -> str:
    """The snapshot JSON text: valid UTF-8, no NaN (unknown values are ``null``).

    ``ensure_ascii`` escapes every non-ASCII character; the schema boundary
    (:mod:`allsmi.schema.text`) has already replaced lone surrogates, so no
    ``"\\udcff"`` escape that strict parsers reject can appear.
    ``process_details``: see :func:`snapshot_dict`.
    """
    return json.dumps(snapshot_dict(snapshot, process_details), indent=indent, allow_nan=False) + "\n"


def to_csv(snapshot: Snapshot) -> str:
    """One row per device, the schema's field names as columns; processes and workloads left
    out (lists of their own: see the JSON, and :func:`to_processes_csv` for processes).

    ``labels`` is a JSON object in one cell; text cells are neutralized
    against spreadsheet formula injection.
    """
    import csv  # these here: the JSON document does not need them

    from allsmi.schema.fields import DEVICE_COLUMNS
    from allsmi.schema.formatting import csv_cell
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(DEVICE_COLUMNS)
    for dev in snapshot.devices:
        row = []
        for col in DEVICE_COLUMNS:
            value = getattr(dev, col)
            if col == "labels":
                value = json.dumps(dict(value), sort_keys=True, ensure_ascii=False) if value else ""
            row.append(csv_cell(value))
        writer.writerow(row)
    return buf.getvalue()


def to_processes_csv(snapshot: Snapshot) -> str:
    """One row per process on every device (``allsmi snapshot --format processes-csv``).

    Columns are :data:`allsmi.schema.fields.PROCESS_COLUMNS`: the device's ``id``, ``index`` and
    ``uuid`` (as ``device_id``, ``device_index``, ``device_uuid``), then the process's fields
    (pid, user, command, memory, attribution, per-process activity); unknown values are
    empty cells. A process on two
    devices has a row on each. Devices whose process list is unknown, or empty, have no
    row. Text cells are neutralized against spreadsheet formula injection, and a snapshot
    received without process details leaves ``user`` and ``command`` empty.
    """
    import csv  # these here: the JSON document does not need them

    from allsmi.schema.fields import PROCESS_COLUMNS, PROCESS_DEVICE_COLUMNS
    from allsmi.schema.formatting import csv_cell
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PROCESS_COLUMNS)
    for dev in snapshot.devices:
        for proc in dev.processes or ():
            data: dict[str, Any] = _process(proc, snapshot.process_details)
            data.update(zip(PROCESS_DEVICE_COLUMNS, (dev.id, dev.index, dev.uuid)))
            writer.writerow([csv_cell(data[col]) for col in PROCESS_COLUMNS])
    return buf.getvalue()


def snapshot_from_dict(data: Any, problems: list[str] | None = None) -> Snapshot:
    """Parse the public snapshot JSON object (e.g. from ``/api/v1/snapshot``) back into a Snapshot.

    Unknown keys are ignored (newer servers may add fields); missing optional
    ones become ``None``. Every value is checked (type, finite, range; see
    :mod:`allsmi.snapshot_parse`): a wrong one is nulled or left out and
    described in ``problems``. Raises :class:`SnapshotFormatError` on a wrong shape.

    A top-level ``"process_details": false`` (an exporter that withholds users
    and command lines) becomes ``Snapshot.process_details``.
    """
    from allsmi.snapshot_parse import parse_snapshot  # only readers of snapshots need the parser
    snapshot = parse_snapshot(data, problems)
    details = data.get("process_details", True)
    if not isinstance(details, bool):
        if problems is not None:
            problems.append(f"process_details: expected true or false, got {details!r}; "
                            "taken as true")
        details = True
    return snapshot if details else dataclasses.replace(snapshot, process_details=False)


def __getattr__(name: str) -> Any:
    """``SnapshotFormatError`` from :mod:`allsmi.snapshot_parse`, imported on first use: the
    parser's module costs ~2.5 ms of every ``allsmi snapshot`` start, which only writes."""
    if name == "SnapshotFormatError":
        from allsmi.snapshot_parse import SnapshotFormatError
        return SnapshotFormatError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

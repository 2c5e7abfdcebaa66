"""Snapshot JSON and CSV: the machine-readable forms of a :class:`Snapshot`.

These are public interfaces (see the README): field names come from the
schema, so the JSON keys and CSV columns match ``allsmi.fields``. Neither
path imports textual, rich or prometheus_client.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import fields as dc_fields
from typing import Any

from allsmi.fields import DEVICE_COLUMNS
from allsmi.formatting import csv_cell
from allsmi.schema import BackendStatus, DeviceSample, HostSample, ProcessSample, Snapshot


def rfc3339(snapshot: Snapshot) -> str:
    """The snapshot time as RFC 3339 UTC with a ``Z`` and millisecond precision."""
    return snapshot.timestamp.strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{snapshot.timestamp.microsecond // 1000:03d}Z"


_DEVICE_FIELDS = tuple(f.name for f in dc_fields(DeviceSample))
_PROCESS_FIELDS = tuple(f.name for f in dc_fields(ProcessSample))
_HOST_FIELDS = tuple(f.name for f in dc_fields(HostSample))
_BACKEND_FIELDS = tuple(f.name for f in dc_fields(BackendStatus))


def _flat(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    # A direct field walk: dataclasses.asdict deep-copies and is several times slower.
    return {name: getattr(obj, name) for name in names}


def device_dict(dev: DeviceSample) -> dict[str, Any]:
    """One device as the JSON object of the public interface."""
    data = _flat(dev, _DEVICE_FIELDS)
    data["labels"] = dict(dev.labels)
    data["processes"] = None if dev.processes is None else [_flat(p, _PROCESS_FIELDS) for p in dev.processes]
    data["details"] = {k: list(v) if isinstance(v, tuple) else v for k, v in dev.details.items()}
    return data


def snapshot_dict(snapshot: Snapshot) -> dict[str, Any]:
    """The whole snapshot as the JSON object of the public interface."""
    return {
        "schema_version": snapshot.schema_version,
        "timestamp": rfc3339(snapshot),
        "host": _flat(snapshot.host, _HOST_FIELDS),
        "devices": [device_dict(d) for d in snapshot.devices],
        "backends": [_flat(b, _BACKEND_FIELDS) for b in snapshot.backends],
    }


def to_json(snapshot: Snapshot, indent: int | None = 2) -> str:
    """The snapshot JSON text (no NaN: unknown values are ``null``)."""
    return json.dumps(snapshot_dict(snapshot), indent=indent, allow_nan=False) + "\n"


def to_csv(snapshot: Snapshot) -> str:
    """One row per device, the schema's field names as columns; processes left out.

    ``labels`` is a JSON object in one cell; text cells are neutralized
    against spreadsheet formula injection.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(DEVICE_COLUMNS)
    for dev in snapshot.devices:
        row = []
        for col in DEVICE_COLUMNS:
            value = getattr(dev, col)
            if col == "labels":
                value = json.dumps(dict(value), sort_keys=True) if value else ""
            row.append(csv_cell(value))
        writer.writerow(row)
    return buf.getvalue()


class SnapshotFormatError(ValueError):
    """A snapshot JSON document does not have the public shape."""


def snapshot_from_dict(data: Any) -> Snapshot:
    """Parse the public snapshot JSON object (e.g. from ``/api/v1/snapshot``) back into a Snapshot.

    Unknown keys are ignored (newer servers may add fields); missing optional
    ones become ``None``. Raises :class:`SnapshotFormatError` on a wrong shape.
    """
    import datetime as dt

    def pick(cls: type, raw: Any, where: str) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise SnapshotFormatError(f"{where}: expected an object")
        names = {f.name for f in dc_fields(cls)}
        return {k: v for k, v in raw.items() if k in names}

    if not isinstance(data, dict):
        raise SnapshotFormatError("snapshot: expected an object")
    version = data.get("schema_version")
    if version != 1:
        raise SnapshotFormatError(f"unsupported schema_version {version!r}")
    try:
        when = dt.datetime.fromisoformat(str(data["timestamp"]).replace("Z", "+00:00"))
        host = HostSample(**pick(HostSample, data.get("host"), "host"))
        devices = []
        for i, raw in enumerate(data.get("devices") or []):
            fields_ = pick(DeviceSample, raw, f"devices[{i}]")
            raw_procs = fields_.get("processes", [])
            fields_["processes"] = None if raw_procs is None else tuple(
                ProcessSample(**pick(ProcessSample, p, f"devices[{i}].processes")) for p in raw_procs)
            fields_["labels"] = dict(fields_.get("labels") or {})
            fields_["details"] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in (fields_.get("details") or {}).items()}
            devices.append(DeviceSample(**fields_))
        backends = tuple(BackendStatus(**pick(BackendStatus, b, "backends"))
                         for b in data.get("backends") or [])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SnapshotFormatError):
            raise
        raise SnapshotFormatError(f"malformed snapshot: {exc}") from None
    return Snapshot(timestamp=when, host=host, devices=tuple(devices), backends=backends)

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
from allsmi.snapshot_parse import SnapshotFormatError, parse_snapshot


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


def snapshot_from_dict(data: Any, problems: list[str] | None = None) -> Snapshot:
    """Parse the public snapshot JSON object (e.g. from ``/api/v1/snapshot``) back into a Snapshot.

    Unknown keys are ignored (newer servers may add fields); missing optional
    ones become ``None``. Every value is checked (type, finite, range; see
    :mod:`allsmi.snapshot_parse`): a wrong one is nulled or left out and
    described in ``problems``. Raises :class:`SnapshotFormatError` on a wrong shape.
    """
    return parse_snapshot(data, problems)

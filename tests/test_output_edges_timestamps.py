"""Edge cases of the snapshot JSON's time: a document read back (``allsmi view --hosts``) and
written again names the same instant, in UTC with a ``Z``, as RFC 3339 writes it."""

from __future__ import annotations

import datetime as dt
import json

from allsmi.output import rfc3339, snapshot_from_dict, to_json
from allsmi.schema import HostSample, Snapshot

from tests.conftest import run_allsmi


def _document(timestamp: str) -> dict[str, object]:
    return {"schema_version": 1, "timestamp": timestamp, "host": {"hostname": "peer"},
            "devices": [], "backends": [], "attribution": []}


def test_a_peer_time_with_an_offset_is_read_as_utc_and_written_back_as_the_same_instant() -> None:
    problems: list[str] = []
    snap = snapshot_from_dict(_document("2026-01-01T12:00:00.250+02:00"), problems)
    assert problems == []
    assert snap.timestamp.utcoffset() == dt.timedelta(0)  # shown as "UTC" by every view
    assert snap.timestamp == dt.datetime(2026, 1, 1, 10, 0, 0, 250000, tzinfo=dt.timezone.utc)
    assert (snap.timestamp.hour, snap.timestamp.tzname()) == (10, "UTC")
    assert json.loads(to_json(snap))["timestamp"] == "2026-01-01T10:00:00.250Z"


def test_rfc3339_converts_an_aware_time_to_utc_and_pads_the_year() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    host = HostSample(hostname="h")
    assert rfc3339(Snapshot(timestamp=dt.datetime(2026, 1, 1, 1, 30, tzinfo=plus_two),
                            host=host)) == "2025-12-31T23:30:00.000Z"
    early = Snapshot(timestamp=dt.datetime(999, 3, 4, 5, 6, 7, 8000, tzinfo=dt.timezone.utc),
                     host=host)
    assert rfc3339(early) == "0999-03-04T05:06:07.008Z"
    again = snapshot_from_dict(json.loads(to_json(early)))  # and it is read back
    assert again.timestamp == early.timestamp


def test_a_snapshot_written_by_the_cli_reads_back_to_the_same_document() -> None:
    """The round trip the cluster view relies on: ``allsmi snapshot --format json`` parsed
    by the snapshot parser and written again is the same text, with no problem said."""
    result = run_allsmi("snapshot", "--simulate", "mixed-faults", "--format", "json")
    assert result.returncode == 0, result.stderr
    problems: list[str] = []
    snap = snapshot_from_dict(json.loads(result.stdout), problems)
    assert problems == []
    assert to_json(snap) == result.stdout

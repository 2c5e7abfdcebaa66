"""Unit parsers, the N/A helper, CSV escaping, atomic writes, JSON round trip."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from allsmi.schema import units
from allsmi.support.atomic import write_atomic
from allsmi.schema.formatting import csv_cell, human_bytes, na
from allsmi.output import SnapshotFormatError, snapshot_from_dict, to_json
from allsmi.schema import DeviceSample, HostSample, ProcessSample, Snapshot, utc_now


@pytest.mark.parametrize(("text", "watts"), [
    ("17521800uW", 17.5218), ("45.5 W", 45.5), ("350mW", 0.35), ("226", 226.0), (226, 226.0),
    ("N/A", None), ("", None), ("garbage", None), ("12 parsecs", None), (float("nan"), None)])
def test_power(text: object, watts: float | None) -> None:
    got = units.parse_power_watts(text)
    assert got == pytest.approx(watts) if watts is not None else got is None


@pytest.mark.parametrize(("text", "size"), [
    ("1.5GiB", 1610612736), ("512 MiB", 536870912), ("1048576", 1048576), ("672", 672),
    ("2K", 2048), ("[N/A]", None), ("-", None)])
def test_sizes(text: str, size: int | None) -> None:
    assert units.parse_size_bytes(text) == size


def test_other_parsers() -> None:
    assert units.parse_temperature_celsius("31C") == 31.0
    assert units.parse_temperature_celsius("45 °C") == 45.0
    assert units.parse_temperature_celsius("45 F") is None
    assert units.parse_percent("37 %") == 37.0
    assert units.parse_percent("137") is None
    assert units.mib_to_bytes("131072") == 137438953472
    assert units.milli_to_unit(1500) == 1.5
    assert units.reject_sentinel(0xFFFFFFFF) is None and units.reject_sentinel(42) == 42
    assert units.parse_clock_mhz("1.98GHz") == pytest.approx(1980.0)


def test_na_is_the_only_place_none_becomes_text() -> None:
    assert na(None) == "N/A" and na(0) == "0" and na(3.14159, "{:.1f}", " W") == "3.1 W"
    assert human_bytes(None) == "N/A" and human_bytes(85520809984) == "79.6 GiB"


@pytest.mark.parametrize(("value", "cell"), [
    ("=HYPERLINK(\"x\")", "'=HYPERLINK(\"x\")"), ("+1+2", "'+1+2"), ("-cmd", "'-cmd"), ("@sum", "'@sum"),
    ("-3.5", "-3.5"), ("plain", "plain"), (None, ""), (2.5, "2.5"), (7, "7")])
def test_csv_cells_are_neutralized(value: object, cell: str) -> None:
    assert csv_cell(value) == cell


def test_atomic_write_is_owner_only_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text("old")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["out.csv"]


def test_json_round_trip_and_rejects_bad_shapes() -> None:
    snap = Snapshot(timestamp=utc_now(), host=HostSample("h", None, 1, 2), devices=(
        DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia", labels={"team": "x"},
                     processes=(ProcessSample(42, "alice", "python", 1024),),
                     details={"core_utilization_percent": (1.0, 2.0)}),))
    data = json.loads(to_json(snap))
    assert data["devices"][0]["utilization_percent"] is None
    again = snapshot_from_dict(data)
    assert again.devices[0] == snap.devices[0]
    with pytest.raises(SnapshotFormatError):
        snapshot_from_dict({"schema_version": 2})
    with pytest.raises(SnapshotFormatError):
        snapshot_from_dict({"schema_version": 1, "timestamp": "2026-01-01T00:00:00Z", "host": []})


def test_numbers_split_without_compiling_the_text_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVML backend hands numbers only: the pattern for text like ``"45.2 W"`` is compiled
    on the first text (a one-shot snapshot imports the module and never splits one)."""
    import importlib
    import re
    compiled: list[str] = []
    real = re.compile

    def counted(pattern: str, flags: int = 0) -> re.Pattern[str]:
        compiled.append(pattern)
        return real(pattern, flags)

    monkeypatch.setattr(re, "compile", counted)
    importlib.reload(units)  # imported afresh: nothing compiled
    assert compiled == []
    assert units.parse_percent(37) == 37.0 and units.parse_power_watts(350.5) == 350.5
    assert compiled == []
    assert units.parse_percent("37 %") == 37.0 and units.parse_power_watts("45.2 W") == 45.2
    assert len(compiled) == 1

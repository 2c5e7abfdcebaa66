"""The Intel backend's sysfs counters, sizes, limits and clocks are unsigned whole numbers: a file
reading ``-1`` or ``1_000`` (which ``int()`` takes) is no reading; a temperature may be negative."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.backends.intel.sysfs import read_int


@pytest.mark.parametrize(("text", "number"), [
    ("42\n", 42), ("0", 0), ("  7 ", 7),
    ("-1\n", None),       # old: -1
    ("1_000", None),      # old: 1000
    ("+5", None),         # old: 5
    ("3.5", None), ("", None), ("garbage", None),
])
def test_read_int_is_unsigned(tmp_path: Path, text: str, number: int | None) -> None:
    path = tmp_path / "energy1_input"
    path.write_text(text)
    assert read_int(str(path)) == number


def test_signed_where_asked_and_missing_files(tmp_path: Path) -> None:
    path = tmp_path / "temp1_input"
    path.write_text("-5000\n")
    assert read_int(str(path), minimum=None) == -5000 and read_int(str(path)) is None
    assert read_int(str(tmp_path / "absent")) is None

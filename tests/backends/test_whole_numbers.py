"""Integer-kind values (a PID, an index, a count, a size in bytes, a PCIe generation or width) as
the shared helpers read them: a whole number in range or nothing, never rounded, truncated or
clamped (:func:`allsmi.schema.units.to_int`, :mod:`allsmi.backends._common.cells`)."""

from __future__ import annotations

import pytest

from allsmi.schema import units
from allsmi.backends._common.cells import PCIE_WIDTHS, SaidOnce, index_key, int_cell, whole_cell

#: What no tool prints for a whole number, and what the old to_int made of each.
NOT_WHOLE = [
    "3.7",      # was 4 (rounded)
    "3.5",      # was 4
    "3.0",      # was 3: no tool in scope prints a count with a fraction
    "1e3",      # was 1000
    "-1",       # was -1
    -1,         # was -1
    "+3",       # was 3
    "1_000",    # was 1000 (float() takes underscores)
    "٣",        # was 3 (Arabic-Indic three: float(), int() and \\d take it)
    "３",       # was 3 (full-width three)
    3.0,        # was 3: a float is no whole-number cell
    2.5,        # was 2 (round half to even)
    True,       # was None already: a bool is no number
    "inf", "nan", "x", "", "N/A", None,
]


@pytest.mark.parametrize("raw", NOT_WHOLE)
def test_to_int_refuses_what_is_no_whole_number(raw: object) -> None:
    assert units.to_int(raw) is None


@pytest.mark.parametrize(("raw", "number"), [("5", 5), (" 16 ", 16), (0, 0), ("0", 0), (7, 7),
                                              ("007", 7), ("51002736640", 51002736640)])
def test_to_int_reads_whole_numbers(raw: object, number: int) -> None:
    assert units.to_int(raw) == number


def test_to_int_bounds_are_refusals_not_clamps() -> None:
    assert units.to_int("0", minimum=1) is None and units.to_int("1", minimum=1) == 1
    assert units.to_int("8", minimum=1, maximum=7) is None and units.to_int("7", maximum=7) == 7
    # a sign only where the caller admits negative numbers; a fraction never
    assert units.to_int("-3", minimum=None) == -3 and units.to_int(-3, minimum=-5) == -3
    assert units.to_int("-3.5", minimum=None) is None and units.to_int("--3", minimum=None) is None


def test_int_cell_and_index_key_take_ascii_digits_and_no_negative_number() -> None:
    # old: int_cell(-1) == -1 and int_cell("٣") == 3 (str.isdecimal takes other scripts' digits)
    assert [int_cell(v) for v in (-1, "٣", "３", "-1", 3.0, "5", 5)] == [None, None, None, None, None, 5, 5]
    assert [index_key(v) for v in (-1, "٣", "-1", "4", 4)] == [None, "٣", "-1", 4, 4]


def test_whole_cell_warns_once_per_device_field_and_value() -> None:
    warnings: list[str] = []
    said = SaidOnce()
    for _ in range(3):
        assert whole_cell("3.7", "npu0", "pid", warnings, said) is None
    assert whole_cell("3.7", "npu1", "pid", warnings, said) is None   # another device
    assert whole_cell("-1", "npu0", "pid", warnings, said) is None    # another value
    assert whole_cell("N/A", "npu0", "pid", warnings, said) is None   # no value: nothing to say
    assert whole_cell(None, "npu0", "pid", warnings, said) is None
    assert whole_cell("42", "npu0", "pid", warnings, said, minimum=1) == 42
    assert warnings == ["npu0: pid value '3.7' is not a whole number of 0 or more; reported as unknown",
                        "npu1: pid value '3.7' is not a whole number of 0 or more; reported as unknown",
                        "npu0: pid value '-1' is not a whole number of 0 or more; reported as unknown"]


def test_whole_cell_ranges_and_allowed_values() -> None:
    warnings: list[str] = []
    assert whole_cell(5, "chip", "pcie_speed", warnings, minimum=1, maximum=7) == 5
    assert whole_cell(9, "chip", "pcie_speed", warnings, minimum=1, maximum=7) is None
    assert whole_cell("16", "chip", "pcie_width", warnings, allowed=PCIE_WIDTHS) == 16
    assert whole_cell("3", "chip", "pcie_width", warnings, allowed=PCIE_WIDTHS) is None
    assert whole_cell("3", "chip", "pcie_width", warnings, allowed=PCIE_WIDTHS) is None  # no said: each time
    assert warnings == ["chip: pcie_speed value 9 is not a whole number from 1 to 7; reported as unknown"] + [
        "chip: pcie_width value '3' is not one of 1, 2, 4, 8, 16, 32; reported as unknown"] * 2

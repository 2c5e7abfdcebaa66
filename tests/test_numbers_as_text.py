"""Every number given as text, a flag's or an environment variable's, is read one way
(:func:`allsmi.schema.numbers.number_in_text`): ASCII decimal forms, blanks around them allowed. The
other forms Python's ``float`` and ``int`` read (``1_0``, full-width ``５``, ``nan``) were taken
by ``--interval``, ``ALLSMI_SERVE_INTERVAL`` and ``ALLSMI_SIMULATE_SPEED`` and refused by
``ALLSMI_SERVE_MAX_HOLDER_SERIES``; each is now refused by every one of them (exit 2, the flag
or the variable named), and ``10.0`` is whole everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from allsmi.cli import fast
from allsmi.cli.common import simulation_speed
from allsmi.cli.group import cli
from allsmi.cli.serveoptions import resolve_options
from allsmi.config import load_config

#: Text Python reads as a number that no flag or variable takes.
NOT_DECIMAL = ["1_0", "\uff15", "\u0665", "0x10", "nan", "inf", "-inf", "1e999", "", "5 5",
               "9" * 400]

#: (the command line, the flag) of every numeric flag, each given a value in its range as
#: ``{}``; the command stops at the value (exit 2) before it does anything.
FLAGS = [
    (["snapshot", "--interval", "{}"], "--interval"),
    (["snapshot", "--timeout", "{}"], "--timeout"),
    (["--interval", "{}", "snapshot"], "--interval"),
    (["serve", "--energy-max-gap", "{}"], "--energy-max-gap"),
    (["serve", "--max-holder-series", "{}"], "--max-holder-series"),
    (["view", "--max-concurrency", "{}"], "--max-concurrency"),
    (["export", "--coverage-threshold", "{}"], "--coverage-threshold"),
    (["export", "--timeout", "{}"], "--timeout"),
    (["idle", "--timeout", "{}"], "--timeout"),
    (["report", "--coverage-threshold", "{}"], "--coverage-threshold"),
]


def _invoke(args: list[str]) -> Any:
    """``allsmi ARGS`` in this process; a missing ``--config`` stops a command whose value was
    taken (exit 2 with another message) before it serves or reads anything."""
    where = 1 if args[0] != "--interval" else 3
    args = args[:where] + ["--config", "/nonexistent/allsmi-test.toml"] + args[where:]
    return CliRunner().invoke(cli, args, prog_name="allsmi", catch_exceptions=False)


@pytest.mark.parametrize("value", NOT_DECIMAL)
@pytest.mark.parametrize("args, flag", FLAGS, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_every_numeric_flag_refuses_what_is_no_decimal(args: list[str], flag: str,
                                                       value: str) -> None:
    result = _invoke([a.format(value) for a in args])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.output, result.output
    assert "expected a" in result.output and "Traceback" not in result.output
    assert len(result.output) < 1500  # (a long value is cut)


def test_a_whole_flag_takes_a_decimal_with_no_fraction() -> None:
    """``--max-holder-series 10.0`` as ``max_holder_series = 10.0`` and the variable."""
    from allsmi.cli.numbertype import WholeRange
    assert WholeRange(0, 100).convert(" 10.0 ", None, None) == 10
    assert WholeRange(0, 100).convert("1e1", None, None) == 10
    with pytest.raises(click.BadParameter, match="whole number from 0 to 100, got '10.5'"):
        WholeRange(0, 100).convert("10.5", None, None)


@pytest.mark.parametrize("value", ["1_0", "\uff15", "nan"])
def test_the_fast_path_leaves_them_to_click(value: str) -> None:
    """``allsmi snapshot --interval 1_0`` parsed without click reads the value as click does:
    not at all (click says why)."""
    assert fast.parse(["snapshot", "--interval", value]) is None
    assert fast.parse(["snapshot", "--interval", " 5 "]) == ({}, {"interval": 5.0})


SERVE_VARS = [("ALLSMI_SERVE_INTERVAL", "from 0.05 to 3600"),
              ("ALLSMI_SERVE_ENERGY_MAX_GAP", "at most 604800"),
              ("ALLSMI_SERVE_MAX_HOLDER_SERIES", "whole number from 0 to 1000000")]


@pytest.mark.parametrize("value", NOT_DECIMAL[:-3])  # ("" and blanks: unset, as documented)
@pytest.mark.parametrize("var, says", SERVE_VARS)
def test_every_serve_variable_refuses_what_is_no_decimal(var: str, says: str, value: str) -> None:
    with pytest.raises(ValueError) as caught:
        resolve_options({}, load_config(None, environ={}), {var: value}, None)
    assert str(caught.value).startswith(f"${var}: expected a"), caught.value
    assert says in str(caught.value)


@pytest.mark.parametrize("value", NOT_DECIMAL[:-3])
def test_the_simulation_speed_refuses_what_is_no_decimal(value: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(click.exceptions.Exit) as stop:
        simulation_speed(True, {"ALLSMI_SIMULATE_SPEED": value})
    assert stop.value.exit_code == 2
    assert "$ALLSMI_SIMULATE_SPEED: expected a number above 0" in capsys.readouterr().err


def test_leading_zeros_count_for_nothing() -> None:
    """``0000...01`` (31 digits and more) is 1, as ``float`` and ``int`` read it; before, a
    whole number of more than 30 digits was taken as out of every range whatever its value."""
    from allsmi.schema.numbers import number_in_text
    padded = "0" * 40 + "1"
    assert number_in_text(padded, 0, 10) == 1.0
    assert number_in_text(padded, 0, 10, whole=True) == 1
    assert number_in_text("-" + "0" * 40, 0, 10) == 0.0
    assert fast.parse(["snapshot", "--interval", padded]) == ({}, {"interval": 1.0})
    result = _invoke(["snapshot", "--interval", padded])
    assert "Invalid value" not in result.output, result.output
    with pytest.raises(ValueError, match="from 0 to 10"):
        number_in_text("0" * 40 + "1" + "0" * 31, 0, 10)


def test_the_variables_take_decimals_with_blanks_around_them() -> None:
    options = resolve_options({}, load_config(None, environ={}),
                              {"ALLSMI_SERVE_INTERVAL": " 2.5 ",
                               "ALLSMI_SERVE_MAX_HOLDER_SERIES": "10.0"}, None)
    assert (options.interval, options.max_holder_series) == (2.5, 10)
    assert simulation_speed(True, {"ALLSMI_SIMULATE_SPEED": "1e3"}) == 1000.0


def test_the_file_and_the_variable_agree_on_whole(tmp_path: Path) -> None:
    """``max_holder_series = 10.0`` in the file, as ``ALLSMI_SERVE_MAX_HOLDER_SERIES=10.0``."""
    path = tmp_path / "config.toml"
    path.write_text("[serve]\nmax_holder_series = 10.0\n", encoding="utf-8")
    options = resolve_options({}, load_config(str(path), environ={}), {}, None)
    assert options.max_holder_series == 10 and type(options.max_holder_series) is int


def test_thousands_of_leading_zeros_are_no_python_error() -> None:
    """Leading zeros are dropped before the digits are converted: ``int()`` refuses a string of
    over 4300 digits with a message of Python's own ("Exceeds the limit ..."), never shown."""
    from allsmi.schema.numbers import number_in_text
    assert number_in_text("0" * 6000 + "1", 0.05, 3600) == 1.0
    assert number_in_text("-" + "0" * 6000 + "3", -5, 10, whole=True) == -3
    with pytest.raises(ValueError, match="expected a whole number from 1 to 100"):
        number_in_text("0" * 6000 + "9" * 40, 1, 100, whole=True)

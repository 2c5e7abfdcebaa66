"""Every key a scenario file can hold refuses an absurd value the same way (docs/simulation.md):
exit code 2, nothing on stdout, no traceback, and a message naming the file, the line and the
dotted key.

Table-driven from :data:`NUMBERS` and :data:`CHOICES`, a catalogue of every key the parser
(``backends/simulated/scenario.py``) accepts: the top-level keys, ``[[devices]]``,
``[[partitions]]`` and their instances, ``[[faults]]`` of each type, and the scenario's default
``[groups.NAME]`` and ``[[rules]]`` (judged by the configuration's validator, with the scenario's
file). Each case writes a small valid scenario with one value replaced, on a known line. Most
cases are judged in-process by :func:`allsmi.cli.common.settings`, the function every command
runs on its ``--simulate``; a handful run the CLI as a subprocess. Both ends of every numeric
range are checked to be accepted, so that the catalogue is the code's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from allsmi.schema.numbers import MAX_INDEX

from . import refusals

#: A TOML integer too large for a float (``math.isfinite`` raises on it).
HUGE_INT = "1" + "0" * 400
#: A TOML integer too long for Python's ``int()`` (over 4300 digits: ``tomllib`` raises a
#: ``ValueError`` of its own, not a ``TOMLDecodeError``).
GIANT_INT = "1" + "0" * 5000
TEN_YEARS = 315_360_000
CONTROL = '"a\\u0007b"'
"""Text holding a control character (the terminal's bell)."""

#: The small valid scenario every case starts from: (block, header, [(key, value)]). A key's
#: block is written only when the case is about it (with the top level and ``[[devices]]``).
BASE: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("top", "", (("name", '"probe"'), ("seed", "1"), ("epoch", '"2026-01-01T00:00:00Z"'),
                 ("users", '["alice"]'), ("commands", '["python job.py"]'))),
    ("devices", "[[devices]]", (
        ("backend", '"nvidia"'), ("vendor", '"nvidia"'), ("kind", '"gpu"'),
        ("model", '"NVIDIA H100 80GB HBM3"'), ("count", "2"),
        ("memory_total_bytes", "85899345920"), ("power_idle_watts", "70.0"),
        ("power_limit_watts", "700.0"), ("clock_idle_mhz", "345.0"),
        ("clock_max_mhz", "1980.0"), ("temperature_idle_celsius", "30.0"),
        ("temperature_max_celsius", "80.0"), ("has_fan", "false"),
        ("has_energy_counter", "true"), ("cores", "0"), ("driver_version", '"560.35.03"'),
        ("firmware_version", '"96.00.99"'), ("id_style", '"nvidia"'), ("bus_base", "24"),
        ("duty_cycle", "0.75"), ("job_seconds", "[900, 3600]"), ("busy_looking", "[0]"))),
    ("partitions", "[[partitions]]", (
        ("device", '"nvidia:1"'), ("instances", ""))),
    ("instances", "", (("profile", '"3g.40gb"'), ("memory_total_bytes", "42949672960"))),
    ("lost", "[[faults]]", (("type", '"lost"'), ("device", '"nvidia:0"'),
                            ("every_seconds", "600"), ("duration_seconds", "120"))),
    ("error", "[[faults]]", (("type", '"error"'), ("backend", '"nvidia"'),
                             ("message", '"NVML: mismatch"'), ("every_seconds", "300"),
                             ("duration_seconds", "60"))),
    ("hang", "[[faults]]", (("type", '"hang"'), ("backend", '"nvidia"'), ("seconds", "30"),
                            ("every_seconds", "3600"), ("duration_seconds", "30"))),
    ("groups", "[groups.team]", (
        ("labels", '{ team = "ml" }'), ("price_per_device_hour", "3.1"),
        ("price_per_kwh", "0.2"), ("grid_gco2e_per_kwh", "400"), ("budget_per_month", "1000"),
        ("currency", '"USD"'), ("partition_billing", '"share"'), ("bill_by", '"allocated"'))),
    ("rules", "[[rules]]", (("vendor", '"nvidia"'), ("resource_group", '"team"'))),
)
#: Each block's key prefix as a message names it.
DOTTED = {"top": "", "devices": "devices[1].", "partitions": "partitions[1].",
          "instances": "partitions[1].instances[1].", "lost": "faults[1].", "error": "faults[1].",
          "hang": "faults[1].", "groups": "groups.team.", "rules": "rules[1]."}


class Case(NamedTuple):
    """A scenario file's text, and the line and dotted key its message must name."""

    text: str
    line: int
    key: str


def scenario(block: str, key: str, value: str | None, changes: dict[str, str | None] | None = None,
             dotted: str = "") -> Case:
    """The base scenario with ``key`` of ``block`` set to ``value`` (``None``: left out; a key
    the block lacks: added at its end), and other keys of any written block set by
    ``changes`` (``"block.key"``)."""
    changes = {**(changes or {}), f"{block}.{key}": value}
    wanted = {"top", "devices", block} | {"partitions" if block == "instances" else block}
    lines = ["# allsmi: every scenario key refuses an absurd value"]
    line = 0
    for name, header, pairs in BASE:
        if name not in wanted or name == "instances" or (block == "top" and name == key):
            continue  # (a top-level ``devices = 1`` is written without its [[devices]])
        if header:
            lines += ["", header]
        items = list(pairs)
        if f"{name}.{key}" in changes and key not in dict(pairs) and name == block:
            items.append((key, ""))
        for k, v in items:
            v = changes.get(f"{name}.{k}", v)
            if k == "instances" and name == "partitions" and f"{name}.{k}" not in changes:
                inner = [(ik, changes.get(f"instances.{ik}", iv)) for ik, iv in BASE[3][2]]
                if "instances." + key in changes and key not in dict(BASE[3][2]):
                    inner.append((key, changes["instances." + key]))
                v = "[ { " + ", ".join(f"{ik} = {iv}" for ik, iv in inner if iv is not None) + " } ]"
                if block == "instances":
                    line = len(lines) + 1
            if v is None:
                continue
            lines.append(f"{k} = {v}")
            if name == block and k == key:
                line = len(lines)
    return Case("\n".join(lines) + "\n", line, dotted or DOTTED[block] + key)


class Key(NamedTuple):
    """One numeric key: its block, name, range (both ends inclusive unless ``low_open``) and
    how its value is written (``form``: in a list)."""

    block: str
    key: str
    low: float
    high: float
    low_open: bool = False
    whole: bool = False
    form: str = "{}"
    ends: dict[str, str | None] = {}
    """Other keys set while both ends are checked (the limits a key has beside its range)."""
    skip: tuple[str, ...] = ()
    """Ends not checked: another key's limit makes them unreachable ('low', 'high')."""

    @property
    def dotted(self) -> str:
        return DOTTED[self.block] + self.key


NUMBERS: tuple[Key, ...] = (
    Key("top", "seed", -(2**63), 2**63 - 1, whole=True),
    Key("devices", "count", 0, 4096, whole=True, ends={"devices.busy_looking": None}),
    Key("devices", "memory_total_bytes", 1, 2**60, whole=True),
    Key("devices", "power_idle_watts", 0, 100_000, skip=("high",)),  # (below the limit)
    Key("devices", "power_limit_watts", 0, 100_000, skip=("low",)),  # (above idle)
    Key("devices", "clock_idle_mhz", 0, 100_000, ends={"devices.clock_max_mhz": "100000"}),
    Key("devices", "clock_max_mhz", 0, 100_000, ends={"devices.clock_idle_mhz": "0"}),
    Key("devices", "temperature_idle_celsius", -50, 200,
        ends={"devices.temperature_max_celsius": "200"}),
    Key("devices", "temperature_max_celsius", -50, 200,
        ends={"devices.temperature_idle_celsius": "-50"}),
    Key("devices", "cores", 0, 1024, whole=True),
    Key("devices", "bus_base", 0, 255, whole=True),
    Key("devices", "duty_cycle", 0, 1, low_open=True),
    Key("devices", "job_seconds", 0, TEN_YEARS, low_open=True, form=f"[{{}}, {TEN_YEARS}]"),
    Key("devices", "job_seconds", 0, TEN_YEARS, low_open=True, form="[1e-9, {}]"),
    Key("devices", "busy_looking", 0, 1, whole=True, form="[{}]"),
    Key("instances", "memory_total_bytes", 1, 2**60, whole=True,
        ends={"devices.memory_total_bytes": str(2**60)}),
    Key("hang", "seconds", 0, TEN_YEARS, low_open=True),
    *(Key(kind, "every_seconds", 0, TEN_YEARS, low_open=True,
          ends={f"{kind}.duration_seconds": "1e-9"}) for kind in ("lost", "error", "hang")),
    *(Key(kind, "duration_seconds", 0, TEN_YEARS, low_open=True,
          ends={f"{kind}.every_seconds": str(TEN_YEARS)}) for kind in ("lost", "error", "hang")),
    Key("groups", "price_per_device_hour", 0, 1e9),
    Key("groups", "price_per_kwh", 0, 1e9),
    Key("groups", "grid_gco2e_per_kwh", 0, 5000),
    Key("groups", "budget_per_month", 0, 1e15),
    Key("rules", "index", 0, MAX_INDEX, whole=True),
)


def absurd_values(key: Key) -> list[str]:
    """TOML values out of ``key``'s range or of another type."""
    values = ["1e300", HUGE_INT, f"-{HUGE_INT}", "nan", "inf", "-inf", "true", "[1]",
              "{ a = 1 }", "1979-05-27", '"5"', '""']
    values.append(str(int(key.low) - 1) if key.whole else repr(float(key.low) - 1.0))
    if key.low_open:
        values.append("0")
    if key.whole:
        values += ["2.5", str(int(key.high) + 1)]
    else:
        values.append(repr(key.high * 2))
    if key.block == "rules":  # (an index may be a glob: text is a pattern there)
        values.remove('"5"')
    if key.block != "instances":  # (its line names the key holding the inline table)
        values.append(GIANT_INT)
    return values


def numeric_case(key: Key, value: str) -> Case:
    return scenario(key.block, key.key, key.form.format(value))


#: Every other key: (block, key, refused values, the dotted key named where it is not the
#: block's, the value's form).
CHOICES: tuple[tuple[str, str, tuple[str, ...], str, str], ...] = (
    ("top", "name", ("1", '""', CONTROL, "true", "[1]", '"' + "n" * 257 + '"'), "", "{}"),
    ("top", "epoch", ("1", '""', '"yesterday"', CONTROL, "true", "[1]", "1979-05-27",
                      "1979-05-27T07:32:00", '"2026-01-01T00:00:00"', "9999-12-31T00:00:00Z",
                      '"3000-01-01T00:00:00Z"', "1969-12-31T23:59:59Z", "nan"), "", "{}"),
    ("top", "users", ("1", '"alice"', "[]", "{ a = 1 }", "true"), "", "{}"),
    ("top", "users", ("1", '""', "[1]", '"' + "u" * 257 + '"'), "users[1]", "[{}]"),
    ("top", "commands", ("1", '"python"', "[]", "{ a = 1 }"), "", "{}"),
    ("top", "commands", ("1", '""', "true", '"' + "c" * 4097 + '"'), "commands[1]", "[{}]"),
    ("top", "include", ("1", '""', CONTROL, "true", "[1]", '"no-such-scenario"',
                        '"no-such-file.toml"', '"."', '"' + "i" * 5000 + '"'), "", "{}"),
    ("top", "jobs", ("1", '"x"'), "", "{}"),
    ("top", "devices", ("1", '"x"', "{ a = 1 }"), "", "{}"),
    ("top", "partitions", ("1", '"x"'), "", "{}"),
    ("top", "faults", ("1", '"x"'), "", "{}"),
    ("top", "rules", ("1", '"x"'), "", "{}"),
    ("top", "groups", ("1", '"x"', "[1]"), "", "{}"),
    ("devices", "backend", ("1", '""', CONTROL, '"Ex:tra"', "true"), "", "{}"),
    ("devices", "vendor", ("1", '""', CONTROL, "[1]"), "", "{}"),
    ("devices", "kind", ("1", '""', '"tpu"', CONTROL), "", "{}"),
    ("devices", "model", ("1", '""', CONTROL, '"' + "m" * 257 + '"', '"a\\u202eb"'), "", "{}"),
    ("devices", "driver_version", ("1", '""', CONTROL, "1979-05-27"), "", "{}"),
    ("devices", "firmware_version", ("1", '""', CONTROL, "true"), "", "{}"),
    ("devices", "id_style", ("1", '""', '"bogus"', CONTROL), "", "{}"),
    ("devices", "has_fan", ('"yes"', "1", "[true]", "nan"), "", "{}"),
    ("devices", "has_energy_counter", ('"yes"', "0", "{ a = 1 }"), "", "{}"),
    ("devices", "job_seconds", ('"900"', "900", "[1]", "[1, 2, 3]", "[2, 1]", "{ a = 1 }", "[]"),
     "", "{}"),
    ("devices", "busy_looking", ('"0"', "0", "[0, 0]", "[true]", "{ a = 1 }", '["0"]'), "", "{}"),
    ("devices", "bogus", ("1",), "", "{}"),
    ("partitions", "device", ("1", '""', CONTROL, '"nvidia:9"', '"nvidia"', "true"), "", "{}"),
    ("partitions", "instances", ("1", "[]", '"x"', "{ a = 1 }"), "", "{}"),
    ("partitions", "instances", ("1", '"x"'), "partitions[1].instances[1]", "[{}]"),
    ("partitions", "bogus", ("1",), "", "{}"),
    ("instances", "profile", ("1", '""', CONTROL, '"9g.90gb"', '"half"', "true"), "", "{}"),
    ("instances", "bogus", ("1",), "", "{}"),
    ("lost", "type", ("1", '""', '"explode"', CONTROL, "true"), "", "{}"),
    ("lost", "device", ("1", '""', CONTROL, '"nvidia:99"', "true"), "", "{}"),
    ("lost", "backend", ('"nvidia"',), "", "{}"),
    ("lost", "bogus", ("1",), "", "{}"),
    ("error", "backend", ("1", '""', CONTROL, '"nope"', "[1]"), "", "{}"),
    ("error", "message", ("1", '""', CONTROL, '"' + "e" * 1025 + '"'), "", "{}"),
    ("error", "seconds", ("5",), "", "{}"),
    ("hang", "backend", ("1", '""', '"nope"'), "", "{}"),
    ("hang", "device", ('"nvidia:0"',), "", "{}"),
    ("groups", "partition_billing", ('"bogus"', "1"), "", "{}"),
    ("groups", "bill_by", ('"bogus"', "1"), "", "{}"),
    ("groups", "currency", ('"US"', "1"), "", "{}"),
    ("groups", "labels", ("1", '"team"'), "", "{}"),
    ("groups", "bogus", ("1",), "", "{}"),
    ("rules", "vendor", ("true", '""', "1"), "", "{}"),
    ("rules", "host", ("1", '""'), "", "{}"),
    ("rules", "resource_group", ("1", '""', CONTROL), "", "{}"),
    ("rules", "bogus", ("1",), "", "{}"),
)

def header_case(case: Case) -> Case:
    """``case`` whose message names its table's header line (a key missing from it)."""
    header = "[[faults]]" if case.key.startswith("faults") else "[[devices]]"
    return case._replace(line=case.text.splitlines().index(header) + 1)


CASES = [pytest.param(numeric_case(key, value),
                      id=f"{key.dotted}{key.form[:2]}={value[:12]}{len(value)}")
         for key in NUMBERS for value in absurd_values(key)]
CASES += [pytest.param(scenario(block, key, form.format(value), dotted=dotted),
                       id=f"{DOTTED[block]}{key}{form[:2]}={value[:12]}")
          for block, key, values, dotted, form in CHOICES for value in values]
CASES += [
    pytest.param(scenario("lost", "duration_seconds", "700"), id="duration-above-every"),
    pytest.param(header_case(scenario("lost", "duration_seconds", None, dotted="faults[1]")),
                 id="every-without-duration"),
    pytest.param(header_case(scenario("lost", "device", None, dotted="faults[1]")),
                 id="lost-without-device"),
    pytest.param(header_case(scenario("devices", "model", None, dotted="devices[1]")),
                 id="device-without-model"),
    pytest.param(scenario("devices", "power_limit_watts", "70.0"), id="limit-not-above-idle"),
    pytest.param(scenario("devices", "clock_max_mhz", "300"), id="clock-max-below-idle"),
    pytest.param(scenario("devices", "temperature_max_celsius", "20"), id="temperature-max-below"),
    pytest.param(scenario("devices", "busy_looking", "[2]"), id="busy-looking-past-count"),
    pytest.param(scenario("devices", "count", "2.5.3"), id="count-not-toml"),
    pytest.param(scenario("devices", "count", "2\ncount = 3")._replace(line=14),
                 id="count-written-twice"),
]


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The scenario alone is judged: no ``ALLSMI_*`` variable, no user's config file."""
    for name in list(os.environ):
        if name.startswith("ALLSMI_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))


def judged(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Any, str, str]:
    """The exit code, stdout and stderr of the scenario check every command runs."""
    return refusals.judged(capsys, scenario=path)


def assert_refused(case: Case, path: Path, code: Any, out: str, err: str) -> None:
    refusals.assert_refused(case.text, case.line, case.key, path, code, out, err)


def write(case: Case, tmp_path: Path) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(case.text, encoding="utf-8")
    return path


def test_the_base_scenario_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every block, written together, is accepted (so each case fails for its one value)."""
    for block in DOTTED:
        case = scenario(block, "name" if block == "top" else "x", None)
        code, out, err = judged(write(case, tmp_path), capsys)
        assert code == 0, f"{block}: {err}"


@pytest.mark.parametrize("case", CASES)
def test_absurd_value_is_refused_with_file_line_and_key(case: Case, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = write(case, tmp_path)
    code, out, err = judged(path, capsys)
    assert_refused(case, path, code, out, err)


@pytest.mark.parametrize("key", NUMBERS, ids=lambda k: f"{k.dotted}{k.form[:2]}")
def test_both_ends_of_each_range_are_accepted(key: Key, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The catalogue's ranges are the code's: each end (or just inside an open one) passes."""
    low = key.low if not key.low_open else (1 if key.whole else key.low + 1e-9)
    for end, value in (("low", low), ("high", key.high)):
        if end in key.skip:
            continue
        text = repr(int(value)) if key.whole or value == int(value) else repr(float(value))
        case = scenario(key.block, key.key, key.form.format(text), key.ends)
        code, out, err = judged(write(case, tmp_path), capsys)
        assert code == 0, f"{key.dotted} = {text} refused: {err}"


#: From the outside: ``allsmi snapshot --simulate FILE`` on a few cases.
OUTSIDE = [
    numeric_case(NUMBERS[1], HUGE_INT),
    numeric_case(NUMBERS[0], f"-{HUGE_INT}"),
    numeric_case(next(k for k in NUMBERS if k.block == "hang"), "1e300"),
    numeric_case(next(k for k in NUMBERS if k.block == "groups"), HUGE_INT),
    scenario("top", "epoch", "9999-12-31T00:00:00Z"),
    numeric_case(next(k for k in NUMBERS if k.key == "bus_base"), f"-{GIANT_INT}"),
    scenario("devices", "model", CONTROL),
]


@pytest.mark.parametrize("case", OUTSIDE, ids=lambda c: c.key)
def test_cli_refuses_with_exit_2_from_the_outside(case: Case, tmp_path: Path) -> None:
    path = write(case, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")
    done = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", str(path),
                           "--format", "json"], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert_refused(case, path, done.returncode, done.stdout, done.stderr)

"""The contract suite's expected readings come from the fixtures, through a unit table of its own.

What is checked here: the unit table converts as SI/IEC say and shares nothing with allsmi's own
conversions; a value the fixture states in a unit other than the one declared is refused; an
altered fixture moves the expected value (and the backend follows it); a backend converting with
the wrong unit fails the scenario's declared values.
"""

from __future__ import annotations

import ast
import math
import shutil
import types
from pathlib import Path

import pytest

from . import fixture_truth as truth
from .scenario import FIXTURES, ScenarioEnv, check_expected


@pytest.mark.parametrize(("raw", "unit", "want"), [
    ("17521800uW", None, 17.5218),
    ("17521800µW", None, 17.5218),
    ("52.00 W", None, 52.0),
    (" 42.0", "W", 42.0),
    ("35°C", None, 35.0),
    ("45C", None, 45.0),
    (57000, "mC", 57.0),
    (750000000, "uW", 750.0),
    (400000, "mW", 400.0),
    (55512345678, "mJ", 55512345.678),
    (0.915, "ratio", 91.5),
])
def test_a_stated_unit_converts_to_the_schemas(raw, unit, want) -> None:
    got = truth.convert(raw, unit, where="t")
    assert isinstance(got, truth.TrueFloat)
    assert math.isclose(got, want, rel_tol=1e-12)


@pytest.mark.parametrize(("raw", "unit", "want"), [
    ("3.5GiB", None, 3758096384),
    ("58.0MiB", None, 60817408),
    ("1.4GiB", None, 1503238554),  # 1503238553.6 bytes, to the nearest byte
    ("2097152 KiB", None, 2147483648),
    (29834, "MiB", 31283216384),
    ("14248574976", "B", 14248574976),
    (1, "GB", 10**9),
])
def test_a_byte_count_is_an_exact_int(raw, unit, want) -> None:
    got = truth.convert(raw, unit, where="t")
    assert type(got) is truth.TrueInt and got == want and got.quantity == "bytes"


def test_npu_smi_mb_is_read_as_mib_only_when_the_scenario_says_so() -> None:
    assert truth.convert(512, "MB", where="t") == 512 * 10**6
    assert truth.convert(512, "MB", where="t", aliases={"MB": "MiB"}) == 512 * 2**20


@pytest.mark.parametrize(("raw", "unit"), [
    ("17521800uW", "mW"),  # the fixture says uW, the scenario declared mW: a declaration slip
    ("12 furlongs", None),
    ("N/A", "W"),
    (None, "W"),
    (True, "B"),
    ("42", None),  # no unit stated and none declared
])
def test_a_unit_the_fixture_contradicts_or_lacks_is_refused(raw, unit) -> None:
    with pytest.raises(ValueError):
        truth.convert(raw, unit, where="t")


def test_the_unit_table_is_its_own_not_allsmis() -> None:
    """The truth is computed without allsmi's conversion code: the module imports nothing of allsmi."""
    tree = ast.parse(Path(truth.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.split(".")[0] in ("allsmi", "backends")}, imported


def test_a_csv_header_states_the_unit(tmp_path: Path) -> None:
    csv = tmp_path / "q.csv"
    csv.write_text("index, memory.total [MiB], power.draw [W]\n0, 81559, 512.34\n1, 40960 MiB, [N/A]\n")
    assert truth.csv_value(csv, 0, "memory.total [MiB]") == 81559 * 2**20
    assert truth.csv_value(csv, 1, "memory.total [MiB]") == 40960 * 2**20
    assert truth.csv_value(csv, 0, "power.draw [W]") == 512.34
    with pytest.raises(ValueError):
        truth.csv_value(csv, 1, "power.draw [W]")


def test_derived_values_keep_their_quantity_and_source() -> None:
    a, b = truth.convert("3.5GiB", None, where="a"), truth.convert("58.0MiB", None, where="b")
    both = truth.total(a, b)
    assert both == 3758096384 + 60817408 and both.quantity == "bytes" and "a" in both.where and "b" in both.where
    energy = truth.times(truth.convert(206158430208, "count", where="ticks"),
                         truth.convert(15.2587890625, "uJ", where="resolution"))
    assert energy == 3145728.0 and energy.quantity == "joules"
    with pytest.raises(ValueError):
        truth.total(a, truth.convert(1, "W", where="w"))
    assert truth.difference(truth.convert(10, "B", where="x"), truth.convert(4, "B", where="y")) == 6


def test_a_typed_in_reading_is_found() -> None:
    watts = truth.convert(1, "W", where="f")
    assert truth.undeclared_readings({"d": {"power_watts": watts, "memory_used_bytes": None,
                                            "memory_total_bytes": 0, "name": "x"}}) == []
    found = truth.undeclared_readings({"d": {"power_watts": 688.0, "memory_total_bytes": watts,
                                             "processes": [(1, 16 * 2**30), (2, None), (3, 0)]}})
    assert len(found) == 3, found
    assert any("power_watts" in f for f in found) and any("watts read for bytes" in f for f in found)
    assert any("pid 1" in f for f in found)


# --- the truth follows the fixture, and catches a backend that slips ---------------------------

ASCEND_TABLE = "npu-smi-24.1.0-910b3x4-training.txt"
REBELLIONS_LOADED = "rbln-smi-kmd3.0-ca22x4-loaded.json"


def _sample(backend) -> list:
    try:
        backend.open()
        return list(backend.sample())
    finally:
        backend.close()


def test_an_altered_fixture_moves_the_expected_value_and_the_backend_follows(tmp_path, monkeypatch) -> None:
    """Editing a fixture (a copy) changes the expected value; the backend reading the copy agrees
    with the new value and no longer with the old."""
    from . import scenarios_ascend as ascend
    original = ascend.chip(ASCEND_TABLE, "0000:C1:00.0", "hbm_used")
    power = ascend.chip(ASCEND_TABLE, "0000:C1:00.0", "power_W")
    copy = tmp_path / ASCEND_TABLE
    text = (FIXTURES / "ascend" / ASCEND_TABLE).read_text()
    text = text.replace("3362 / 15171      29834 / 65536 ", "3362 / 15171      12345 / 65536 ", 1)
    text = text.replace("| 93.6        45 ", "| 312.5       45 ")
    copy.write_text(text)
    moved = ascend.chip(str(copy), "0000:C1:00.0", "hbm_used")
    moved_power = ascend.chip(str(copy), "0000:C1:00.0", "power_W")
    assert (original, moved) == (29834 * 2**20, 12345 * 2**20)
    assert (power, moved_power) == (93.6, 312.5)
    backend = ascend.backend_for(ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch), str(copy))
    devices = _sample(backend)
    check_expected(devices, {"ascend:0000:c1:00.0": {"memory_used_bytes": moved, "power_watts": moved_power}})
    with pytest.raises(AssertionError):
        check_expected(devices, {"ascend:0000:c1:00.0": {"memory_used_bytes": original}})


def test_the_rebellions_truth_follows_an_altered_json_fixture(tmp_path) -> None:
    from . import scenarios_rebellions as rebellions
    copy = tmp_path / REBELLIONS_LOADED
    shutil.copy(FIXTURES / "rebellions" / REBELLIONS_LOADED, copy)
    before = rebellions.device(str(copy), "rbln0", "card_power")
    copy.write_text(copy.read_text().replace('"37257088uW"', '"41000000uW"'))
    after = rebellions.device(str(copy), "rbln0", "card_power")
    assert (before, after) == (37.257088, 41.0)


def _scenario(module, name: str):
    return next(s for s in module.SCENARIOS if s.name == name)


def test_a_backend_reading_npu_smi_mb_as_decimal_megabytes_fails_its_scenario(tmp_path, monkeypatch) -> None:
    """Ascend's MB are MiB: a backend converting them as 10^6 bytes is off by 4.9 % (not the
    factor of 1024 the class checks catch), and the declared values catch it."""
    import allsmi.backends.ascend.samples as samples
    from allsmi.schema import units

    from . import scenarios_ascend as ascend
    scenario = _scenario(ascend, "910b3-x4-training")
    env = ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch)
    check_expected(_sample(scenario.build(env)), scenario.expected)  # the real backend passes
    slipped = types.SimpleNamespace(**{k: getattr(units, k) for k in dir(units) if not k.startswith("__")})
    slipped.mib_to_bytes = lambda value: None if units.to_float(value) is None else int(units.to_float(value) * 10**6)
    monkeypatch.setattr(samples, "units", slipped)
    with pytest.raises(AssertionError, match="memory_used_bytes|memory_total_bytes"):
        check_expected(_sample(scenario.build(env)), scenario.expected)


def test_a_backend_reading_microwatts_as_milliwatts_fails_its_scenario(tmp_path, monkeypatch) -> None:
    import allsmi.backends.rebellions.parse as parse

    from . import scenarios_rebellions as rebellions
    scenario = _scenario(rebellions, "atom-plus-4-cards-loaded")
    env = ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch)
    check_expected(_sample(scenario.build(env)), scenario.expected)
    right = parse.units.parse_power_watts  # what the backend converts rbln-smi's power with
    monkeypatch.setattr(parse.units, "parse_power_watts", lambda raw, default_unit="w": (
        None if (w := right(raw, default_unit=default_unit)) is None else w * 1000))
    with pytest.raises(AssertionError, match="power_watts"):
        check_expected(_sample(scenario.build(env)), scenario.expected)

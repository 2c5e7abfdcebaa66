"""A cell whose number is past the largest float (``"1e999"``, ``"1e308 GiB"``) is one unknown
value with a warning, never an ``OverflowError`` that fails the whole backend (every device of
the vendor gone, the status an "internal error"). The shared parsers in :mod:`allsmi.schema.units`
make it ``None``; one case per tool-based backend that reads sizes through them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from allsmi.schema import units
from allsmi.backends.furiosa import ENV_VAR as FURIOSA_ENV, FuriosaBackend
from allsmi.backends.gaudi import GaudiBackend
from tests.contract import scenarios_furiosa, scenarios_gaudi, scenarios_rebellions
from tests.contract.scenario import ScenarioEnv

HUGE = ["1e999", "1e999 MiB", "1e308 GiB", "-1e999", "1" + "0" * 400 + " MiB"]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ScenarioEnv:
    return ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch)


@pytest.mark.parametrize("text", HUGE)
def test_a_size_past_the_largest_float_is_no_size(text: str) -> None:
    # was OverflowError: cannot convert float infinity to integer
    assert units.parse_size_bytes(text) is None
    assert units.parse_size_bytes(text, default_unit="mib") is None


def test_other_overflowing_cells_are_no_reading() -> None:
    assert units.mib_to_bytes("1e303") is None           # was OverflowError (1e303 MiB)
    assert units.parse_power_watts("1e308 kW") is None   # was inf W
    assert units.parse_power_watts("1e999") is None      # was inf W
    assert units.parse_temperature_celsius("1e999 C") is None
    assert units.parse_clock_mhz("1e308 GHz") is None
    assert units.parse_energy_joules("1e308 kWh") is None
    # ordinary cells are read as before
    assert units.parse_size_bytes("1.5GiB") == 1610612736 and units.mib_to_bytes("672") == 672 * units.MIB
    assert units.parse_power_watts("17521800uW") == pytest.approx(17.5218)


def test_rebellions_device_memory_past_the_largest_float(env: ScenarioEnv) -> None:
    fixture = scenarios_rebellions.RBLN_FIXTURES / "rbln-smi-kmd3.0-ca22x4-loaded.json"
    report = json.loads(fixture.read_text())
    report["devices"][0]["memory"]["used"] = "1e999"
    report["contexts"][0]["memalloc"] = "1e308GiB"
    backend = scenarios_rebellions.backend_for(env, text=json.dumps(report))
    assert backend.probe().available
    backend.open()
    try:
        devices = list(backend.sample())  # was OverflowError: the backend's sample failed
        warnings = list(backend.warnings)
    finally:
        backend.close()
    assert len(devices) == 4
    first = next(d for d in devices if d.details.get("device") == report["devices"][0]["device"])
    assert first.memory_used_bytes is None and first.memory_total_bytes == 16877879296
    assert any("memory.used" in w and "1e999" in w for w in warnings), warnings
    assert any("1e308GiB" in w for w in warnings), warnings
    assert all(d.memory_used_bytes is not None for d in devices if d is not first)


def test_gaudi_memory_cell_past_the_largest_float(env: ScenarioEnv) -> None:
    rows = (scenarios_gaudi.GAUDI / "gaudi3-8x-1.22.csv").read_text().splitlines(keepends=True)
    fields = scenarios_gaudi.fixture_fields("gaudi3-8x-1.22")
    cells = rows[1].split(", ")
    cells[fields.index("memory.used")] = "1e999"
    rows[1] = ", ".join(cells)
    edited = env.tmp_path / "edited.csv"
    edited.write_text("".join(rows))
    scenarios_gaudi.use_standin(env, "gaudi3-8x-1.22", fixture_file=str(edited))
    backend = GaudiBackend(timeout_seconds=5.0, options={"mode": "oneshot"})
    assert backend.probe().available
    backend.open()
    try:
        devices = list(backend.sample())  # was OverflowError: every Gaudi gone
        warnings = list(backend.warnings)
    finally:
        backend.close()
    assert len(devices) == 8
    assert devices[1].memory_used_bytes is None and devices[1].memory_total_bytes == 131072 * units.MIB
    assert devices[0].memory_used_bytes == 672 * units.MIB
    assert any("memory.used" in w and "1e999" in w for w in warnings), warnings


def _furiosa(env: ScenarioEnv, ps: list[dict[str, object]]) -> tuple[list, list[str]]:
    scenarios_furiosa.block_sdk(env.monkeypatch)
    routes = {"info": scenarios_furiosa.route("info-warboy-output-flag.json"),
              "status": scenarios_furiosa.route("status-warboy-output-flag.json"),
              "ps": scenarios_furiosa.route(text=json.dumps(ps))}
    exe = scenarios_furiosa.write_standin(env.tmp_path / "bin", routes, flag="--output")
    env.monkeypatch.setenv(FURIOSA_ENV, str(exe))
    backend = FuriosaBackend(timeout_seconds=5.0, user_lookup=lambda pid: None)
    assert backend.probe().available
    backend.open()
    try:
        return list(backend.sample()), list(backend.warnings)
    finally:
        backend.close()


def test_furiosa_ps_memory_past_the_largest_float(env: ScenarioEnv) -> None:
    ps = json.loads((scenarios_furiosa.FURIOSA / "ps-warboy-output-flag.json").read_text())
    ps[0]["memory"] = "1e999 MiB"
    (device,), warnings = _furiosa(env, ps)  # was OverflowError: the sample failed
    (proc,) = device.processes
    # one core range's memory is unknown, so the process total is (not the other row's 256 MiB)
    assert proc.pid == 3771 and proc.memory_bytes is None
    assert any("unreadable memory" in w and "1e999 MiB" in w for w in warnings), warnings


@pytest.mark.parametrize("unknown_first", [True, False])
def test_furiosa_process_total_with_an_unknown_row_is_unknown(env: ScenarioEnv, unknown_first: bool) -> None:
    ps = json.loads((scenarios_furiosa.FURIOSA / "ps-warboy-output-flag.json").read_text())
    ps[0 if unknown_first else 1]["memory"] = "N/A"
    (device,), _ = _furiosa(env, ps)
    (proc,) = device.processes
    # was 256 MiB or 512 MiB: the known row alone, passed off as the process's total
    assert proc.memory_bytes is None

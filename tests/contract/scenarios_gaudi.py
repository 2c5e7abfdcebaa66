"""Contract scenarios for the Gaudi backend, and the hl-smi stand-in builder its tests share.

Every scenario with devices runs a generated ``hl-smi`` stand-in (a copy of
``fixtures/gaudi/hl_smi_standin.py`` with this interpreter in its shebang)
that prints a fixture in hl-smi's CSV format.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from allsmi.backends import gaudi as gaudi_module
from allsmi.backends.gaudi import csv_output
from allsmi.backends.gaudi import ENV_VAR, GaudiBackend

from .fixture_truth import csv_value
from .scenario import FIXTURES, CliTool, Scenario, ScenarioEnv, expect

GAUDI = FIXTURES / "gaudi"
STANDIN_SOURCE = GAUDI / "hl_smi_standin.py"


def fixture_fields(name: str) -> list[str]:
    """The column names a CSV fixture was printed with (its ``.fields`` sidecar)."""
    return (GAUDI / f"{name}.fields").read_text().strip().split(",")


def write_standin(directory: Path, fixture: str = "gaudi3-8x-1.22", *,
                  fixture_file: str | None = None, listing: str | None = "hl-smi-L-gaudi3.txt",
                  table: str | None = None, **behaviour: Any) -> Path:
    """Write an executable ``hl-smi`` stand-in into ``directory`` and return its path.

    ``fixture`` names a CSV fixture (``fixtures/gaudi/<fixture>.csv`` with its
    ``.fields`` sidecar); ``fixture_file`` overrides the rows file (e.g. the
    garbage-only text). ``behaviour`` is passed to the stand-in's config (see
    the stand-in's docstring).
    """
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "hl-smi"
    exe.write_text(f"#!{sys.executable} -S\n" + STANDIN_SOURCE.read_text())
    exe.chmod(0o755)
    config: dict[str, Any] = {
        "fixture": str(GAUDI / (fixture_file or f"{fixture}.csv")),
        "fields": fixture_fields(fixture),
        "listing": str(GAUDI / listing) if listing else None,
        "table": str(GAUDI / table) if table else None,
        "state": str(directory / "generations"),
    }
    config.update(behaviour)
    (directory / "hl-smi.json").write_text(json.dumps(config))
    return exe


def use_standin(env: ScenarioEnv, fixture: str = "gaudi3-8x-1.22", **kwargs: Any) -> Path:
    """Write a stand-in and point ``ALLSMI_HL_SMI`` at it."""
    exe = write_standin(env.tmp_path / "bin", fixture, **kwargs)
    env.monkeypatch.setenv(ENV_VAR, str(exe))
    return exe


def _absent(env: ScenarioEnv) -> GaudiBackend:
    env.monkeypatch.delenv(ENV_VAR, raising=False)
    empty = env.tmp_path / "empty-path"
    empty.mkdir()
    env.monkeypatch.setenv("PATH", str(empty))
    env.monkeypatch.setattr(gaudi_module, "INSTALL_DIRS", ())
    return GaudiBackend(timeout_seconds=5.0)


def _env_points_nowhere(env: ScenarioEnv) -> GaudiBackend:
    env.monkeypatch.setenv(ENV_VAR, str(env.tmp_path / "no-such-hl-smi"))
    return GaudiBackend(timeout_seconds=5.0)


def _no_devices(env: ScenarioEnv) -> GaudiBackend:
    empty = env.tmp_path / "empty.csv"
    empty.write_text("")
    use_standin(env, fixture_file=str(empty))
    return GaudiBackend(timeout_seconds=5.0, options={"interval_seconds": 0.2})


def _loop(fixture: str, listing: str | None, **options: Any):
    def build(env: ScenarioEnv) -> GaudiBackend:
        use_standin(env, fixture, listing=listing)
        return GaudiBackend(timeout_seconds=5.0,
                            options={"interval_seconds": 0.2, **options})
    return build


def _sixty_four(env: ScenarioEnv) -> GaudiBackend:
    """64 Gaudi 3: the 1.22 capture's first row repeated with its own index, uuid and bus id."""
    first = (GAUDI / "gaudi3-8x-1.22.csv").read_text().splitlines()[0].split(", ")
    rows = []
    for n in range(64):
        cells = list(first)
        cells[0], cells[1], cells[3] = str(n), f"01P4-HL3090A0-18-U4V193-22-{n:05d}", f"0000:{n + 16:02x}:00.0"
        rows.append(", ".join(cells))
    csv = env.tmp_path / "gaudi3-64.csv"
    csv.write_text("\n".join(rows) + "\n")
    use_standin(env, "gaudi3-8x-1.22", fixture_file=str(csv), listing=None)
    # A 1 s loop: a frame closes after half an interval without a row, and the stand-in's 64
    # rows could stall longer than 0.1 s on a loaded machine (the suite's four workers on two
    # cores), splitting the first frame (the last device then reported degraded, unread).
    return GaudiBackend(timeout_seconds=5.0, options={"interval_seconds": 1.0, "firmware": False})


def _listed_without_row(mode: str):
    """``hl-smi -L`` lists eight devices, ``-Q`` prints rows for seven (accel3's is missing):
    the eighth is reported, degraded and without values, never dropped or ``ok``."""
    def build(env: ScenarioEnv) -> GaudiBackend:
        rows = (GAUDI / "gaudi3-8x-1.22.csv").read_text().splitlines()
        csv = env.tmp_path / "gaudi3-7-of-8.csv"
        csv.write_text("\n".join(r for r in rows if not r.startswith("3, ")) + "\n")
        use_standin(env, "gaudi3-8x-1.22", fixture_file=str(csv))
        return GaudiBackend(timeout_seconds=5.0, options={"interval_seconds": 0.2, "mode": mode})
    return build


#: The units of hl-smi's ``nounits`` cells (fixtures/gaudi/README.md).
UNITS = {"memory.total": "MiB", "memory.used": "MiB", "power.draw": "W", "power.max": "W",
         "temperature.aip": "C", "utilization.aip": "%"}


def _cell(fixture: str, row: int, field: str):
    """hl-smi's ``field`` of the ``row``-th device in ``fixtures/gaudi/FIXTURE.csv`` (columns from
    its ``.fields`` sidecar), in the unit hl-smi prints it in."""
    return csv_value(GAUDI / f"{fixture}.csv", row, field, UNITS[field], fieldnames=fixture_fields(fixture))


G3, G2 = "gaudi3-8x-1.22", "gaudi2-8x-1.15"
G3_0 = "01P4-HL3090A0-18-U4V193-22-07-00"
G3_3 = "01P4-HL3090A0-18-U4V193-22-07-03"

SCENARIOS: list[Scenario] = [
    Scenario("hl-smi-absent", _absent, expected_devices=None),
    Scenario("env-points-nowhere", _env_points_nowhere, expected_devices=None),
    Scenario("hl-smi-lists-no-devices", _no_devices, expected_devices=None),
    # Memory in MiB, power and its limit in W, as the fixture's cells are.
    Scenario("gaudi3-8x-loop", _loop("gaudi3-8x-1.22", "hl-smi-L-gaudi3.txt"), expected_devices=8,
             expected=dict([expect(G3_0, utilization_percent=_cell(G3, 0, "utilization.aip"),
                                   compute_active_percent=_cell(G3, 0, "utilization.aip"),
                                   compute_active_source="engine_time",
                                   memory_total_bytes=_cell(G3, 0, "memory.total"),
                                   memory_used_bytes=_cell(G3, 0, "memory.used"),
                                   temperature_celsius=_cell(G3, 0, "temperature.aip"),
                                   power_watts=_cell(G3, 0, "power.draw"),
                                   power_limit_watts=_cell(G3, 0, "power.max"), clock_mhz=800.0,
                                   bus_id="0000:19:00.0", driver_version="1.22.1-97ec1a4", health="ok",
                                   processes=None)])),
    Scenario("gaudi3-8x-oneshot", _loop("gaudi3-8x-1.22", "hl-smi-L-gaudi3.txt", mode="oneshot"),
             expected_devices=8),
    # SW 1.15 rejects power.max and the clock fields: null, the rest exact.
    Scenario("gaudi2-8x-sw1.15-fewer-fields", _loop("gaudi2-8x-1.15", "hl-smi-L-gaudi2.txt"),
             expected_devices=8,
             expected=dict([expect("01P0-HL2080A0-15-TF8A81-09-07-00",
                                   memory_total_bytes=_cell(G2, 0, "memory.total"),
                                   memory_used_bytes=_cell(G2, 0, "memory.used"),
                                   temperature_celsius=_cell(G2, 0, "temperature.aip"),
                                   power_watts=_cell(G2, 0, "power.draw"), power_limit_watts=None,
                                   clock_mhz=None)])),
    Scenario("gaudi3-64x", _sixty_four, expected_devices=64,
             expected=dict([expect("01P4-HL3090A0-18-U4V193-22-00063", index=63,
                                   power_watts=_cell(G3, 0, "power.draw"),
                                   memory_used_bytes=_cell(G3, 0, "memory.used"))])),
    Scenario("gaudi2-4x-na-cells", _loop("gaudi2-4x-na-cells", None), expected_devices=4),
    Scenario("gaudi3-listed-without-row-loop", _listed_without_row("loop"), expected_devices=8,
             unread=(G3_3,),
             expected=dict([expect(G3_3, index=3, bus_id="0000:44:00.0", health="degraded",
                                   power_watts=None, temperature_celsius=None)])),
    Scenario("gaudi3-listed-without-row-oneshot", _listed_without_row("oneshot"), expected_devices=8,
             unread=(G3_3,)),
    # Device 3's row is cut short (unusable) but -L lists it: reported degraded, not dropped.
    Scenario("gaudi3-garbage-mixed", _loop("gaudi3-8x-garbage-mixed", "hl-smi-L-gaudi3.txt",
                                           mode="oneshot"), expected_devices=8, unread=(G3_3,)),
]


#: How the fault-and-drift matrix (tests/contract/test_cli_faults.py) drives hl-smi.
#: The query of the newest scenario (every field hl-smi 1.22 accepts), one-shot and in loop mode.
_QUERY = f"-Q {','.join(csv_output.ALL_FIELDS)} -f {gaudi_module.FORMAT}"
CLI = CliTool(env_var=ENV_VAR, executable="hl-smi", partial=GAUDI / "gaudi3-8x-truncated.csv",
              options={"interval_seconds": 0.2}, partial_status="ok",
              calls=("-L", _QUERY, f"{_QUERY} -l 0.2"),
              drift={"oldest": "gaudi2-8x-sw1.15-fewer-fields", "newest": "gaudi3-8x-loop",
                     "na-fields": "gaudi2-4x-na-cells", "64-devices": "gaudi3-64x"})

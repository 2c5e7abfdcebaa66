"""Contract scenarios for the Tenstorrent backend, and the tt-smi stand-in builder its tests share.

:func:`write_standin` writes the shared stand-in (``fixtures/standin.py``) as
``tt-smi``; the argument after ``-f`` is keyed as ``PATH`` (see that file's
docstring for the route keys).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from allsmi.backends import tenstorrent as tenstorrent_module
from allsmi.backends.tenstorrent import ENV_VAR, TenstorrentBackend

from . import standin
from .fixture_truth import json_value
from .scenario import FIXTURES, CliTool, Scenario, ScenarioEnv, expect

TENSTORRENT = FIXTURES / "tenstorrent"

#: The argument strings tt-smi is called with (``-f``'s argument shown as PATH).
STDOUT_ARGS = "-s --snapshot_no_tty"
FILE_ARGS = "-s -f PATH"


def route(fixture: str | None = None, **behaviour: Any) -> dict[str, Any]:
    """One stand-in route: print ``fixtures/tenstorrent/<fixture>`` and/or behave."""
    spec = dict(behaviour)
    if fixture is not None:
        spec["file"] = str(TENSTORRENT / fixture)
    if isinstance(spec.get("write_file"), str) and "/" not in spec["write_file"]:
        spec["write_file"] = str(TENSTORRENT / spec["write_file"])
    return spec


def write_standin(directory: Path, routes: dict[str, dict[str, Any]], *,
                  default: dict[str, Any] | None = None) -> Path:
    """An executable ``tt-smi`` stand-in (the shared one) answering ``routes`` (argument string -> route)."""
    return standin.write_standin(directory, "tt-smi", routes, default=default,
                                 placeholders=("-f",), unknown="argparse")


def use_standin(env: ScenarioEnv, routes: dict[str, dict[str, Any]], **kwargs: Any) -> Path:
    """Write a stand-in and point ``ALLSMI_TT_SMI`` at it."""
    exe = write_standin(env.tmp_path / "bin", routes, **kwargs)
    env.monkeypatch.setenv(ENV_VAR, str(exe))
    return exe


def _absent(env: ScenarioEnv) -> TenstorrentBackend:
    env.monkeypatch.delenv(ENV_VAR, raising=False)
    empty = env.tmp_path / "empty-path"
    empty.mkdir()
    env.monkeypatch.setenv("PATH", str(empty))
    env.monkeypatch.setattr(tenstorrent_module, "INSTALL_DIRS", ())
    return TenstorrentBackend(timeout_seconds=5.0)


def _env_points_nowhere(env: ScenarioEnv) -> TenstorrentBackend:
    env.monkeypatch.setenv(ENV_VAR, str(env.tmp_path / "no-such-tt-smi"))
    return TenstorrentBackend(timeout_seconds=5.0)


def _no_devices(env: ScenarioEnv) -> TenstorrentBackend:
    use_standin(env, {STDOUT_ARGS: route("no-devices.txt", rc=1)})
    return TenstorrentBackend(timeout_seconds=5.0)


def _snapshot(fixture: str, **kwargs: Any) -> Any:
    def build(env: ScenarioEnv) -> TenstorrentBackend:
        use_standin(env, {STDOUT_ARGS: route(fixture)})
        return TenstorrentBackend(timeout_seconds=5.0, **kwargs)
    return build


def _legacy_file_mode(env: ScenarioEnv) -> TenstorrentBackend:
    use_standin(env, {STDOUT_ARGS: route(stderr=(TENSTORRENT / "argparse-pre-3.0.5.txt").read_text(), rc=2),
                      FILE_ARGS: route(write_file="snapshot-2.2-file-smbus-tx-wormhole-n150.json",
                                       saved_notice=True)})
    return TenstorrentBackend(timeout_seconds=5.0)


def _sixty_four_boards(env: ScenarioEnv) -> TenstorrentBackend:
    """64 Blackhole p150a boards: the 5.3 capture's first board repeated with its own ids."""
    snapshot = json.loads((TENSTORRENT / "snapshot-5.3-blackhole-p150a-wormhole-n150.json").read_text())
    board = snapshot["device_info"][0]
    boards = []
    for n in range(64):
        copy = json.loads(json.dumps(board))
        copy["board_info"]["board_id"] = f"{0x100014311520000 + n:016x}"
        copy["board_info"]["bus_id"] = f"0000:{n + 16:02x}:00.0"
        boards.append(copy)
    snapshot["device_info"] = boards
    use_standin(env, {STDOUT_ARGS: route(text=json.dumps(snapshot))})
    return TenstorrentBackend(timeout_seconds=5.0)


P300C, P150A = "snapshot-6.8-blackhole-p300c-board-power.json", "snapshot-5.3-blackhole-p150a-wormhole-n150.json"


def _board(fixture: str, chip: int, location: str, unit: str):
    """tt-smi's ``location`` (``telemetry/board_power``) of the ``chip``-th ``device_info`` row:
    power in W, temperature in °C, as tt-smi prints them (fixtures/tenstorrent/README.md)."""
    return json_value(TENSTORRENT / fixture, f"device_info/{chip}/{location}", unit)


SCENARIOS: list[Scenario] = [
    Scenario("tt-smi-5.3-64-boards", _sixty_four_boards, 64),
    Scenario("tool-absent", _absent, None),
    Scenario("env-override-not-executable", _env_points_nowhere, None),
    Scenario("no-devices", _no_devices, None),
    # Blackhole p150a + Wormhole n150: two boards, two generations.
    Scenario("tt-smi-5.3-p150a-n150", _snapshot(P150A), 2, dict([
        expect("tenstorrent:0000040031914035", power_watts=_board(P150A, 0, "telemetry/power", "W"),
               temperature_celsius=_board(P150A, 0, "telemetry/asic_temperature", "C"),
               power_limit_watts=_board(P150A, 0, "limits/tdp_limit", "W"))])),
    # Grayskull e150 + Wormhole n300 (L and R chips of one board: a board and its partition).
    Scenario("tt-smi-3.0-e150-n300", _snapshot("snapshot-3.0-grayskull-e150-wormhole-n300.json"), 3),
    # board_power once, on the board; the second ASIC is its partition.
    Scenario("tt-smi-6.8-p300c", _snapshot(P300C, user_lookup=lambda pid: None), 2, dict([
        expect("tenstorrent:0000046131924062", power_watts=_board(P300C, 0, "telemetry/board_power", "W"),
               temperature_celsius=_board(P300C, 0, "telemetry/asic_temperature", "C"),
               clock_mhz=800.0, utilization_percent=None, memory_used_bytes=None, parent=None,
               compute_active_percent=None),
        expect("tenstorrent:0000046131924062:1", power_watts=None,
               temperature_celsius=_board(P300C, 1, "telemetry/asic_temperature", "C"),
               parent="tenstorrent:0000046131924062")])),
    Scenario("tt-smi-3.0.5-progress-on-stdout", _snapshot("stdout-3.0.5-progress-and-ansi.txt"), 2),
    Scenario("tt-smi-2.2-file-mode", _legacy_file_mode, 1),
    Scenario("na-cells", _snapshot("snapshot-5.3-na-cells.json"), 3),
    Scenario("bad-rows-skipped", _snapshot("snapshot-bad-rows.json"), 2),
]

#: How the fault-and-drift matrix (tests/contract/test_cli_faults.py) drives tt-smi.
CLI = CliTool(env_var=ENV_VAR, executable="tt-smi", partial=TENSTORRENT / "snapshot-truncated.json",
              calls=("-s --snapshot_no_tty",),
              drift={"oldest": "tt-smi-2.2-file-mode", "newest": "tt-smi-6.8-p300c",
                     "na-fields": "na-cells", "64-devices": "tt-smi-5.3-64-boards",
                     "partitions": "tt-smi-6.8-p300c"})

"""Contract scenarios for the Huawei Ascend backend: a stand-in ``npu-smi`` printing a fixture."""

from __future__ import annotations

from allsmi.backends.ascend import TOOL, AscendBackend

from . import standin
from .fixture_truth import text_value
from .scenario import FIXTURES, CliTool, Scenario, ScenarioEnv, expect

ASCEND = FIXTURES / "ascend"
#: npu-smi's headers say MB (``Memory-Usage(MB)``) and mean MiB (fixtures/ascend/README.md).
MB_IS_MIB = {"MB": "MiB"}
TRAINING, CARDS = "npu-smi-24.1.0-910b3x4-training.txt", "npu-smi-23.0.0-310p3-two-cards.txt"
#: One chip's two table rows, found by its bus id: power, temperature on the first; AICore,
#: memory used / total and (910B) HBM used / total on the second.
_CHIP = (r"^\|[^|\n]*\|[^|\n]*\| (?P<power_W>\S+) +(?P<temp_C>\S+) [^\n]*\n"
         r"\|[^|\n]*\| {bus} +\| (?P<aicore>\S+) +(?P<mem_used>\d+) / (?P<mem_total>\d+)"
         r"(?: +(?P<hbm_used>\d+) / (?P<hbm_total>\d+))?")
_UNITS = {"aicore": "%", "power_W": "W", "temp_C": "C",
          **{column: "MB" for column in ("mem_used", "mem_total", "hbm_used", "hbm_total")}}


def chip(fixture: str, bus: str, column: str):
    """``column`` of the chip at ``bus`` in the fixture's table, in the unit its header states."""
    return text_value(ASCEND / fixture, _CHIP.format(bus=bus), _UNITS[column], group=column, aliases=MB_IS_MIB)


def _proc(fixture: str, pid: int):
    """The ``Process memory(MB)`` cell of ``pid``."""
    return text_value(ASCEND / fixture, rf"^\|[^|\n]*\| {pid} +\|[^|\n]*\| (\d+) ", "MB", aliases=MB_IS_MIB)


def backend_for(env: ScenarioEnv, fixture: str | None, *, text: str | None = None) -> AscendBackend:
    bindir = env.tmp_path / "bin"
    route = standin.route(ASCEND, fixture, text=text or "", pidfile=str(bindir / "pids"))
    exe = standin.write_standin(bindir, "npu-smi", {}, default=route)
    env.monkeypatch.setenv(TOOL.env_var, str(exe))
    return AscendBackend(search_dirs=(), lookup_user=lambda pid: None)


def _absent(env: ScenarioEnv) -> AscendBackend:
    empty = env.tmp_path / "empty"
    empty.mkdir()
    env.monkeypatch.delenv(TOOL.env_var, raising=False)
    env.monkeypatch.setenv("PATH", str(empty))
    return AscendBackend(search_dirs=(str(empty),))


def _sixty_four(env: ScenarioEnv) -> AscendBackend:
    """64 NPUs: the 910B table's first NPU repeated with its own numbers and bus ids."""
    lines = (ASCEND / "npu-smi-24.1.0-910b3x4-training.txt").read_text().splitlines()
    head, pair, sep = lines[:6], lines[6:8], lines[8]
    body = []
    for n in range(64):
        first = pair[0].replace("| 0     910B3", f"| {n:<6d}910B3", 1)
        second = pair[1].replace("0000:C1:00.0", f"0000:{n + 16:02X}:00.0")
        body += [first, second, sep]
    processes = lines[lines.index(next(x for x in lines if "Process id" in x)) - 1:][:3]
    return backend_for(env, None, text="\n".join(head + body + processes) + "\n")


SCENARIOS: list[Scenario] = [
    Scenario("no-hardware-tool-absent", _absent, None),
    Scenario("no-hardware-no-npu", lambda env: backend_for(env, "npu-smi-no-devices.txt"), None),
    # MB in the table are MiB: the 910B's memory is its HBM pair; power as printed.
    Scenario("910b3-x4-training", lambda env: backend_for(env, TRAINING), 4, dict([
        expect("ascend:0000:c1:00.0", index=0, name="Ascend 910B3", bus_id="0000:c1:00.0", health="ok",
               utilization_percent=chip(TRAINING, "0000:C1:00.0", "aicore"),
               compute_active_percent=chip(TRAINING, "0000:C1:00.0", "aicore"), compute_active_source="core_busy",
               memory_used_bytes=chip(TRAINING, "0000:C1:00.0", "hbm_used"),
               memory_total_bytes=chip(TRAINING, "0000:C1:00.0", "hbm_total"),
               power_watts=chip(TRAINING, "0000:C1:00.0", "power_W"),
               temperature_celsius=chip(TRAINING, "0000:C1:00.0", "temp_C"), driver_version="24.1.0",
               processes=[(2133411, _proc(TRAINING, 2133411))]),
        expect("ascend:0000:01:00.0", processes=[(2133412, _proc(TRAINING, 2133412)),
                                                 (2133500, _proc(TRAINING, 2133500))]),
        expect("ascend:0000:c2:00.0", health="degraded", utilization_percent=0.0, processes=[]),
        expect("ascend:0000:02:00.0", power_watts=None, utilization_percent=None,
               memory_used_bytes=chip(TRAINING, "0000:02:00.0", "hbm_used"))])),
    Scenario("310p3-two-cards", lambda env: backend_for(env, CARDS), 3, dict([
        expect("ascend:0000:82:00.0", index=0, name="Ascend 310P3",
               memory_used_bytes=chip(CARDS, "0000:82:00.0", "mem_used"),
               memory_total_bytes=chip(CARDS, "0000:82:00.0", "mem_total"),
               power_watts=chip(CARDS, "0000:82:00.0", "power_W"),
               utilization_percent=chip(CARDS, "0000:82:00.0", "aicore"),
               details__npu_id=0, details__chip_id=0, processes=[(41234, _proc(CARDS, 41234))]),
        expect("ascend:0000:82:00.1", index=1, details__chip_id=1, processes=[]),
        expect("ascend:0000:89:00.0", index=2, power_watts=None,
               memory_total_bytes=chip(CARDS, "0000:89:00.0", "mem_total"))])),
    Scenario("sixty-four-npus", _sixty_four, 64, dict([
        expect("ascend:0000:4f:00.0", index=63, power_watts=chip(TRAINING, "0000:C1:00.0", "power_W"))])),
]

CLI = CliTool(env_var=TOOL.env_var, executable="npu-smi", partial=ASCEND / "npu-smi-24.1.0-910b3x4-training.txt",
              calls=("info",),
              drift={"oldest": "310p3-two-cards", "newest": "910b3-x4-training",
                     "na-fields": "910b3-x4-training", "64-devices": "sixty-four-npus"})

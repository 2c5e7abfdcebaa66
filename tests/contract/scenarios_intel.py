"""Contract scenarios for the Intel GPU backend: sysfs and /proc trees written from the kernel's
documented layout (``fixtures/intel``), and a stand-in ``xpu-smi``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from allsmi.backends.intel import XPU_SMI, IntelGpuBackend
from allsmi.backends.intel.backend import MIN_INTERVAL
from allsmi.backends.intel.dumpstream import dump_args

from . import standin
from .fixture_truth import csv_value, fed, file_value, json_value, text_value, total
from .scenario import FIXTURES, CliTool, Scenario, ScenarioEnv, expect

INTEL = FIXTURES / "intel"
I915 = INTEL / "i915-flex170x2"
XE = INTEL / "xe-arc-b580"
DISCOVERY = "xpu-smi-discovery-flex170x2.json"
#: ``xpu-smi dump -d -1 -m 18 -i 1``: its header, then memory in use (MiB) by xpu-smi's device id.
DUMP = "xpu-smi-dump-memory-used-flex170x2.csv"
DUMP_CALL = " ".join(dump_args())
#: How often the stand-in's dump prints its rows (the real one: every ``-i`` second).
DUMP_EVERY = 0.2
#: ``xpu-smi discovery -d 0000:50:00.0 -j``: card1's properties (its memory size).
PROPERTIES = "xpu-smi-discovery-d-0000-50-00-0.json"
#: What the stand-in ``xpu-smi`` answers, by its arguments (anything else fails as xpu-smi's
#: option parser does).
XPU_SMI_CALLS = {"discovery -j": DISCOVERY, DUMP_CALL: DUMP, "discovery -d 0000:50:00.0 -j": PROPERTIES}


def xpu_smi_routes(**behaviour: Any) -> dict[str, dict[str, Any]]:
    """The stand-in's routes for :data:`XPU_SMI_CALLS`: the dump streams as xpu-smi's does (its
    header once, then its rows every :data:`DUMP_EVERY` s, the first ones after one wait too,
    until it is killed), each other call prints its fixture and exits."""
    return {call: standin.route(INTEL, fixture, **behaviour, **(
        {"once": 1, "every": DUMP_EVERY} if call == DUMP_CALL else {}))
        for call, fixture in XPU_SMI_CALLS.items()}


def _options(tree: Path) -> dict[str, str]:
    return {"sysfs_root": str(tree / "sys"), "proc_root": str(tree / "proc")}


#: What the running GPUs of the scenarios do: the GT idle 40 % of the time (60 % busy), 150 W,
#: two of card0's four compute engines busy for pid 4242 (50 %), the xe client's render engine
#: 25 % of the GPU's cycles.
IDLE_SHARE, ENGINES_BUSY, XE_SHARE = 0.4, 2, 0.25
WATTS = fed(150.0, "W", "the draw the running GPUs' energy counters advance by")


def _hwmon(tree: Path, card: str, name: str, unit: str):
    """A card's hwmon file (``power1_max`` in µW, ``energy1_input`` in µJ, ``temp*_input`` in
    millidegrees Celsius: the kernel's hwmon sysfs ABI)."""
    found = sorted((tree / "sys" / "class" / "drm" / card / "device" / "hwmon").glob(f"*/{name}"))
    return file_value(found[0], unit)


def _energy_after_first_interval(tree: Path, card: str):
    """The energy counter read at open() plus what WATTS added over the first interval."""
    return total(_hwmon(tree, card, "energy1_input", "uJ"),
                 fed(float(WATTS) * MIN_INTERVAL, "J", f"{float(WATTS)} W over the first {MIN_INTERVAL} s"))


def _resident(tree: Path, pid: int, fd: int, region: str):
    """``drm-resident-REGION`` of a DRM client's fdinfo, in the unit it states (``KiB``)."""
    return text_value(tree / "proc" / str(pid) / "fdinfo" / str(fd), rf"^drm-resident-{region}:\s+(.+)$")


class Running:
    """A copy of a fixture tree whose counters advance as the backend's clock does: the
    backend's ``sleep`` moves the clock and every counter by what the GPUs did meanwhile."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.now = 5000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for path in self.tree.rglob("*residency_ms"):
            path.write_text(f"{int(path.read_text()) + round(IDLE_SHARE * seconds * 1000)}\n")
        for path in self.tree.rglob("energy1_input"):
            path.write_text(f"{int(path.read_text()) + round(WATTS * seconds * 1e6)}\n")
        for path in self.tree.glob("proc/*/fdinfo/*"):
            text = path.read_text()
            text = re.sub(r"(drm-engine-compute:\t)(\d+)",
                          lambda m: f"{m.group(1)}{int(m.group(2)) + round(ENGINES_BUSY * seconds * 1e9)}", text)
            total = round(seconds * 1e9)
            text = re.sub(r"(drm-total-cycles-rcs:\t)(\d+)", lambda m: f"{m.group(1)}{int(m.group(2)) + total}", text)
            text = re.sub(r"(drm-cycles-rcs:\t)(\d+)",
                          lambda m: f"{m.group(1)}{int(m.group(2)) + round(XE_SHARE * total)}", text)
            path.write_text(text)


def backend_for(env: ScenarioEnv, tree: Path, xpu_smi: bool = False,
                without: tuple[str, ...] = ()) -> IntelGpuBackend:
    """The backend reading a running copy of ``tree`` less the files ``without``; ``xpu-smi``
    answering :data:`XPU_SMI_CALLS`, or none installed."""
    if tree.exists():
        copy = env.tmp_path / "tree"
        shutil.copytree(tree, copy, symlinks=True)
        tree = copy
        for name in without:
            (tree / name).unlink()
    running = Running(tree)
    if not xpu_smi:
        env.monkeypatch.delenv(XPU_SMI.env_var, raising=False)
    else:
        bindir = env.tmp_path / "bin"
        exe = standin.write_standin(bindir, "xpu-smi", xpu_smi_routes(pidfile=str(bindir / "pids")),
                                    unknown="argparse")
        env.monkeypatch.setenv(XPU_SMI.env_var, str(exe))
    return IntelGpuBackend(options=_options(tree), search_dirs=(), lookup_user=lambda pid: None,
                           clock=running.clock, sleep=running.sleep)


def _sixty_four(env: ScenarioEnv) -> IntelGpuBackend:
    """64 Flex 170 cards: the first card of the i915 tree copied under its own numbers."""
    tree = env.tmp_path / "sixty-four"
    drm = tree / "sys" / "class" / "drm"
    for n in range(64):
        shutil.copytree(I915 / "sys" / "class" / "drm" / "card0", drm / f"card{n}")
        uevent = drm / f"card{n}" / "device" / "uevent"
        uevent.write_text(uevent.read_text().replace("0000:4d:00.0", f"0000:{n + 16:02x}:00.0"))
    (tree / "proc").mkdir()
    return backend_for(env, tree)


SCENARIOS: list[Scenario] = [
    Scenario("no-hardware-other-vendor-only", lambda env: backend_for(env, INTEL / "no-intel"), None),
    Scenario("no-hardware-no-sysfs", lambda env: backend_for(env, INTEL / "no-such-tree"), None),
    # The first sample measures from the reading open() took: over that interval the GT idled 40 %
    # (60 % busy), the energy counter moved WATTS' worth, pid 4242 kept two of the four compute
    # engines busy (50 %). pid 4242 holds its resident local0 on card0 through two descriptors
    # (fd 5 and 6) of one client, counted once.
    Scenario("i915-flex170x2", lambda env: backend_for(env, I915), 2, dict([
        expect("intel:0000:4d:00.0", index=0, name="Intel Data Center GPU Flex 170", bus_id="0000:4d:00.0",
               uuid=None, utilization_percent=100 * (1 - IDLE_SHARE),
               compute_active_percent=100 * (1 - IDLE_SHARE), compute_active_source="engine_time",
               power_watts=WATTS, power_limit_watts=_hwmon(I915, "card0", "power1_max", "uW"),
               energy_joules=_energy_after_first_interval(I915, "card0"), clock_mhz=2050.0,
               memory_total_bytes=file_value(I915 / "sys/class/drm/card0/device/lmem_total_bytes", "B"),
               memory_used_bytes=None, temperature_celsius=None,
               processes=[(4242, _resident(I915, 4242, 5, "local0"))]),
        expect("intel:0000:50:00.0", index=1, clock_mhz=0.0, processes=[(4242, _resident(I915, 4242, 7, "local0"))])])),
    # xpu-smi adds the uuid (its device list), memory in use (the newest rows of its running
    # dump of metric 18, MiB, by its device id: 0 is 0000:4d:00.0) and, for card1, whose
    # kernel publishes no lmem_total_bytes (upstream i915 does not), the memory size (its
    # properties, in bytes).
    Scenario("i915-flex170x2-xpu-smi", lambda env: backend_for(
        env, I915, xpu_smi=True, without=("sys/class/drm/card1/device/lmem_total_bytes",)), 2, dict([
            expect("intel:0000:4d:00.0", uuid="01000000-0000-004d-0000-000856c08086",
                   memory_used_bytes=csv_value(INTEL / DUMP, 0, "GPU Memory Used (MiB)", "MiB"),
                   memory_total_bytes=file_value(I915 / "sys/class/drm/card0/device/lmem_total_bytes", "B"),
                   power_limit_watts=_hwmon(I915, "card0", "power1_max", "uW")),
            expect("intel:0000:50:00.0", uuid="01000000-0000-0050-0000-000856c08086",
                   memory_used_bytes=csv_value(INTEL / DUMP, 1, "GPU Memory Used (MiB)", "MiB"),
                   memory_total_bytes=json_value(INTEL / PROPERTIES, "memory_physical_size_byte", "B"))])),
    # xe: VRAM from tile0, the package temperature (temp2, labelled pkg), the limit, two GTs.
    Scenario("xe-arc-b580", lambda env: backend_for(env, XE), 1, dict([
        expect("intel:0000:03:00.0", index=1, name="Intel Arc B580",
               memory_total_bytes=file_value(XE / "sys/class/drm/card1/device/tile0/physical_vram_size_bytes", "B"),
               temperature_celsius=_hwmon(XE, "card1", "temp2_input", "mC"),
               power_limit_watts=_hwmon(XE, "card1", "power1_max", "uW"), clock_mhz=2850.0,
               energy_joules=_energy_after_first_interval(XE, "card1"),
               processes=[(7777, _resident(XE, 7777, 9, "vram0"))], details__driver="xe")])),
    Scenario("sixty-four-cards", _sixty_four, 64, dict([
        expect("intel:0000:4f:00.0", index=63, power_limit_watts=_hwmon(I915, "card0", "power1_max", "uW"),
               processes=[])])),
]

#: xpu-smi is optional: a failing one leaves the sysfs values, with a warning naming the fault.
#: One of its calls streams (the dump, running from open() to close()): a fault is what each
#: of its runs does, the dump's included.
CLI = CliTool(env_var=XPU_SMI.env_var, executable="xpu-smi", partial=INTEL / "xpu-smi-discovery-flex170x2.json",
              options=_options(I915), calls=tuple(XPU_SMI_CALLS), optional=True, stream=True,
              drift={"oldest": "i915-flex170x2", "newest": "i915-flex170x2-xpu-smi", "na-fields": "xe-arc-b580",
                     "64-devices": "sixty-four-cards"})

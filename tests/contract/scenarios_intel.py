"""Contract scenarios for the Intel GPU backend: sysfs and /proc trees written from the kernel's
documented layout (``fixtures/intel``), and a stand-in ``xpu-smi``."""

from __future__ import annotations

import shutil
from pathlib import Path

from allsmi.backends.intel import XPU_SMI, IntelGpuBackend

from . import standin
from .scenario import FIXTURES, CliTool, Scenario, ScenarioEnv, expect

INTEL = FIXTURES / "intel"
I915 = INTEL / "i915-flex170x2"
KIB = 1024


def _options(tree: Path) -> dict[str, str]:
    return {"sysfs_root": str(tree / "sys"), "proc_root": str(tree / "proc")}


def backend_for(env: ScenarioEnv, tree: Path, discovery: str | None = None) -> IntelGpuBackend:
    """The backend reading ``tree``; ``xpu-smi`` printing ``discovery``, or none installed."""
    if discovery is None:
        env.monkeypatch.delenv(XPU_SMI.env_var, raising=False)
    else:
        bindir = env.tmp_path / "bin"
        exe = standin.write_standin(bindir, "xpu-smi", {}, default=standin.route(
            INTEL, discovery, pidfile=str(bindir / "pids")))
        env.monkeypatch.setenv(XPU_SMI.env_var, str(exe))
    return IntelGpuBackend(options=_options(tree), search_dirs=(), lookup_user=lambda pid: None)


def _sixty_four(env: ScenarioEnv) -> IntelGpuBackend:
    """64 Flex 170 cards: the first card of the i915 tree copied under its own numbers."""
    tree = env.tmp_path / "tree"
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
    # The first sample measures from the reading open() took: the fixture's counters stand still,
    # so the GT never idled (busy 100 %), the energy counter did not move (0 W) and no engine ran.
    # power1_max 120000000 µW = 120 W; energy1_input 1234567890123 µJ; lmem 16 GiB; pid 4242
    # holds 2097152 KiB resident in local0 on card0 through two descriptors of one client.
    Scenario("i915-flex170x2", lambda env: backend_for(env, I915), 2, dict([
        expect("intel:0000:4d:00.0", index=0, name="Intel Data Center GPU Flex 170", bus_id="0000:4d:00.0",
               uuid=None, utilization_percent=100.0, compute_active_percent=100.0,
               compute_active_source="engine_time", power_watts=0.0,
               power_limit_watts=120.0, energy_joules=1234567.890123, clock_mhz=2050.0,
               memory_total_bytes=17179869184, memory_used_bytes=None, temperature_celsius=None,
               processes=[(4242, 2097152 * KIB)]),
        expect("intel:0000:50:00.0", index=1, clock_mhz=0.0, processes=[(4242, 262144 * KIB)])])),
    # xpu-smi adds the uuid and memory in use: 14248574976 - 11811160064 bytes.
    Scenario("i915-flex170x2-xpu-smi", lambda env: backend_for(env, I915, "xpu-smi-discovery-flex170x2.json"), 2, dict([
        expect("intel:0000:4d:00.0", uuid="01000000-0000-004d-0000-000856c08086",
               memory_used_bytes=14248574976 - 11811160064, memory_total_bytes=17179869184,
               power_limit_watts=120.0),
        expect("intel:0000:50:00.0", memory_used_bytes=None)])),
    # xe: VRAM from tile0, the package temperature (57000 m°C), 190 W limit, two GTs.
    Scenario("xe-arc-b580", lambda env: backend_for(env, INTEL / "xe-arc-b580"), 1, dict([
        expect("intel:0000:03:00.0", index=1, name="Intel Arc B580", memory_total_bytes=12884901888,
               temperature_celsius=57.0, power_limit_watts=190.0, clock_mhz=2850.0,
               energy_joules=98765.432101, processes=[(7777, 4194304 * KIB)], details__driver="xe")])),
    Scenario("sixty-four-cards", _sixty_four, 64, dict([
        expect("intel:0000:4f:00.0", index=63, power_limit_watts=120.0, processes=[])])),
]

#: xpu-smi is optional: a failing one leaves the sysfs values, with a warning naming the fault.
CLI = CliTool(env_var=XPU_SMI.env_var, executable="xpu-smi", partial=INTEL / "xpu-smi-discovery-flex170x2.json",
              options=_options(I915), calls=("discovery -j",), optional=True,
              drift={"oldest": "i915-flex170x2", "newest": "i915-flex170x2-xpu-smi", "na-fields": "xe-arc-b580",
                     "64-devices": "sixty-four-cards"})

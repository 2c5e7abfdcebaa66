"""Contract scenarios for the NVIDIA backend: a fake libnvidia-ml behind the real pynvml."""

from __future__ import annotations

import sys

from allsmi.backend_api import Backend
from allsmi.backends.nvidia import NvidiaBackend
from tests.backends.nvml_fake import FakeGpu, FakeNvml, FakeProcess, busy_looking, fleet

from .fixture_truth import fed, json_value
from .scenario import FIXTURES, Scenario, ScenarioEnv, expect

PROFILES = FIXTURES / "nvidia" / "profiles"
#: nvml.h's units, which the profiles' key suffixes name: ``_mw`` milliwatts, ``_mj`` millijoules;
#: memory (``nvmlMemory_t``, ``usedGpuMemory``) in bytes.
_SUFFIX_UNITS = {"_mw": "mW", "_mj": "mJ"}


def _profile(profile: str, location: str):
    """The value at ``location`` of ``fixtures/nvidia/profiles/PROFILE.json`` (what the fake NVML
    answers), in the unit its key names (``power_limit_mw``), bytes for memory."""
    key = location.rsplit("/", 1)[-1]
    unit = next((u for suffix, u in _SUFFIX_UNITS.items() if key.endswith(suffix)), "B")
    return json_value(PROFILES / f"{profile}.json", location, unit)


def _used(pid: int, value: int, unit: str):
    """A process's ``usedGpuMemory`` the scenario feeds the fake, in ``unit``."""
    return fed(value, unit, f"usedGpuMemory of pid {pid}")


#: what each process holds, fed to the fake NVML and expected back (nvmlProcessInfo_t: bytes)
HOLDS = {5000: (4, "GiB"), 7000: (128, "MiB"), 8001: (9, "GiB"), 8002: (1, "GiB"), 9001: (2, "GiB")}


def _holds(pid: int, base: int | None = None):
    value, unit = HOLDS[pid if base is None else base]
    return _used(pid, value, unit)


def _owner(pid: int) -> tuple[str | None, str | None]:
    return ("svc-train", f"python train.py --pid {pid}") if pid % 2 else (None, None)


def _backend(env: ScenarioEnv, fake: FakeNvml, **kwargs) -> Backend:
    fake.install(env.monkeypatch)
    return NvidiaBackend(process_owner=_owner, **kwargs)


def _no_library(env: ScenarioEnv) -> Backend:
    return _backend(env, FakeNvml([], library_missing=True))


def _no_pynvml(env: ScenarioEnv) -> Backend:
    env.monkeypatch.setitem(sys.modules, "pynvml", None)
    return NvidiaBackend()


def _driver_without_gpus(env: ScenarioEnv) -> Backend:
    return _backend(env, FakeNvml([]))


def _eight_gpus_busy(env: ScenarioEnv) -> Backend:
    gpus = fleet(8)
    for gpu in gpus:
        gpu.compute = [FakeProcess(5000 + gpu.index, int(_holds(5000 + gpu.index, 5000))), FakeProcess(6000, None)]
        gpu.graphics = [FakeProcess(6000, None), FakeProcess(7000 + gpu.index, int(_holds(7000 + gpu.index, 7000)))]
    return _backend(env, FakeNvml(gpus, latency_s=0.0002))


def _mig(env: ScenarioEnv) -> Backend:
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 1)
    a100.compute = [FakeProcess(8001, int(_holds(8001)), gpu_instance_id=1, compute_instance_id=0),
                    FakeProcess(8002, int(_holds(8002)), gpu_instance_id=5, compute_instance_id=0)]
    return _backend(env, FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", 0), a100]))


def _faults(env: ScenarioEnv) -> Backend:
    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", 0),
            FakeGpu.from_profile("h100-sxm5-80gb", 1, lost=True),
            FakeGpu.from_profile("geforce-rtx-4090", 2, not_supported={
                "nvmlDeviceGetFieldValues", "nvmlDeviceGetTotalEnergyConsumption",
                "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperatureV"}),
            FakeGpu.from_profile("rtx-6000-ada", 3, memory_used=60 << 30, util_gpu=400)]
    return _backend(env, FakeNvml(gpus))


def _old_driver(env: ScenarioEnv) -> Backend:
    gpus = fleet(2, "h100-sxm5-80gb")
    gpus[0].compute = [FakeProcess(9001, int(_holds(9001)))]
    return _backend(env, FakeNvml(gpus, driver="r440", driver_version="440.118.02"))


def _hopper_busy_looking(env: ScenarioEnv) -> Backend:
    """GPM: one H100 at 100 % utilization with 20 % of its SMs active, one in MIG mode whose
    GPU instances each report their own activity (``nvmlGpmMigSampleGet``)."""
    h100 = busy_looking(FakeGpu.from_profile("h100-sxm5-80gb", 0))
    mig = busy_looking(FakeGpu.from_profile("a100-sxm4-40gb-mig", 1, name="NVIDIA H100 80GB HBM3"))
    for instance, active in zip(mig.migs, (75.0, 0.0, 12.5)):
        instance.gpm = {2: active}  # SM activity per GPU instance (what DCGM gives per MIG too)
        instance.name = instance.name.replace("A100-SXM4-40GB", "H100 80GB HBM3")
    return _backend(env, FakeNvml([h100, mig]))


A100 = "a100-sxm4-40gb-mig"

SCENARIOS: list[Scenario] = [
    Scenario("no-libnvidia-ml", _no_library, expected_devices=None),
    Scenario("pynvml-not-installed", _no_pynvml, expected_devices=None),
    Scenario("driver-without-gpus", _driver_without_gpus, expected_devices=None),
    # pid 6000 uses every GPU (memory unknown: NVML's sentinel): it is listed on each
    Scenario("eight-gpus-with-processes", _eight_gpus_busy, expected_devices=8, expected=[
        expect(f"GPU-{i:08x}-1111-4222-8333-{0xFACE0000 + i:012x}",
               processes=[(5000 + i, _holds(5000 + i, 5000)), (6000, None), (7000 + i, _holds(7000 + i, 7000))])
        for i in (0, 1, 7)]),
    Scenario("mig-three-instances", _mig, expected_devices=5, expected=[
        # the board's instant power, limit and energy: once, on the GPU
        expect("GPU-00000001-1111-4222-8333-0000face0001", parent=None,
               power_watts=_profile(A100, "power_instant_mw"), power_limit_watts=_profile(A100, "power_limit_mw"),
               energy_joules=_profile(A100, "energy_mj"), partition_share=None),
        expect("MIG-00000001-0000-5000-9000-000000000001", parent="GPU-00000001-1111-4222-8333-0000face0001",
               partition_share=3 / 7, power_watts=None, energy_joules=None,
               memory_total_bytes=_profile(A100, "mig_instances/slot=0/memory_total"),
               memory_used_bytes=_profile(A100, "mig_instances/slot=0/memory_used"),
               processes=[(8001, _holds(8001))]),
        expect("MIG-00000001-0001-5000-9000-000000000005", partition_share=2 / 7,
               processes=[(8002, _holds(8002))]),
        expect("MIG-00000001-0003-5000-9000-00000000000d", partition_share=1 / 7, processes=[]),
    ]),
    Scenario("lost-unsupported-garbage", _faults, expected_devices=4),
    Scenario("hopper-gpm-busy-looking", _hopper_busy_looking, expected_devices=5, expected=[
        # GPM: percentages as given, MiB/s (nvml.h) times 2**20
        expect("GPU-00000000-1111-4222-8333-0000face0000", utilization_percent=100.0,
               compute_active_percent=20.0, compute_active_source="sm_active",
               sm_occupancy_percent=10.0, tensor_active_percent=0.0,
               memory_bandwidth_percent=3.5, pcie_tx_bytes_per_second=12.0 * 2**20,
               pcie_rx_bytes_per_second=48.0 * 2**20, interconnect_rx_bytes_per_second=0.0),
        expect("MIG-00000001-0000-5000-9000-000000000001", compute_active_percent=75.0,
               compute_active_source="sm_active", memory_bandwidth_percent=None,
               sm_occupancy_percent=None),
        expect("MIG-00000001-0001-5000-9000-000000000005", compute_active_percent=0.0),
        expect("MIG-00000001-0003-5000-9000-00000000000d", compute_active_percent=12.5),
    ]),
    Scenario("r440-driver", _old_driver, expected_devices=2, expected=[
        expect("GPU-00000000-1111-4222-8333-0000face0000",
               memory_total_bytes=_profile("h100-sxm5-80gb", "memory_total"),
               power_limit_watts=_profile("h100-sxm5-80gb", "power_limit_mw"),
               processes=[(9001, _holds(9001))]),
    ]),
]

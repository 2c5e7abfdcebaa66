"""The NVIDIA backend against a fake libnvidia-ml behind the real pynvml."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pynvml
import pytest

from allsmi.support.pidns import pid_view

from allsmi.backend_api import BackendError, BackendUnavailable
from allsmi.backends.nvidia import nvml
from allsmi.backends.nvidia import NvidiaBackend
from allsmi.schema import DeviceSample

from .nvml_fake import FakeGpu, FakeNvml, FakeProcess, fleet


def owners(pid: int) -> tuple[str | None, str | None]:
    return f"user{pid}", f"/usr/bin/train --rank {pid}"


def opened(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, **kwargs) -> NvidiaBackend:
    fake.install(monkeypatch)
    kwargs.setdefault("process_owner", owners)
    backend = NvidiaBackend(**kwargs)
    backend.open()
    return backend


def by_id(samples) -> dict[str, DeviceSample]:
    return {s.id: s for s in samples}


def test_values_identity_and_units(monkeypatch, backends):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0)
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    [dev] = backend.sample()
    assert fake.callback_errors == []
    assert dev.id == gpu.uuid == dev.uuid
    assert (dev.vendor, dev.kind, dev.backend, dev.health) == ("nvidia", "gpu", "nvidia", "ok")
    assert dev.index == 0
    assert dev.name == "NVIDIA RTX 6000 Ada Generation"
    assert dev.bus_id == "00000000:18:00.0" and isinstance(dev.bus_id, str)
    assert dev.driver_version == "550.54.15"
    assert dev.firmware_version == "95.02.5D.00.01"
    assert dev.utilization_percent == 63.0
    assert dev.memory_used_bytes == 8589934592
    assert dev.memory_total_bytes == 51527024640
    assert dev.temperature_celsius == 67.0
    assert dev.power_watts == pytest.approx(201.5)          # 201500 mW
    assert dev.power_limit_watts == pytest.approx(300.0)    # 300000 mW
    assert dev.energy_joules == pytest.approx(4567890.123)  # 4567890123 mJ
    assert dev.clock_mhz == 2505.0
    assert dev.fan_percent == 45.0
    assert dev.details["pstate"] == "P2"
    assert dev.details["clocks_event_reasons_mask"] == 36
    assert dev.details["clocks_event_reasons"] == ("sw_power_cap", "sw_thermal_slowdown")
    assert dev.details["ecc_corrected_volatile"] == 1
    assert dev.details["ecc_uncorrected_aggregate"] == 0
    assert dev.details["memory_reserved_bytes"] == 587202560
    assert dev.details["memory_activity_percent"] == 22.0
    # an Ada GPU has no GPM: the activity figures are unknown, and the status says why
    assert dev.compute_active_percent is None and dev.compute_active_source is None
    assert backend.warnings == ["no compute activity on GPU 0 (GPM not supported on this "
                                "GPU; it needs Hopper or later)"]


def test_memory_v2_excludes_reserved_and_v1_fallback(monkeypatch, backends):
    current = FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", 0)])
    backend = opened(current, monkeypatch)
    backends.append(backend)
    [v2] = backend.sample()
    assert v2.memory_used_bytes == 42949672960
    assert v2.details["memory_info_version"] == 2
    assert current.calls["nvmlDeviceGetMemoryInfo"] == 0

    old = FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", 0)], driver="r470")
    backend = opened(old, monkeypatch)
    backends.append(backend)
    old.reset_counts()
    [v1] = backend.sample()
    backend.sample()
    # the v1 struct's "used" includes the reserved memory, as old nvidia-smi showed it
    assert v1.memory_used_bytes == 42949672960 + 503316480
    assert v1.memory_total_bytes == 85520809984
    assert v1.details["memory_info_version"] == 1
    assert "memory_reserved_bytes" not in v1.details
    assert old.calls["nvmlDeviceGetMemoryInfo"] == 2


def test_memory_struct_version_is_checked(monkeypatch, backends):
    """A v2 struct with the wrong version tag is refused by the library; v1 takes over."""
    fake = FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", 0)])
    monkeypatch.setattr(pynvml, "nvmlMemory_v2", 0x01000028)
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    [dev] = backend.sample()
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1
    assert dev.details["memory_info_version"] == 1
    backend.sample()
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1  # not asked again


def test_not_supported_gives_none_and_is_not_asked_again(monkeypatch, backends):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0,
                               not_supported={"nvmlDeviceGetFanSpeed",
                                              "nvmlDeviceGetPerformanceState", "field:3"})
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    for _ in range(3):
        [dev] = backend.sample()
        assert dev.fan_percent is None
        assert "pstate" not in dev.details
        assert "ecc_corrected_volatile" not in dev.details
        assert dev.details["ecc_uncorrected_volatile"] == 0
        assert dev.temperature_celsius == 67.0
        assert dev.health == "ok"
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 1
    assert fake.calls["nvmlDeviceGetPerformanceState"] == 1
    assert backend.warnings == []


def test_ga100_power_comes_from_the_instant_field(monkeypatch, backends):
    fake = FakeNvml([FakeGpu.from_profile("a100-sxm4-40gb-mig", 0, mig_mode=0, migs=[])])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    [dev] = backend.sample()
    [dev] = backend.sample()
    assert dev.power_watts == pytest.approx(98.765)
    assert dev.utilization_percent is None
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 0


def test_driver_without_power_fields_uses_the_dedicated_calls(monkeypatch, backends):
    gpu = FakeGpu.from_profile("h100-sxm5-80gb", 0, not_supported={"field:83"})
    fake = FakeNvml([gpu], driver="r470")
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    fake.reset_counts()
    for _ in range(2):
        [dev] = backend.sample()
        assert dev.power_watts == pytest.approx(512.345)
        assert dev.power_limit_watts == pytest.approx(700.0)
        assert dev.energy_joules == pytest.approx(912345678.901)
        assert dev.temperature_celsius == 54.0
        assert dev.details["clocks_event_reasons"] == ("sw_power_cap",)
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 2
    assert fake.calls["nvmlDeviceGetEnforcedPowerLimit"] == 2
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2
    assert fake.calls["nvmlDeviceGetTemperature"] == 2
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2
    assert fake.callback_errors == []


def test_field_batch_failing_as_a_whole_falls_back(monkeypatch, backends):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0, not_supported={"nvmlDeviceGetFieldValues"})
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    backend.sample()
    [dev] = backend.sample()
    assert dev.power_watts == pytest.approx(201.5)
    assert dev.energy_joules == pytest.approx(4567890.123)
    assert "ecc_corrected_volatile" not in dev.details
    assert fake.calls["nvmlDeviceGetFieldValues"] == 1


def test_lost_gpu_is_isolated(monkeypatch, backends):
    gpus = fleet(4)
    fake = FakeNvml(gpus)
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    gpus[1].lost = True
    devices = backend.sample()
    assert [d.health for d in devices] == ["ok", "lost", "ok", "ok"]
    lost = devices[1]
    assert lost.id == gpus[1].uuid and lost.name == gpus[1].name
    for name in ("utilization_percent", "memory_used_bytes", "power_watts", "energy_joules",
                 "temperature_celsius", "clock_mhz", "fan_percent"):
        assert getattr(lost, name) is None
        assert getattr(devices[2], name) is not None
    assert "GPU is lost" in lost.details["error"]
    fake.reset_counts()
    backend.sample()
    assert fake.device_calls[1] == 0  # a lost GPU costs nothing until reopened
    assert fake.device_calls[0] > 0


def test_gpu_lost_before_open_is_reported(monkeypatch, backends):
    gpus = fleet(3)
    gpus[2].lost = True
    backend = opened(FakeNvml(gpus), monkeypatch)
    backends.append(backend)
    devices = backend.sample()
    assert [d.health for d in devices] == ["ok", "ok", "lost"]
    assert devices[2].id == "nvidia:index-2"
    assert any("GPU 2" in w for w in backend.warnings)


def test_unknown_error_is_lost_for_that_cycle_only(monkeypatch, backends):
    gpus = fleet(2)
    backend = opened(FakeNvml(gpus), monkeypatch)
    backends.append(backend)
    gpus[0].unknown_error = True
    assert [d.health for d in backend.sample()] == ["lost", "ok"]
    gpus[0].unknown_error = False
    assert [d.health for d in backend.sample()] == ["ok", "ok"]


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"library_missing": True}, "libnvidia-ml.so.1"),
    ({"init_error": 9}, "kernel driver is not loaded"),
])
def test_absent_driver_is_unavailable(monkeypatch, kwargs, needle):
    FakeNvml([], **kwargs).install(monkeypatch)
    backend = NvidiaBackend()
    probe = backend.probe()
    assert not probe.available and needle in probe.reason
    with pytest.raises(BackendUnavailable, match=re.escape(needle)):
        backend.open()
    backend.close()


def test_pynvml_not_installed_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    backend = NvidiaBackend()
    probe = backend.probe()
    assert not probe.available and "nvidia-ml-py" in probe.reason
    with pytest.raises(BackendUnavailable, match="nvidia-ml-py"):
        backend.open()


@pytest.mark.parametrize(("code", "needle"), [(4, "NoPermission"), (18, "reload the nvidia")])
def test_broken_nvml_is_an_error_with_a_clear_message(monkeypatch, code, needle):
    FakeNvml(fleet(1), init_error=code).install(monkeypatch)
    backend = NvidiaBackend()
    probe = backend.probe()
    # present but refusing is not "absent": probe lets open() raise, so the status is "error"
    assert probe.available and needle in probe.details["problem"]
    with pytest.raises(BackendError, match=needle) as raised:
        backend.open()
    assert not isinstance(raised.value, BackendUnavailable)


def test_no_permission_on_one_reading(monkeypatch, backends):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0, no_permission={"nvmlDeviceGetFanSpeed"})
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    [dev] = backend.sample()
    assert dev.fan_percent is None and dev.power_watts is not None
    assert any("NoPermission" in w and "fan_speed" in w for w in backend.warnings)
    backend.sample()
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 1


def test_no_gpus(monkeypatch, backends):
    FakeNvml([]).install(monkeypatch)
    backend = NvidiaBackend()
    probe = backend.probe()
    assert not probe.available and "no NVIDIA GPU" in probe.reason
    backend.open()
    backends.append(backend)
    assert backend.sample() == []


def test_mig_children_follow_their_parent(monkeypatch, backends):
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 1)
    a100.compute = [FakeProcess(4001, 10 << 30, gpu_instance_id=1, compute_instance_id=0),
                    FakeProcess(4002, 1 << 30, gpu_instance_id=13, compute_instance_id=0)]
    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", 0), a100]
    fake = FakeNvml(gpus)
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    devices = backend.sample()
    assert fake.callback_errors == []
    assert [d.parent for d in devices] == [None, None, a100.uuid, a100.uuid, a100.uuid]
    parent, children = devices[1], devices[2:]
    assert parent.details["mig_mode"] is True
    assert parent.power_watts == pytest.approx(98.765)
    assert parent.processes == ()
    for child, mig in zip(children, a100.migs):
        assert child.id == child.uuid == mig.uuid and child.uuid.startswith("MIG-")
        assert child.name == mig.name
        assert child.memory_total_bytes == mig.memory_total
        assert child.memory_used_bytes == mig.memory_used
        assert child.power_watts is None and child.energy_joules is None
        assert child.details["gpu_instance_id"] == mig.gpu_instance_id
    assert [d.details["mig_slot"] for d in children] == [0, 1, 3]  # slot 2 is empty
    assert [p.pid for p in children[0].processes] == [4001]
    assert children[1].processes == ()
    assert [p.pid for p in children[2].processes] == [4002]
    assert devices[0].details["mig_mode"] is False
    # 3g.20gb, 2g.10gb and 1g.5gb of the A100's 7 compute slices
    assert [c.partition_share for c in children] == [3 / 7, 2 / 7, 1 / 7]
    assert parent.partition_share is None and devices[0].partition_share is None


@pytest.mark.parametrize("absent, total, expected", [
    (set(), 7, [3 / 7, 2 / 7, 1 / 7]),
    # an older driver: v1 profile struct only, no device attributes: slices from the names
    ({"nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetAttributes_v2"}, 7, [3 / 7, 2 / 7, 1 / 7]),
    # no profile information at all: the share is unknown, not guessed
    ({"nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstanceProfileInfo"}, 7, [None] * 3),
    (set(), 4, [None, 2 / 4, 1 / 4]),   # a 4-slice GPU (A30); the first instance answers garbage
])
def test_mig_partition_share_from_profile_info(monkeypatch, backends, absent, total, expected):
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 0, mig_total_slices=total)
    if total == 4:
        # 5 of 4 slices is not believed, and without a profile in the name the share is unknown
        a100.migs[0].gpu_slices = 5
        a100.migs[0].name = "NVIDIA A30 MIG"
    fake = FakeNvml([a100], absent_symbols=absent)
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    children = [d for d in backend.sample() if d.parent is not None]
    assert fake.callback_errors == []
    assert [c.partition_share for c in children] == expected


def test_mig_gpu_lost_takes_its_children(monkeypatch, backends):
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 0)
    backend = opened(FakeNvml([a100]), monkeypatch)
    backends.append(backend)
    a100.lost = True
    devices = backend.sample()
    assert [d.health for d in devices] == ["lost"] * 4
    assert all(d.memory_used_bytes is None for d in devices)


def test_processes_are_deduplicated_with_sentinel_memory(monkeypatch, backends):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0)
    gpu.compute = [FakeProcess(1200, 3 << 30), FakeProcess(1300, None)]
    gpu.graphics = [FakeProcess(1200, 3 << 30), FakeProcess(1400, 256 << 20)]
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    fake.reset_counts()
    [dev] = backend.sample()
    assert [(p.pid, p.memory_bytes) for p in dev.processes] == [
        (1200, 3 << 30), (1300, None), (1400, 256 << 20)]
    assert dev.processes[0].user == "user1200"
    assert dev.processes[0].command == "/usr/bin/train --rank 1200"
    # one library call per list, not pynvml's size-then-fill pair
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert fake.calls["nvmlDeviceGetGraphicsRunningProcesses_v3"] == 1


@pytest.mark.parametrize(("driver", "symbol", "instance"), [
    ("current", "nvmlDeviceGetComputeRunningProcesses_v3", 1),
    ("r470", "nvmlDeviceGetComputeRunningProcesses_v2", 1),
    ("r440", "nvmlDeviceGetComputeRunningProcesses", None),
])
def test_process_info_struct_versions(monkeypatch, backends, driver, symbol, instance):
    gpu = FakeGpu.from_profile("h100-sxm5-80gb", 0)
    gpu.compute = [FakeProcess(2100, 5 << 30, gpu_instance_id=1, compute_instance_id=0),
                   FakeProcess(2200, None)]
    fake = FakeNvml([gpu], driver=driver).install(monkeypatch)
    nvml.ensure_init()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    listed = nvml.ProcessListReader(pynvml).read(handle, "Compute")
    assert [(p.pid, p.memory_bytes) for p in listed] == [(2100, 5 << 30), (2200, None)]
    assert listed[0].gpu_instance_id == instance
    assert listed[1].gpu_instance_id is None
    assert fake.calls[symbol] == 1
    backend = NvidiaBackend(process_owner=owners)
    backend.open()
    backends.append(backend)
    [dev] = backend.sample()
    assert [p.pid for p in dev.processes] == [2100, 2200]
    assert fake.callback_errors == []


def test_process_array_grows_then_one_call(monkeypatch, backends):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0)
    gpu.compute = [FakeProcess(10_000 + i, i << 20) for i in range(40)]
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    fake.reset_counts()
    [dev] = backend.sample()
    assert len(dev.processes) == 40
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2
    fake.reset_counts()
    backend.sample()
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_process_owner_through_psutil():
    if not pid_view("/proc").host:
        pytest.skip("outside the host's PID namespace, no owner is read (allsmi/support/pidns.py)")
    owners_of = NvidiaBackend()._process_owner
    user, command = owners_of(os.getpid())
    assert user and command
    assert "python" in command.lower() or "pytest" in command
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert owners_of(child.pid) == (None, None)  # vanished: no crash, no values


def test_at_most_eleven_calls_per_gpu_per_cycle(monkeypatch, backends):
    """Ten reads, plus one per-process utilization call on a GPU that lists processes."""
    gpus = fleet(8)
    for gpu in gpus:
        gpu.compute = [FakeProcess(3000 + gpu.index, 2 << 30)]
        gpu.graphics = [FakeProcess(3000 + gpu.index, 2 << 30), FakeProcess(3100, 64 << 20)]
    fake = FakeNvml(gpus)
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    backend.sample()  # first cycle may learn what is unsupported
    fake.reset_counts()
    cycles = 5
    for _ in range(cycles):
        devices = backend.sample()
        assert all(d.health == "ok" and d.fan_percent == 45.0 for d in devices)
    for gpu in gpus:
        assert fake.device_calls[gpu.index] <= 11 * cycles
    assert fake.total_calls() <= 11 * len(gpus) * cycles
    assert fake.calls["nvmlDeviceGetProcessesUtilizationInfo"] == len(gpus) * cycles
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0  # time-window call is opt-in


def test_pcie_throughput_is_opt_in(monkeypatch, backends):
    fake = FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", 0)])
    backend = opened(fake, monkeypatch, options={"pcie_throughput": True})
    backends.append(backend)
    [dev] = backend.sample()
    assert dev.details["pcie_tx_kilobytes_per_second"] == 51200
    assert dev.details["pcie_rx_kilobytes_per_second"] == 20480
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 2


def test_processes_can_be_switched_off(monkeypatch, backends):
    gpu = FakeGpu.from_profile("h100-sxm5-80gb", 0, compute=[FakeProcess(77, 1 << 20)])
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, options={"processes": False})
    backends.append(backend)
    [dev] = backend.sample()
    assert dev.processes is None  # switched off: unknown, not "nobody"
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 0


def test_nvml_init_once_per_process(monkeypatch, backends):
    fake = FakeNvml(fleet(2)).install(monkeypatch)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(nvml.ensure_init()))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for _ in range(3):
        backend = NvidiaBackend(process_owner=owners)
        assert backend.probe().available
        backend.open()
        backend.sample()
        backend.close()
        backend.close()
    assert len(results) == 8
    assert fake.calls["nvmlInitWithFlags"] == 1
    assert fake.calls["nvmlShutdown"] == 0


def test_gpus_are_read_concurrently(monkeypatch, backends):
    def cycle_seconds(workers: int) -> float:
        fake = FakeNvml(fleet(8), latency_s=0.002)
        backend = opened(fake, monkeypatch, options={"workers": workers})
        backends.append(backend)
        backend.sample()
        start = time.perf_counter()
        backend.sample()
        return time.perf_counter() - start

    serial = cycle_seconds(1)
    parallel = cycle_seconds(8)
    assert serial >= 8 * 10 * 0.002
    assert parallel < serial / 2


def test_a_hung_gpu_does_not_hold_up_the_others(monkeypatch, backends):
    gpus = fleet(3)
    fake = FakeNvml(gpus)
    backend = opened(fake, monkeypatch, timeout_seconds=0.3)
    backends.append(backend)
    fake.reset_counts()
    gpus[1].stall_s = 0.1  # ten calls: about a second for one read
    start = time.perf_counter()
    devices = backend.sample()
    assert time.perf_counter() - start < 0.9
    assert [d.health for d in devices] == ["ok", "unknown", "ok"]
    assert devices[1].power_watts is None and devices[0].power_watts is not None
    assert any("did not answer" in w for w in backend.warnings)
    assert [d.health for d in backend.sample()] == ["ok", "unknown", "ok"]
    gpus[1].stall_s = 0.0
    assert [d.health for d in backend.sample()] == ["ok", "ok", "ok"]
    # three cycles for the healthy GPUs, and one read (never a second queued one) for GPU 1
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 2 * 3 + 1


def test_implausible_values_are_dropped(monkeypatch, backends):
    gpu = FakeGpu.from_profile("geforce-rtx-4090", 0, util_gpu=250, memory_used=26 << 30)
    backend = opened(FakeNvml([gpu]), monkeypatch)
    backends.append(backend)
    [dev] = backend.sample()
    assert dev.utilization_percent is None
    assert dev.memory_used_bytes is None and dev.memory_total_bytes == gpu.memory_total
    assert dev.fan_percent == 100.0 and dev.details["fan_speed_raw_percent"] == 112.0
    assert "ecc_corrected_volatile" not in dev.details  # GeForce: no ECC
    assert any("exceeds total" in w for w in backend.warnings)


def test_sample_before_open_is_an_error():
    with pytest.raises(BackendError):
        NvidiaBackend().sample()


def test_text_decoding():
    assert nvml.text(b"NVIDIA H100\0garbage") == "NVIDIA H100"
    assert nvml.text("  GPU-1 ") == "GPU-1"
    assert nvml.text(b"") is None and nvml.text(None) is None


def test_fake_exports_only_real_nvml_symbols():
    """The fake cannot drift from pynvml: every symbol it exports is one pynvml looks up."""
    source = Path(pynvml.__file__).read_text()
    looked_up = set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', source))
    # the unversioned v1 process symbols predate the versioned ones pynvml 12+ calls
    v1 = {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"}
    exported = set(vars(FakeNvml([]).lib))
    assert exported - v1 <= looked_up, exported - v1 - looked_up


def test_per_process_utilization_since_the_previous_cycle(monkeypatch, backends):
    """nvmlDeviceGetProcessesUtilizationInfo: each sample once, none older than the last read."""
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0)
    gpu.compute = [FakeProcess(10, 1 << 30, sm_util=75, mem_util=40, enc_util=3),
                   FakeProcess(11, 1 << 30, sm_util=25)]
    gpu.graphics = [FakeProcess(12, 1 << 20)]  # listed, no samples: ran nothing
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    fake.reset_counts()
    before = time.time()
    [dev] = backend.sample()
    assert fake.callback_errors == []
    procs = {p.pid: p for p in dev.processes}
    assert (procs[10].utilization_percent, procs[10].memory_utilization_percent,
            procs[10].encoder_utilization_percent, procs[10].decoder_utilization_percent) == \
        (75.0, 40.0, 3.0, 0.0)
    assert procs[11].utilization_percent == 25.0 and procs[12].utilization_percent == 0.0
    assert fake.calls["nvmlDeviceGetProcessesUtilizationInfo"] == 1  # one call per cycle
    # First read: the last second only (no stale history).
    assert (before - 1.5) * 1e6 <= gpu.util_asked[0] <= (time.time() - 1.0) * 1e6
    first = max(x[1] for x in gpu.util_samples)
    gpu.util_samples.append((10, int((before - 5) * 1e6), 99, 0, 0, 0))  # an old sample
    gpu.compute[0].sm_util = 50
    time.sleep(0.002)
    [dev] = backend.sample()
    assert gpu.util_asked[1] == first  # later: the newest timestamp already taken
    assert {p.pid: p.utilization_percent for p in dev.processes} == {10: 50.0, 11: 25.0, 12: 0.0}
    # Nothing new since: NotFound, every process ran 0% (no double counting of old samples).
    for proc in gpu.compute:
        proc.sm_util = None
    [dev] = backend.sample()
    assert {p.pid: p.utilization_percent for p in dev.processes} == {10: 0.0, 11: 0.0, 12: 0.0}
    assert fake.callback_errors == []


def test_per_process_utilization_means_the_samples_of_the_interval(monkeypatch, backends):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0)
    gpu.compute = [FakeProcess(10, 1 << 30)]
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    backend.sample()
    stamp = int(time.time() * 1e6)
    gpu.util_samples += [(10, stamp + 100, 80, 0, 0, 0), (10, stamp + 200, 40, 0, 0, 0)]
    [dev] = backend.sample()
    assert dev.processes[0].utilization_percent == 60.0


@pytest.mark.parametrize("driver", ["r470", "r440"])
def test_per_process_utilization_falls_back_to_the_older_call(monkeypatch, backends, driver):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0)
    gpu.compute = [FakeProcess(10, 1 << 30, sm_util=75), FakeProcess(11, 1 << 30, sm_util=25)]
    fake = FakeNvml([gpu], driver=driver)
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    [dev] = backend.sample()
    assert {p.pid: p.utilization_percent for p in dev.processes} == {10: 75.0, 11: 25.0}
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 1
    assert fake.callback_errors == []


def test_per_process_utilization_unsupported_is_unknown_and_not_asked_again(monkeypatch, backends):
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0)
    gpu.compute = [FakeProcess(10, 1 << 30, sm_util=75)]
    gpu.not_supported.add("nvmlDeviceGetProcessesUtilizationInfo")
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    [dev] = backend.sample()
    assert dev.processes[0].utilization_percent is None
    fake.reset_counts()
    backend.sample()
    assert fake.calls["nvmlDeviceGetProcessesUtilizationInfo"] == 0

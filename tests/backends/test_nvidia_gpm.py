"""GPM (Hopper and later): honest compute activity beside the headline utilization, per GPU and
per MIG GPU instance, through the real pynvml over the test suite's fake libnvidia-ml."""

from __future__ import annotations

import pytest

from allsmi.backends.nvidia import NvidiaBackend, gpm
from allsmi.schema import DEVICE_ACTIVITY, DEVICE_TRAFFIC

from .nvml_fake import FakeGpu, FakeNvml, busy_looking

MIB = 1024 * 1024
ACTIVITY_FIELDS = DEVICE_ACTIVITY + DEVICE_TRAFFIC + ("compute_active_source",)


@pytest.fixture
def no_wait(monkeypatch):
    """Cycles as fast as the test runs: NVIDIA's 0.1 s between samples is not waited for."""
    monkeypatch.setattr(gpm, "MIN_INTERVAL_SECONDS", 0.0)


def opened(fake: FakeNvml, monkeypatch, backends, **options) -> NvidiaBackend:
    fake.install(monkeypatch)
    backend = NvidiaBackend(options={"processes": False, **options})
    backends.append(backend)
    backend.open()
    return backend


def hopper(index: int = 0, **overrides) -> FakeGpu:
    return busy_looking(FakeGpu.from_profile("h100-sxm5-80gb", index, **overrides), 20.0)


def hopper_in_mig_mode(index: int = 0) -> FakeGpu:
    """The A100 profile's MIG layout (3g, 2g, 1g instances) on a GPU with GPM."""
    gpu = busy_looking(FakeGpu.from_profile("a100-sxm4-40gb-mig", index,
                                            name="NVIDIA H100 80GB HBM3"))
    for mig, active in zip(gpu.migs, (90.0, 0.0, 35.5)):
        mig.gpm = {2: active, 3: active / 3, 5: active / 2, 10: 12.0}
        mig.name = mig.name.replace("A100-SXM4-40GB", "H100 80GB HBM3")
    return gpu


def no_activity(dev) -> bool:
    return all(getattr(dev, name) is None for name in ACTIVITY_FIELDS)


def test_busy_looking_gpu_shows_both_figures_from_the_first_sample(monkeypatch, backends):
    """100 % utilization, 20 % SM active: both reported, units converted, in one snapshot."""
    fake = FakeNvml([hopper()])
    backend = opened(fake, monkeypatch, backends)
    [dev] = backend.sample()
    assert dev.utilization_percent == 100.0
    assert dev.compute_active_percent == 20.0 and dev.compute_active_source == "sm_active"
    assert dev.sm_occupancy_percent == 10.0
    assert dev.tensor_active_percent == 0.0  # measured zero is zero, not unknown
    assert dev.memory_bandwidth_percent == 3.5
    assert dev.pcie_tx_bytes_per_second == 12.0 * MIB
    assert dev.pcie_rx_bytes_per_second == 48.0 * MIB
    assert dev.interconnect_rx_bytes_per_second == 0.0
    assert dev.interconnect_tx_bytes_per_second == 0.0
    assert backend.warnings == []


def test_one_sample_per_gpu_per_cycle_and_the_interval_between_them(monkeypatch, backends,
                                                                     no_wait):
    gpus = [hopper(0), hopper(1)]
    fake = FakeNvml(gpus)
    backend = opened(fake, monkeypatch, backends)
    assert fake.calls["nvmlGpmSampleGet"] == 2  # the first sample of each, at open
    fake.reset_counts()
    cycles = 4
    for cycle in range(cycles):
        gpus[1].gpm = {**gpus[1].gpm, 2: 10.0 * cycle}  # what GPU 1 did since the last cycle
        devices = backend.sample()
        assert devices[1].compute_active_percent == 10.0 * cycle
        assert devices[0].compute_active_percent == 20.0
    assert fake.calls["nvmlGpmSampleGet"] == 2 * cycles
    assert fake.calls["nvmlGpmMetricsGet"] == 2 * cycles
    assert fake.calls["nvmlGpmSampleAlloc"] == 0  # two buffers per GPU, allocated at open
    assert fake.gpm_live_samples() == 4


def test_a_cycle_sooner_than_0_1_s_repeats_the_last_interval(monkeypatch, backends):
    monkeypatch.setattr(gpm, "MIN_INTERVAL_SECONDS", 3600.0)  # every later cycle is "too soon"
    gpu = hopper()
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    # the first cycle waits (at most 0.1 s) for its interval; not an hour
    first = backend.sample()[0]
    gpu.gpm = {2: 99.0}
    again = backend.sample()[0]
    assert first.compute_active_percent == again.compute_active_percent == 20.0
    assert fake.calls["nvmlGpmMetricsGet"] <= 1


def test_samples_are_freed_on_close(monkeypatch, backends):
    fake = FakeNvml([hopper(0), hopper(1), hopper_in_mig_mode(2)])
    backend = opened(fake, monkeypatch, backends)
    backend.sample()
    # two buffers per target: two GPUs, a MIG-mode GPU and its three GPU instances
    assert fake.gpm_live_samples() == 2 * 6
    backend.close()
    assert fake.gpm_live_samples() == 0 and fake.gpm_freed == 12
    backend.close()  # idempotent: nothing freed twice
    assert fake.gpm_freed == 12
    backend.open()  # reopened: new samples, activity again
    assert backend.sample()[0].compute_active_percent == 20.0


def test_a_mig_slice_reports_its_own_activity(monkeypatch, backends):
    gpu = hopper_in_mig_mode()
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    devices = backend.sample()
    parent, *slices = devices
    assert parent.parent is None and parent.compute_active_percent == 20.0
    assert [d.parent for d in slices] == [parent.id] * 3
    assert [d.compute_active_percent for d in slices] == [90.0, 0.0, 35.5]
    assert {d.compute_active_source for d in slices} == {"sm_active"}
    assert [d.sm_occupancy_percent for d in slices] == [30.0, 0.0, 35.5 / 3]
    assert slices[0].pcie_rx_bytes_per_second is None  # the instance's GPM gave none
    assert fake.calls["nvmlGpmMigSampleGet"] == 3 * 2  # at open, then once per cycle


def test_mig_instances_sharing_a_gpu_instance_share_one_sample(monkeypatch, backends):
    gpu = hopper_in_mig_mode()
    second = gpu.migs[0]
    from dataclasses import replace
    gpu.migs.append(replace(second, slot=4, uuid=second.uuid[:-1] + "f", compute_instance_id=1,
                            name="NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb"))
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    devices = backend.sample()
    assert [d.compute_active_percent for d in devices[1:]] == [90.0, 0.0, 35.5, 90.0]
    assert fake.calls["nvmlGpmMigSampleGet"] == 3 * 2  # per GPU instance, not per MIG device


def test_older_gpu_gives_none_and_says_why_once(monkeypatch, backends):
    fake = FakeNvml([FakeGpu.from_profile("a100-sxm4-40gb-mig", 0),
                     FakeGpu.from_profile("rtx-6000-ada", 1)])
    backend = opened(fake, monkeypatch, backends)
    devices = backend.sample()
    assert all(no_activity(d) for d in devices)
    assert backend.warnings == ["no compute activity on GPU 0, GPU 1 (GPM not supported on "
                                "this GPU; it needs Hopper or later)"]
    backend.sample()
    assert backend.warnings == []  # said once, not every cycle
    assert fake.calls["nvmlGpmSampleGet"] == fake.calls["nvmlGpmMigSampleGet"] == 0
    assert fake.calls["nvmlGpmSampleAlloc"] == 0


def test_driver_without_gpm(monkeypatch, backends):
    fake = FakeNvml([hopper()], absent_symbols={
        "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet",
        "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet", "nvmlGpmSampleFree"})
    backend = opened(fake, monkeypatch, backends)
    [dev] = backend.sample()
    assert no_activity(dev) and dev.utilization_percent == 100.0
    assert backend.warnings == ["no compute activity on GPU 0 (the driver has no GPM (R520 or "
                                "later needed))"]


def test_gpm_can_be_switched_off(monkeypatch, backends):
    fake = FakeNvml([hopper()])
    backend = opened(fake, monkeypatch, backends, gpm=False)
    [dev] = backend.sample()
    assert no_activity(dev)
    assert not any(name.startswith("nvmlGpm") for name in fake.calls)


@pytest.mark.parametrize(("bad", "metric"), [
    (float("nan"), 2), (float("inf"), 2), (100.5, 2), (-0.1, 3), (1e300, 10),
    (-1.0, 21), (float("nan"), 60), (float("inf"), 61)])
def test_implausible_gpm_answers_are_unknown_not_clamped(monkeypatch, backends, no_wait, bad,
                                                          metric):
    gpu = hopper()
    gpu.gpm[metric] = bad
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    [dev] = backend.sample()
    name = dict((m, f) for m, f, _ in gpm.METRICS)[metric]
    assert getattr(dev, name) is None
    if metric == 2:
        assert dev.compute_active_source is None  # no activity, so no source either
    else:
        assert dev.compute_active_percent == 20.0  # the other metrics still count
    [warning] = backend.warnings
    assert f"GPM metric {metric} ({name})" in warning and "out of range" in warning
    backend.sample()
    assert backend.warnings == []  # said once
    assert getattr(backend.sample()[0], name) is None


def test_a_metric_that_fails_on_its_own(monkeypatch, backends, no_wait):
    gpu = hopper()
    gpu.gpm_metric_errors = {5: 3, 10: 999}  # tensor NotSupported, DRAM bandwidth Unknown
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    [dev] = backend.sample()
    assert dev.tensor_active_percent is None and dev.memory_bandwidth_percent is None
    assert dev.compute_active_percent == 20.0 and dev.health == "ok"
    assert len(backend.warnings) == 1 and "GPM metric 10" in backend.warnings[0]
    backend.sample()
    targets = backend._gpm.targets  # NotSupported is not asked again; a failure is
    assert 5 not in [m for m, _, _ in targets[0].metrics]
    assert 10 in [m for m, _, _ in targets[0].metrics]


def test_after_a_metric_is_dropped_each_other_keeps_its_own_value(monkeypatch, backends,
                                                                  no_wait):
    gpu = hopper()  # SM 20, occupancy 10, DRAM 3.5, PCIe 12 / 48 MiB/s
    gpu.gpm_metric_errors = {3: 3}  # occupancy NotSupported: the request is made again without it
    backend = opened(FakeNvml([gpu]), monkeypatch, backends)
    for _ in range(3):
        [dev] = backend.sample()
        assert dev.sm_occupancy_percent is None and dev.compute_active_percent == 20.0
        assert dev.tensor_active_percent == 0.0 and dev.memory_bandwidth_percent == 3.5
        assert dev.pcie_tx_bytes_per_second == 12 * MIB and dev.pcie_rx_bytes_per_second == 48 * MIB
    [request] = backend._gpm.requests  # the one kept for the next read
    assert request.struct.numMetrics == 7
    assert [request.struct.metrics[i].metricId for i in range(7)] == [2, 5, 10, 20, 21, 60, 61]


def test_gpus_asking_different_metrics_share_one_request_kept_between_reads(monkeypatch, backends,
                                                                            no_wait):
    """One request serves every target in turn (19 KB each with nvidia-ml-py 13, the
    dashboard's memory): its ids follow the target read, so each GPU gets its own figures."""
    gpus = [busy_looking(FakeGpu.from_profile("h100-sxm5-80gb", i), 20.0 + 10 * i) for i in range(3)]
    gpus[1].gpm_metric_errors = {3: 3}  # occupancy NotSupported on the second only
    backend = opened(FakeNvml(gpus), monkeypatch, backends)
    for _ in range(3):
        devs = backend.sample()
        assert [d.compute_active_percent for d in devs] == [20.0, 30.0, 40.0]
        assert [d.sm_occupancy_percent for d in devs] == [10.0, None, 20.0]
        assert [d.memory_bandwidth_percent for d in devs] == [3.5, 3.5, 3.5]
        assert [d.pcie_rx_bytes_per_second for d in devs] == [48 * MIB] * 3
        assert len(backend._gpm.requests) == gpm.KEPT_REQUESTS == 1


def test_the_answers_read_in_one_pass_are_those_ctypes_reads():
    import ctypes

    import pynvml

    from allsmi.backends.nvidia.unpack import gpm_layout
    request = pynvml.c_nvmlGpmMetricsGet_t()
    answers = [(0, 20.0), (3, 0.0), (0, 1e-300), (999, float("nan")), (0, 12582912.0)]
    for i, (code, value) in enumerate(answers):
        request.metrics[i].metricId, request.metrics[i].nvmlReturn = 100 + i, code
        request.metrics[i].value = value
    unpacked = gpm_layout(type(request), len(answers)).unpack_from(request)
    read = [(m.nvmlReturn, m.value) for m in request.metrics[:len(answers)]]
    assert repr(list(zip(unpacked[0::2], unpacked[1::2]))) == repr(read)

    class Odd(ctypes.Structure):  # laid out otherwise: ctypes reads it member by member
        _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                    ("value", ctypes.c_float)]

    class OddRequest(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("metrics", Odd * 4)]
    assert gpm_layout(OddRequest, 2) is None and gpm_layout(type(request), 10_000) is None


def test_a_sample_call_that_fails_then_recovers(monkeypatch, backends, no_wait):
    gpu = hopper()
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    assert backend.sample()[0].compute_active_percent == 20.0
    gpu.fail["nvmlGpmSampleGet"] = 10  # Timeout
    for _ in range(3):
        [dev] = backend.sample()
        assert no_activity(dev) and dev.health == "ok" and dev.utilization_percent == 100.0
    assert fake.calls["nvmlGpmMetricsGet"] == 1
    del gpu.fail["nvmlGpmSampleGet"]
    [dev] = backend.sample()  # a new interval starts: no figure is made up for the gap
    assert no_activity(dev)
    assert backend.sample()[0].compute_active_percent == 20.0


def test_failure_is_said_once_per_reason(monkeypatch, backends, no_wait):
    gpu = hopper()
    gpu.fail["nvmlGpmSampleGet"] = 10
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    said = []
    for _ in range(4):
        backend.sample()
        said.extend(backend.warnings)
    assert len(said) == 1 and "GPM sample failed" in said[0] and "GPU 0" in said[0]


def test_metrics_call_that_fails(monkeypatch, backends, no_wait):
    gpu = hopper()
    gpu.fail["nvmlGpmMetricsGet"] = 10
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    [dev] = backend.sample()
    assert no_activity(dev) and dev.health == "ok"
    assert any("nvmlGpmMetricsGet failed" in w for w in backend.warnings)


@pytest.mark.parametrize("code", [3, 4])  # NotSupported, NoPermission
def test_sample_refused_for_good(monkeypatch, backends, no_wait, code):
    gpu = hopper()
    gpu.fail["nvmlGpmSampleGet"] = code
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    [dev] = backend.sample()
    assert no_activity(dev)
    assert any("no compute activity" in w for w in backend.warnings)
    fake.reset_counts()
    backend.sample()
    assert fake.calls["nvmlGpmSampleGet"] == 0  # not asked again


def test_gpu_lost_during_gpm(monkeypatch, backends, no_wait):
    gpu = hopper()
    fake = FakeNvml([gpu, hopper(1)])
    backend = opened(fake, monkeypatch, backends)
    gpu.fail["nvmlGpmSampleGet"] = 15  # GpuIsLost
    lost, other = backend.sample()
    assert lost.health == "lost" and no_activity(lost)
    assert other.health == "ok" and other.compute_active_percent == 20.0


def test_mig_instance_without_gpm_is_none_beside_the_others(monkeypatch, backends):
    gpu = hopper_in_mig_mode()
    gpu.migs[1].gpm = None  # this instance answers NotSupported
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    warnings = list(backend.warnings)
    devices = backend.sample()
    warnings += backend.warnings
    assert [d.compute_active_percent for d in devices[1:]] == [90.0, None, 35.5]
    assert any("GPU instance 5: no compute activity" in w for w in warnings)


def _fake_gpm_allsmi(*args: str) -> str:
    """``allsmi ARGS`` as a subprocess over the fake NVML of tests/backends/fake_gpm_allsmi.py."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "tests.backends.fake_gpm_allsmi", "--", *args],
                          cwd=root, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_snapshot_and_doctor_show_activity_beside_utilization():
    """From the outside: the JSON document and the Prometheus text carry both figures, a MIG
    slice its own activity, and doctor says why the GPU without GPM has none."""
    import json
    doc = json.loads(_fake_gpm_allsmi("snapshot", "--format", "json"))
    devices = {d["id"]: d for d in doc["devices"]}
    busy = devices["GPU-00000000-1111-4222-8333-0000face0000"]
    assert (busy["utilization_percent"], busy["compute_active_percent"],
            busy["compute_active_source"]) == (100.0, 20.0, "sm_active")
    assert busy["pcie_rx_bytes_per_second"] == 48.0 * MIB
    slices = [d for d in doc["devices"] if d["parent"] == "GPU-00000001-1111-4222-8333-0000face0001"]
    assert [d["compute_active_percent"] for d in slices] == [75.0, 0.0, 12.5]
    ampere = devices["GPU-00000002-1111-4222-8333-0000face0002"]
    assert ampere["utilization_percent"] == 55.0 and ampere["compute_active_percent"] is None
    text = _fake_gpm_allsmi("snapshot", "--format", "prometheus")
    assert 'uuid="GPU-00000000-1111-4222-8333-0000face0000"' in text
    line = next(x for x in text.splitlines() if x.startswith("allsmi_device_compute_active_ratio{")
                and "GPU-00000000" in x)
    assert 'source="sm_active"' in line and line.endswith(" 0.2")
    assert "GPU-00000002" not in "".join(x for x in text.splitlines()
                                        if x.startswith("allsmi_device_compute_active_ratio{"))
    doctor = _fake_gpm_allsmi("doctor")
    assert "no compute activity on GPU 2 (GPM not supported on this GPU" in doctor


def test_a_target_whose_metrics_are_all_unsupported_stops_sampling(monkeypatch, backends,
                                                                   no_wait):
    gpu = hopper()
    gpu.gpm = {}  # GPM present, but none of the eight metrics (NotSupported each)
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    [dev] = backend.sample()
    assert no_activity(dev)
    assert any("GPM gives none of the metrics read" in w for w in backend.warnings)
    fake.reset_counts()
    backend.sample()
    assert fake.calls["nvmlGpmSampleGet"] == fake.calls["nvmlGpmMetricsGet"] == 0


def test_out_of_range_values_that_change_are_still_said_once(monkeypatch, backends, no_wait):
    gpu = hopper()
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    said = []
    for cycle in range(5):
        gpu.gpm = {**gpu.gpm, 2: 150.0 + cycle}
        assert backend.sample()[0].compute_active_percent is None
        said.extend(backend.warnings)
    assert len(said) == 1 and "GPM metric 2" in said[0]


@pytest.mark.parametrize("mig", [False, True])
def test_a_target_refused_at_open_is_said_once(monkeypatch, backends, no_wait, mig):
    """A GPU (or a MIG GPU instance) whose first GPM sample is refused for good: its status
    says so once, not twice in one line nor again each cycle."""
    gpu = hopper_in_mig_mode() if mig else hopper()
    if mig:
        gpu.migs[2].gpm = None  # the fake refuses this instance's sample (NotSupported)
    else:
        gpu.fail["nvmlGpmSampleGet"] = 3
    backend = opened(FakeNvml([gpu]), monkeypatch, backends)
    said = list(backend.warnings)
    for _ in range(3):
        backend.sample()
        said.extend(backend.warnings)
    refused = [w for w in said if "no compute activity" in w]
    assert len(refused) == 1, said


def test_a_structure_whose_plain_copy_would_differ_is_used_as_it_is():
    import ctypes

    from allsmi.backends.nvidia.calls import plain

    class Packed(ctypes.Structure):  # a layout the plain copy would not keep
        _pack_ = 1
        _fields_ = [("version", ctypes.c_uint8), ("value", ctypes.c_double)]

    class Plainly(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("value", ctypes.c_double)]
    assert plain(Packed) is Packed
    made = plain(Plainly)
    assert made is not Plainly and ctypes.sizeof(made) == ctypes.sizeof(Plainly)
    assert [(n, getattr(made, n).offset) for n, _ in Plainly._fields_] == \
        [(n, getattr(Plainly, n).offset) for n, _ in Plainly._fields_]

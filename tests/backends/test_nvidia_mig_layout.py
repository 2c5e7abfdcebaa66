"""MIG instances created and destroyed, and MIG mode switched, while the NVIDIA backend stays
open (``backends/nvidia/layout.py``), through the real backend over the fake libnvidia-ml."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from allsmi.backends.nvidia import gpm, layout

from .nvml_fake import FakeGpu, FakeMig, FakeNvml, FakeProcess
from .test_nvidia import opened
from .test_nvidia_gpm import hopper_in_mig_mode

#: What a listing asks (every other call a cycle makes is the same with or without MIG).
LISTING = ("nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
           "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetUUID")


@pytest.fixture
def later(monkeypatch):
    """Moves the backend's listing clock on by the seconds given (it starts at the real one)."""
    start, moved = time.monotonic(), [0.0]
    monkeypatch.setattr(layout, "clock", lambda: start + moved[0])

    def move(seconds: float) -> None:
        moved[0] += seconds
    return move


def new_instance(gpu: FakeGpu, slot: int, gpu_instance_id: int, profile: str = "1g.5gb",
                 **values) -> FakeMig:
    """An instance made as ``nvidia-smi mig -cgi <profile> -C`` makes one (its own uuid)."""
    uuid = f"MIG-{gpu.index:08x}-{slot:04x}-5000-9000-{0xBEEF00 + gpu_instance_id:012x}"
    return FakeMig(slot=slot, uuid=uuid,
                   name=f"{gpu.name} MIG {profile}", gpu_instance_id=gpu_instance_id,
                   compute_instance_id=0, memory_total=5234491392, memory_reserved=0,
                   memory_used=values.pop("memory_used", 1 << 30),
                   gpu_slices=int(profile.split("g.")[0]), **values)


def children(devices):
    return [d for d in devices if d.parent is not None]


def test_a_destroyed_instance_goes_at_once_and_a_created_one_comes_within_30_s(
        monkeypatch, backends, later):
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 0)
    fake = FakeNvml([a100, FakeGpu.from_profile("rtx-6000-ada", 1)])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    first = children(backend.sample())
    assert [d.details["mig_slot"] for d in first] == [0, 1, 3]

    gone = FakeNvml.destroy_mig(a100, 1)
    devices = backend.sample()  # the read that finds its handle stale leaves it out already
    assert [d.id for d in children(devices)] == [first[0].id, first[2].id]
    assert all(d.health == "ok" and d.memory_total_bytes for d in devices)
    assert not any("Not Found" in w for w in backend.warnings), backend.warnings
    backend.sample()  # listed again: gone for good, and said once
    assert [w for w in backend.warnings if "MIG" in w] == [
        "GPU 0: MIG instances changed: 1 gone, 0 new (2 now)"]
    assert gone.uuid not in {d.id for d in backend.sample()}

    made = FakeNvml.create_mig(a100, new_instance(a100, 2, gpu_instance_id=9,
                                                  memory_used=3 << 30))
    a100.compute = [FakeProcess(4100, 3 << 30, gpu_instance_id=9, compute_instance_id=0)]
    later(29.0)  # an instance created is listed within RELIST_SECONDS, not every cycle
    assert made.uuid not in {d.id for d in backend.sample()}
    later(1.0)
    devices = backend.sample()
    assert fake.callback_errors == []
    assert [d.details["mig_slot"] for d in children(devices)] == [0, 2, 3]
    new = children(devices)[1]
    assert (new.id, new.uuid, new.name, new.parent) == (made.uuid, made.uuid, made.name, a100.uuid)
    assert (new.memory_used_bytes, new.memory_total_bytes) == (3 << 30, made.memory_total)
    assert new.partition_share == pytest.approx(1 / 7)
    assert new.details["gpu_instance_id"] == 9 and [p.pid for p in new.processes] == [4100]
    assert "GPU 0: MIG instances changed: 0 gone, 1 new (3 now)" in backend.warnings


def test_an_instance_made_again_under_the_same_id_has_its_own_activity(monkeypatch, backends,
                                                                        later):
    """GPM samples of a GPU instance destroyed and made again under its id between two cycles
    are never diffed against each other: the new one's activity comes from its second sample."""
    monkeypatch.setattr(gpm, "MIN_INTERVAL_SECONDS", 0.0)
    gpu = hopper_in_mig_mode()
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, options={"processes": False})
    backends.append(backend)
    assert [d.compute_active_percent for d in children(backend.sample())] == [90.0, 0.0, 35.5]

    old = FakeNvml.destroy_mig(gpu, 0)
    made = FakeNvml.create_mig(gpu, new_instance(gpu, 0, old.gpu_instance_id, "3g.40gb",
                                                 gpm={2: 55.0, 3: 20.0, 5: 1.0, 10: 4.0}))
    seen = [[(d.id, d.compute_active_percent) for d in children(backend.sample())]
            for _ in range(3)]
    assert seen == [
        [(gpu.migs[1].uuid, 0.0), (gpu.migs[2].uuid, 35.5)],  # the old handle: gone
        [(made.uuid, None), (gpu.migs[1].uuid, 0.0), (gpu.migs[2].uuid, 35.5)],  # first sample
        [(made.uuid, 55.0), (gpu.migs[1].uuid, 0.0), (gpu.migs[2].uuid, 35.5)],
    ]
    assert fake.gpm_mixed_instances == 0
    assert fake.callback_errors == []
    assert fake.gpm_live_samples() == 2 * 4  # the old instance's freed, the new one's made
    backend.close()
    assert fake.gpm_live_samples() == 0


def test_a_gpu_instance_that_keeps_a_compute_instance_keeps_its_samples(monkeypatch, backends,
                                                                        later):
    monkeypatch.setattr(gpm, "MIN_INTERVAL_SECONDS", 0.0)
    gpu = hopper_in_mig_mode()
    shared = gpu.migs[0]
    gpu.migs.append(replace(shared, slot=4, uuid=shared.uuid[:-1] + "f", compute_instance_id=1,
                            name="NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb"))
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, options={"processes": False})
    backends.append(backend)
    backend.sample()
    FakeNvml.destroy_mig(gpu, 4)  # the compute instance only: its GPU instance stays
    backend.sample()
    samples_before = fake.calls["nvmlGpmSampleAlloc"]
    for _ in range(2):
        assert [d.compute_active_percent for d in children(backend.sample())] == [90.0, 0.0, 35.5]
    assert fake.calls["nvmlGpmSampleAlloc"] == samples_before
    assert fake.gpm_live_samples() == 2 * 4


def test_mig_mode_switched_on_then_off_is_followed(monkeypatch, backends, later):
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 0, mig_mode=0, migs=[], util_gpu=30,
                                util_memory=4)
    backend = opened(FakeNvml([a100]), monkeypatch)
    backends.append(backend)
    [gpu] = backend.sample()
    assert gpu.details["mig_mode"] is False and gpu.utilization_percent == 30.0

    # nvidia-smi -mig 1, the GPU reset, instances made: utilization is NotSupported in MIG mode
    a100.mig_mode, a100.util_gpu, a100.util_memory = 1, None, None
    FakeNvml.create_mig(a100, new_instance(a100, 0, 7, "3g.20gb"))
    later(30.0)
    devices = backend.sample()
    assert devices[0].details["mig_mode"] is True and devices[0].utilization_percent is None
    assert [d.uuid for d in children(devices)] == [a100.migs[0].uuid]
    assert children(devices)[0].partition_share == pytest.approx(3 / 7)
    assert "GPU 0: MIG mode is now on" in backend.warnings

    a100.mig_mode, a100.migs, a100.util_gpu, a100.util_memory = 0, [], 30, 4
    later(30.0)
    devices = backend.sample()
    assert len(devices) == 1 and devices[0].details["mig_mode"] is False
    assert devices[0].utilization_percent == 30.0  # asked again: MIG mode no longer refuses it
    assert "GPU 0: MIG mode is now off" in backend.warnings


def test_following_the_layout_costs_no_call_a_cycle(monkeypatch, backends, later):
    """Between listings a cycle asks nothing more; a listing every 30 s asks a MIG GPU its mode,
    one handle per slot and one uuid per instance, a GPU with MIG off its mode, and a GPU
    without MIG support nothing."""
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 0)
    h100 = FakeGpu.from_profile("h100-sxm5-80gb", 1)  # MIG mode off
    ada = FakeGpu.from_profile("rtx-6000-ada", 2)  # no MIG
    fake = FakeNvml([a100, h100, ada])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    backend.sample()
    fake.reset_counts()
    for _ in range(5):
        backend.sample()
    assert {name: fake.calls[name] for name in LISTING} == dict.fromkeys(LISTING, 0)
    steady = fake.total_calls()

    fake.reset_counts()
    later(30.0)
    for _ in range(5):
        backend.sample()
    assert {name: fake.calls[name] for name in LISTING} == {
        "nvmlDeviceGetMigMode": 2, "nvmlDeviceGetMaxMigDeviceCount": 0,
        "nvmlDeviceGetMigDeviceHandleByIndex": 7, "nvmlDeviceGetUUID": 3}
    assert fake.total_calls() == steady + 2 + 7 + 3
    assert fake.callback_errors == [] and backend.warnings == []


def test_an_instance_whose_reads_look_stale_but_is_still_there_is_not_dropped_every_cycle(
        monkeypatch, backends, later):
    """A driver answering InvalidArgument on a live instance's memory: one listing finds the
    instances still there, and from then on it is an ordinary failure (memory unknown, said),
    not an instance gone and listed again every cycle."""
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 0)
    fake = FakeNvml([a100])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    backend.sample()
    a100.fail["nvmlDeviceGetMemoryInfo_v2"] = 2  # InvalidArgument, parent and instances alike
    assert children(backend.sample()) == []  # taken for destroyed, once
    fake.reset_counts()
    for _ in range(4):
        devices = children(backend.sample())
        assert [d.uuid for d in devices] == [m.uuid for m in a100.migs]
        assert all(d.health == "ok" and d.memory_used_bytes is None for d in devices)
        assert "GPU 0 MIG 0: memory failed: Invalid Argument" in backend.warnings
    assert fake.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 7  # the one listing


def test_the_ledger_books_an_instance_until_it_goes_and_a_new_one_from_when_it_comes(
        monkeypatch, backends, later, tmp_path):
    """Through a real SQLite ledger: a cycle every 10 s, one instance destroyed after the third
    and another created after the fifth (listed at the next 30 s listing)."""
    from dataclasses import replace as copy
    from tests.accounting.helpers import T0, record, rows, snap
    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 0)
    backend = opened(FakeNvml([a100]), monkeypatch)
    backends.append(backend)
    snapshots = []
    for k in range(12):
        if k == 3:
            gone = FakeNvml.destroy_mig(a100, 1)
        if k == 5:
            made = FakeNvml.create_mig(a100, new_instance(a100, 2, gpu_instance_id=9))
        devices = [copy(d, resource_group="default") for d in backend.sample()]
        snapshots.append(snap(T0 + 10 * k, *devices))
        later(10.0)
    db = tmp_path / "ledger.db"
    record(db, snapshots)
    observed = dict(rows(db, "SELECT d.device_id, SUM(i.observed_ms) FROM intervals i "
                             "JOIN devices d ON d.dev = i.dev GROUP BY d.device_id"))
    assert observed[a100.uuid] == 110_000 and observed[a100.migs[0].uuid] == 110_000
    assert observed[gone.uuid] == 20_000  # seen at 0, 10 and 20 s
    assert observed[made.uuid] == 110_000 - 60_000  # listed at 60 s (the 30 s after 30 s)

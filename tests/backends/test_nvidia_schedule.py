"""How the NVIDIA backend spreads a cycle's GPU reads over its threads, and its field-value
buffer (issue 36: an idle exporter's cycle is mostly these reads).

Counted, never timed: the hedge is set far beyond what a loaded machine can add where a test
needs a cycle to stay on one thread."""

from __future__ import annotations

import threading

import pynvml
import pytest

from allsmi.backends.nvidia import NvidiaBackend, nvml
from allsmi.backends.nvidia import schedule

from .nvml_fake import FakeGpu, FakeNvml, fleet


def opened(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, made: list[NvidiaBackend],
           **kwargs) -> NvidiaBackend:
    fake.install(monkeypatch)
    backend = NvidiaBackend(process_owner=lambda pid: (None, None), **kwargs)
    backend.open()
    made.append(backend)
    return backend


def reader_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of each GPU's first call of a cycle (``nvmlDeviceGetUtilizationRates``)."""
    seen: list[int] = []
    real = pynvml.nvmlDeviceGetUtilizationRates

    def recorded(handle):
        seen.append(threading.get_ident())
        return real(handle)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", recorded)
    return seen


def test_a_fast_library_is_read_on_one_thread_a_cycle(monkeypatch, backends):
    monkeypatch.setattr(schedule, "HEDGE_SECONDS", 30.0)
    backend = opened(FakeNvml(fleet(8)), monkeypatch, backends)
    seen = reader_threads(monkeypatch)
    for cycle in range(5):
        seen.clear()
        devices = backend.sample()
        assert [d.health for d in devices] == ["ok"] * 8
        assert len(seen) == 8 and len(set(seen)) == 1  # all eight GPUs on one thread
        assert seen[0] != threading.get_ident()  # not the caller's: a hung GPU stays isolated
    # one reader task handed to the pool a cycle, not one per GPU
    assert backend._schedule is not None and backend._schedule.threads_started == 5


def test_a_slow_cycle_makes_the_next_start_on_every_thread_then_back(monkeypatch, backends):
    fake = FakeNvml(fleet(4), latency_s=0.004)  # ten calls: 40 ms a GPU, past the 20 ms hedge
    backend = opened(fake, monkeypatch, backends)
    read = backend._schedule
    assert read is not None
    backend.sample()  # one thread first; the others join at the hedge
    assert read.parallel and read.threads_started > 1
    before = read.threads_started
    backend.sample()
    assert read.threads_started - before == 4  # every GPU handed out at once
    fake.latency_s = 0.0
    monkeypatch.setattr(schedule, "HEDGE_SECONDS", 30.0)
    backend.sample()  # fast again: the next cycle goes back to one thread
    assert not read.parallel
    before = read.threads_started
    assert [d.health for d in backend.sample()] == ["ok"] * 4
    assert read.threads_started - before == 1


def test_a_gpu_never_started_by_the_deadline_is_asked_afresh(monkeypatch, backends):
    """Every reader thread stuck: the GPUs still queued are not read late by a stale task."""
    gpus = fleet(3)
    fake = FakeNvml(gpus)
    backend = opened(fake, monkeypatch, backends, timeout_seconds=0.3, options={"workers": 2})
    gpus[0].stall_s = gpus[1].stall_s = 0.05  # half a second a read: both threads busy
    devices = backend.sample()
    assert [d.health for d in devices] == ["unknown"] * 3
    assert gpus[2].index == 2 and backend._gpus is not None
    assert backend._gpus[2].pending is None  # never started: queued afresh next cycle
    gpus[0].stall_s = gpus[1].stall_s = 0.0


def test_the_field_batch_is_asked_into_one_buffer_per_gpu(monkeypatch, backends):
    made: list[list[int]] = []

    class Counted(nvml.FieldValueBatch):
        def __init__(self, pynvml_module, ids):
            made.append(list(ids))
            super().__init__(pynvml_module, ids)

    monkeypatch.setattr(nvml, "FieldValueBatch", Counted)

    def unused(*_):
        raise AssertionError("pynvml's wrapper builds a new array each call")

    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", 0),
            FakeGpu.from_profile("h100-sxm5-80gb", 1, not_supported={"field:83"})]
    fake = FakeNvml(gpus)
    backend = opened(fake, monkeypatch, backends, options={"workers": 1})
    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", unused)
    for _ in range(4):
        first, second = backend.sample()
    assert fake.callback_errors == []
    assert first.power_watts == pytest.approx(gpus[0].power_average_mw / 1000)
    assert first.power_limit_watts == pytest.approx(gpus[0].power_limit_mw / 1000)
    assert first.energy_joules == pytest.approx(gpus[0].energy_mj / 1000)
    assert first.details["ecc_corrected_volatile"] == gpus[0].ecc["corrected_volatile"]
    # the field it lacks comes from the dedicated call, as before
    assert second.energy_joules == pytest.approx(gpus[1].energy_mj / 1000)
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 4
    # each GPU: one buffer, then one without the fields its first answer dropped (the instant
    # power once the average answered; on GPU 1 the energy too), never one a cycle
    assert len(made) == 4
    assert made[3] == [f for f in made[1] if f not in (83, 186)]
    assert fake.calls["nvmlDeviceGetFieldValues"] == 8

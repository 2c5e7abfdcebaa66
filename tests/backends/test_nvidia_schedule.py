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
    """The thread of each GPU's first call of a cycle (``nvmlDeviceGetUtilizationRates``, as
    the library sees it: the backend calls its function pointer from pynvml's cache)."""
    seen: list[int] = []
    real = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetUtilizationRates")

    def recorded(*args):
        seen.append(threading.get_ident())
        return real(*args)

    monkeypatch.setitem(pynvml._nvmlGetFunctionPointer_cache, "nvmlDeviceGetUtilizationRates",
                        recorded)
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


def test_a_fast_cycle_is_read_by_one_thread_of_its_own_and_waited_for_by_sleeping(
        monkeypatch, backends):
    """A fast cycle's reads go to the same dedicated thread every cycle (handed over through a
    lock, not the pool), and the caller sleeps through the last cycle's read time before it
    waits for them (so that they are taken without the reader waking it); a slow cycle (read
    on every thread) leaves nothing to sleep through."""
    monkeypatch.setattr(schedule, "HEDGE_SECONDS", 30.0)
    backend = opened(FakeNvml(fleet(4)), monkeypatch, backends)
    seen = reader_threads(monkeypatch)
    slept: list[float] = []
    monkeypatch.setattr(schedule.time, "sleep", slept.append)  # the wait then blocks instead
    read = backend._schedule
    assert read is not None
    for _ in range(4):
        assert [d.health for d in backend.sample()] == ["ok"] * 4
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()
    first = read._first
    assert first is not None and first.thread.ident == seen[0]
    assert first.thread.name == "allsmi-nvml-first"
    assert len(slept) == 3  # not in the first cycle: no reads to go by yet
    assert all(0.0 < pause <= 15.0 for pause in slept)
    read.parallel = True  # as after a slow cycle
    backend.sample()
    assert len(slept) == 3  # read on every thread: nothing slept through
    backend.close()
    first.thread.join(5)
    assert not first.thread.is_alive()  # closing ends the first reader's thread


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


#: pynvml's wrappers of the calls made every cycle through prepared buffers (``calls.py``).
PREPARED = ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetClockInfo", "nvmlDeviceGetPerformanceState",
            "nvmlDeviceGetCurrentClocksEventReasons")


def test_each_cycles_calls_answer_into_buffers_made_once_per_gpu(monkeypatch, backends):
    """The per-cycle calls skip pynvml's wrappers (a new out-structure each call) and answer
    what the wrappers answer, into one set of buffers per GPU kept from cycle to cycle."""
    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(2)]
    fake = FakeNvml(gpus)
    backend = opened(fake, monkeypatch, backends, options={"workers": 1})
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    wrapped = [(pynvml.nvmlDeviceGetUtilizationRates(h),
                pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
                pynvml.nvmlDeviceGetTemperatureV(h, 0), pynvml.nvmlDeviceGetClockInfo(h, 1),
                pynvml.nvmlDeviceGetPerformanceState(h),
                pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)) for h in handles]

    def unused(*_, **__):
        raise AssertionError("pynvml's wrapper makes a new out-structure each call")

    for name in PREPARED:
        monkeypatch.setattr(pynvml, name, unused)
    buffers = []
    for _ in range(3):
        devices = backend.sample()
        assert fake.callback_errors == [] and [d.health for d in devices] == ["ok", "ok"]
        calls = backend._reads().calls
        buffers.append([id(buffer) for _, kept in calls._buffers.values() for buffer in kept.all()])
        for dev, (util, memory, temperature, clock, pstate, reasons) in zip(devices, wrapped):
            assert dev.utilization_percent == util.gpu
            assert dev.details["memory_activity_percent"] == util.memory
            assert (dev.memory_used_bytes, dev.memory_total_bytes) == (memory.used, memory.total)
            assert dev.details["memory_reserved_bytes"] == memory.reserved
            assert dev.temperature_celsius == temperature and dev.clock_mhz == clock
            assert dev.details["pstate"] == f"P{pstate}"
            assert dev.details["clocks_event_reasons_mask"] == reasons
    assert len(calls._buffers) == 2  # one set per GPU handle
    # the six calls' and the fan speed's, per GPU, made on the first read and kept
    assert len(buffers[0]) == 2 * 7 and buffers[0] == buffers[1] == buffers[2]


def test_a_failing_task_on_the_first_reader_is_logged_and_the_reader_serves_on(caplog) -> None:
    """A read's own errors are its result; a task that raises anyway (a bug) is logged, never
    swallowed, and the reader takes the next cycle's task."""
    import threading

    from allsmi.backends.nvidia.schedule import FirstReader

    reader = FirstReader("allsmi-nvml-test")
    ran = threading.Event()

    def broken() -> None:
        raise RuntimeError("a bug in the drain")

    try:
        with caplog.at_level("ERROR", logger="allsmi.backends.nvidia.schedule"):
            assert reader.hand(broken)
            deadline = 50
            while reader.busy and deadline:
                ran.wait(0.1)
                deadline -= 1
            assert reader.hand(ran.set) and ran.wait(5)
        assert any("a bug in the drain" in (r.exc_text or str(r.exc_info)) for r in caplog.records), caplog.records
    finally:
        reader.close()

"""Each cycle's GPU sample is derived from a template made on the first read after open
(issue 36): the static facts are cleaned once, only the cycle's values are cleaned each cycle,
and the sample is the same as one built whole. Counted, never timed."""

from __future__ import annotations

import dataclasses

import pytest

from allsmi.backends.nvidia import NvidiaBackend
from allsmi.schema import DeviceSample

from .nvml_fake import FakeGpu, FakeNvml


def test_samples_are_derived_from_one_template_per_gpu_and_equal_a_whole_build(
        monkeypatch: pytest.MonkeyPatch, backends: list[NvidiaBackend]) -> None:
    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(3)]
    fake = FakeNvml(gpus)
    fake.install(monkeypatch)
    built: list[str] = []
    post_init = DeviceSample.__post_init__

    def counted(self: DeviceSample) -> None:
        built.append(self.id)
        post_init(self)

    monkeypatch.setattr(DeviceSample, "__post_init__", counted)
    backend = NvidiaBackend(process_owner=lambda pid: (None, None))
    backends.append(backend)
    backend.open()
    cycles = [backend.sample() for _ in range(3)]
    # one whole build per GPU (its template), none per cycle
    assert sorted(built) == sorted(gpu.uuid for gpu in gpus)
    for devices in cycles:
        assert [d.health for d in devices] == ["ok"] * 3
        for dev in devices:
            monkeypatch.setattr(DeviceSample, "__post_init__", post_init)
            rebuilt = DeviceSample(**{f.name: getattr(dev, f.name)
                                      for f in dataclasses.fields(DeviceSample)})
            monkeypatch.setattr(DeviceSample, "__post_init__", counted)
            assert rebuilt == dev
            assert dev.name and dev.uuid and dev.bus_id and dev.driver_version  # static facts
    # three cycles, three distinct objects per GPU: the template is never handed out
    assert len({id(d) for devices in cycles for d in devices}) == 9
    assert all(d is not backend._gpus[i].template
               for devices in cycles for i, d in enumerate(devices))


def test_a_changed_value_shows_in_the_next_cycle(monkeypatch: pytest.MonkeyPatch,
                                                 backends: list[NvidiaBackend]) -> None:
    gpu = FakeGpu.from_profile("h100-sxm5-80gb", 0)
    FakeNvml([gpu]).install(monkeypatch)
    backend = NvidiaBackend(process_owner=lambda pid: (None, None))
    backends.append(backend)
    backend.open()
    [first] = backend.sample()
    gpu.util_gpu, gpu.temperature, gpu.memory_used = 87, 71, gpu.memory_used + 2**30
    [second] = backend.sample()
    assert (second.utilization_percent, second.temperature_celsius) == (87.0, 71.0)
    assert second.memory_used_bytes == first.memory_used_bytes + 2**30
    assert (second.id, second.name, second.uuid) == (first.id, first.name, first.uuid)


def test_a_lost_gpu_is_still_built_from_its_template(monkeypatch: pytest.MonkeyPatch,
                                                     backends: list[NvidiaBackend]) -> None:
    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(2)]
    FakeNvml(gpus).install(monkeypatch)
    backend = NvidiaBackend(process_owner=lambda pid: (None, None))
    backends.append(backend)
    backend.open()
    backend.sample()
    gpus[1].lost = True
    devices = backend.sample()
    assert [d.health for d in devices] == ["ok", "lost"]
    assert devices[1].uuid == gpus[1].uuid and devices[1].utilization_percent is None
    assert "error" in devices[1].details


def test_the_fast_conversions_answer_as_the_general_ones() -> None:
    """``number``, ``milli``, ``percent`` and ``reason_names`` (what each cycle converts
    NVML's answers with) give what the general helpers give, sentinels and all."""
    import math

    from allsmi.backends.nvidia.devices import (CLOCK_EVENT_REASONS, milli, number, percent,
                                                reason_names)
    from allsmi.schema.units import milli_to_unit, parse_percent, reject_sentinel
    def general_number(value: object) -> float | None:  # the general path, as it was
        value = reject_sentinel(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value)

    def same(a: float | None, b: float | None) -> bool:
        return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))

    for value in (0, 1, 37, 100, 101, 250_000, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF,
                  0x7FFFFFFF, 2**40, None, True, 12.5, math.nan, math.inf, -3):
        assert same(number(value), general_number(value)), value
        assert same(milli(value), milli_to_unit(general_number(value))), value
        assert same(percent(value), parse_percent(reject_sentinel(value))), value
    for mask in (0, 1, 0x5, 0x1FF, 0x1000, 0x1001, 0xFFFFFFFFFFFFFFFF):
        assert reason_names(mask) == tuple(n for bit, n in CLOCK_EVENT_REASONS if mask & bit)
        assert reason_names(mask) is reason_names(mask)  # worked out once


def test_the_field_buffer_unpacked_in_one_pass_reads_as_ctypes_does() -> None:
    """The field-value batch's answers, unpacked with ``struct``, are the numbers ctypes reads
    member by member (every value type, extremes, a failed entry, an unknown type)."""
    import math

    import pynvml

    from allsmi.backends.nvidia import nvml
    cases = [(0, 1.5), (0, -0.0), (0, math.inf), (1, 0xFFFFFFFF), (1, 7), (2, 2**64 - 1),
             (3, 2**63 + 5), (4, -(2**63)), (4, -5), (5, -(2**31)), (5, 123), (6, 0xFFFF),
             (9, 0)]
    batch = nvml.FieldValueBatch(pynvml, list(range(100, 100 + len(cases) + 1)))
    assert batch._layout is not None  # the fast path is the one tested
    members = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
               6: "usVal"}  # c_nvmlValue_t's, by value type
    for entry, (kind, value) in zip(batch._entries, cases):
        entry.nvmlReturn = nvml.SUCCESS
        entry.valueType = kind
        if kind in members:
            setattr(entry.value, members[kind], value)
    batch._entries[len(cases)].nvmlReturn = nvml.ERROR_NOT_SUPPORTED
    expected = [(int(e.nvmlReturn), nvml.field_value(e)) for e in batch._entries]
    got = batch.answers()
    assert got == expected
    assert [type(v) for _, v in got] == [type(v) for _, v in expected]
    assert got[0][1] == 1.5 and got[5][1] == 2**64 - 1 and got[7][1] == -(2**63)
    assert got[12] == (nvml.SUCCESS, None)  # an unknown value type

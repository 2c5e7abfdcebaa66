"""Edge answers of NVML through the fake library: all-ones "no value" answers reach every
reading as ``None`` (never -1, a huge count or 100 %), whichever entry point gave them."""

from __future__ import annotations

import time

import pytest

from .nvml_fake import FakeGpu, FakeNvml, FakeProcess
from .test_nvidia import opened

ALL_ONES_32 = 0xFFFFFFFF
ALL_ONES_64 = 0xFFFFFFFFFFFFFFFF


@pytest.mark.parametrize("driver", ["current", "r470"])  # TemperatureV (signed), the old call
def test_temperature_all_ones_is_unknown_on_either_entry_point(monkeypatch, backends, driver):
    gpu = FakeGpu.from_profile("h100-sxm5-80gb", 0, temperature=ALL_ONES_32)
    fake = FakeNvml([gpu], driver=driver)
    backend = opened(fake, monkeypatch, options={"gpm": False})
    backends.append(backend)
    [dev] = backend.sample()
    assert dev.temperature_celsius is None  # TemperatureV's int reads the all-ones as -1
    assert fake.callback_errors == []
    gpu.temperature = 41  # and a real answer later is read (the call was not dropped)
    [dev] = backend.sample()
    assert dev.temperature_celsius == 41.0


def test_temperature_v_keeps_a_real_reading_below_zero(monkeypatch, backends):
    gpu = FakeGpu.from_profile("h100-sxm5-80gb", 0, temperature=-5 & ALL_ONES_32)
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, options={"gpm": False})
    backends.append(backend)
    [dev] = backend.sample()
    assert dev.temperature_celsius == -5.0


def test_ecc_all_ones_totals_are_unknown_not_counts(monkeypatch, backends):
    gpu = FakeGpu.from_profile("h100-sxm5-80gb", 0)
    gpu.ecc = {"enabled": True, "corrected_volatile": ALL_ONES_64,
               "uncorrected_volatile": ALL_ONES_32, "corrected_aggregate": 0xFFFF,
               "uncorrected_aggregate": 2}
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, options={"gpm": False})
    backends.append(backend)
    [dev] = backend.sample()
    assert "ecc_corrected_volatile" not in dev.details
    assert "ecc_uncorrected_volatile" not in dev.details
    assert dev.details["ecc_corrected_aggregate"] == 0xFFFF  # 65535 errors is a count
    assert dev.details["ecc_uncorrected_aggregate"] == 2
    assert fake.callback_errors == []


def test_process_utilization_all_ones_sample_is_not_counted_as_busy(monkeypatch, backends):
    """A per-process sample whose engine answers all ones is no value: not 100 % (the old
    clamp), and left out of the mean of that engine's other samples."""
    gpu = FakeGpu.from_profile("rtx-6000-ada", 0)
    gpu.compute = [FakeProcess(10, 1 << 30), FakeProcess(11, 1 << 30)]
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch)
    backends.append(backend)
    backend.sample()  # the first read: nothing yet (NotFound)
    stamp = int(time.time() * 1e6)
    gpu.util_samples += [
        (10, stamp + 100, ALL_ONES_32, 30, ALL_ONES_32, 0),
        (10, stamp + 200, 40, ALL_ONES_32, ALL_ONES_32, 0),
        (11, stamp + 150, ALL_ONES_32, 250, 0, 0),  # 250 %: garbage, not a share
    ]
    [dev] = backend.sample()
    procs = {p.pid: p for p in dev.processes}
    assert procs[10].utilization_percent == 40.0        # the one sample with a value
    assert procs[10].memory_utilization_percent == 30.0
    assert procs[10].encoder_utilization_percent is None  # no sample had one
    assert procs[10].decoder_utilization_percent == 0.0
    assert procs[11].utilization_percent is None and procs[11].memory_utilization_percent is None
    assert fake.callback_errors == []


def test_bindings_without_the_deprecated_wrappers_on_an_old_driver(monkeypatch, backends):
    """nvidia-ml-py 13 marks ``nvmlDeviceGetTemperature`` and
    ``nvmlDeviceGetCurrentClocksThrottleReasons`` for removal. Bindings without them on a driver
    without the newer entry points (R470): those two values are unknown, the rest of the GPU
    reads as usual (not the whole GPU failing with an AttributeError every cycle)."""
    import pynvml
    for name in ("nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        monkeypatch.delattr(pynvml, name)
    gpu = FakeGpu.from_profile("h100-sxm5-80gb", 0)
    fake = FakeNvml([gpu], driver="r470")
    backend = opened(fake, monkeypatch, options={"gpm": False})
    backends.append(backend)
    for _ in range(2):
        [dev] = backend.sample()
        assert dev.health == "ok", backend.warnings
        assert dev.temperature_celsius is None
        assert "clocks_event_reasons_mask" not in dev.details
        assert dev.power_watts == pytest.approx(512.345) and dev.clock_mhz == 1980.0
    assert backend.warnings == []
    assert fake.callback_errors == []

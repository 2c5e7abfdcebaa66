"""GPM calls answering Unknown: the GPU's fault, as from any other NVML call (``lost`` for that
cycle, loud, its processes unknown), not a figure quietly missing from a GPU reported ``ok``."""

from __future__ import annotations

import pytest

from allsmi.backends.nvidia import gpm

from .nvml_fake import FakeNvml, FakeProcess
from .test_nvidia_gpm import hopper, no_activity, opened

UNKNOWN = 999


@pytest.fixture
def no_wait(monkeypatch):
    """Cycles as fast as the test runs: NVIDIA's 0.1 s between samples is not waited for."""
    monkeypatch.setattr(gpm, "MIN_INTERVAL_SECONDS", 0.0)


def test_gpm_sample_unknown_is_lost_for_that_cycle(monkeypatch, backends, no_wait):
    gpu = hopper()
    other = hopper(1)
    gpu.compute = [FakeProcess(10, 1 << 30)]
    fake = FakeNvml([gpu, other])
    backend = opened(fake, monkeypatch, backends, processes=True)
    assert backend.sample()[0].compute_active_percent == 20.0
    gpu.fail["nvmlGpmSampleGet"] = UNKNOWN
    dev, dev_other = backend.sample()
    assert dev.health == "lost" and dev.processes is None and no_activity(dev)
    assert dev.details["error"] == "GPM sample: Unknown Error"
    assert dev_other.health == "ok" and dev_other.compute_active_percent == 20.0  # partial
    del gpu.fail["nvmlGpmSampleGet"]
    [dev, _] = backend.sample()  # Unknown passes: ok again, a new interval starts
    assert dev.health == "ok" and no_activity(dev)
    assert backend.sample()[0].compute_active_percent == 20.0
    assert fake.callback_errors == []


def test_gpm_unknown_at_open_costs_only_the_first_sample(monkeypatch, backends, no_wait):
    gpu = hopper()
    gpu.fail["nvmlGpmSampleGet"] = UNKNOWN
    fake = FakeNvml([gpu])
    backend = opened(fake, monkeypatch, backends)
    del gpu.fail["nvmlGpmSampleGet"]
    [dev] = backend.sample()
    assert dev.health == "ok" and no_activity(dev)  # the first interval starts here
    assert backend.sample()[0].compute_active_percent == 20.0

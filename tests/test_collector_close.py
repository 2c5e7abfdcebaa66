"""Closing never pulls a backend out from under a sample in flight: a backend sampled on the
collector's thread (``Backend.sample_isolated``, the NVIDIA backend once open) was closed by
its worker as soon as a close was asked, while the collector's thread was still inside
``sample()``; that last cycle, half read (GPM's samples freed: no device activity, so a
holder beside NVLink traffic read as waiting on nothing), was booked by the ledger."""

from __future__ import annotations

import threading
import time
from typing import Sequence

from allsmi.backend_api import Backend, ProbeResult
from allsmi.collection.backendrunner import BackendRunner
from allsmi.collection.collector import Collector
from allsmi.schema import DeviceSample


class _Isolated(Backend):
    """Sampled on the caller's thread once open; each sample can be held open by the test."""

    name = "isolated"
    vendor = "nvidia"

    def __init__(self) -> None:
        super().__init__()
        self.closed = threading.Event()
        self.in_sample = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.closed_mid_sample = False
        self.samples = 0
        self.hold_for = 0.0  # seconds a sample waits for a close to happen under it

    @property
    def sample_isolated(self) -> bool:
        return True

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> Sequence[DeviceSample]:
        assert not self.closed.is_set(), "sampled after close"
        self.samples += 1
        self.in_sample.set()
        self.release.wait(10)
        if self.hold_for:
            self.closed.wait(self.hold_for)  # (a close under the sample ends the wait at once)
        self.closed_mid_sample |= self.closed.is_set()
        self.in_sample.clear()
        return [DeviceSample(id="GPU-0", vendor="nvidia", kind="gpu", backend=self.name,
                             health="ok", utilization_percent=5.0)]

    def close(self) -> None:
        self.closed.set()


def test_a_close_asked_during_a_sample_on_the_callers_thread_waits_for_it() -> None:
    backend = _Isolated()
    runner = BackendRunner(backend, timeout=5.0)
    try:
        assert runner.start_call()
        assert runner.wait(time.monotonic() + 10.0).status == "ok"  # probe and open, on the worker
        backend.hold_for = 1.0
        original = backend.sample

        def sample_then_close() -> Sequence[DeviceSample]:
            runner.request_close()  # as the collector's close does, from another thread
            return original()
        backend.sample = sample_then_close  # type: ignore[method-assign]
        assert runner.start_call()
        outcome = runner.wait(time.monotonic() + 10.0)  # sampled here, on this thread
        assert outcome is not None and outcome.status == "ok" and len(outcome.devices) == 1
        assert not backend.closed_mid_sample
        assert backend.closed.wait(5.0)  # closed once the sample had returned
        assert not runner.start_call() or runner.wait(time.monotonic() + 1.0).status != "ok"
    finally:
        runner.close()
    assert backend.closed.is_set()


def test_closing_the_collector_lets_the_cycle_in_flight_end_with_its_backends_open() -> None:
    backend = _Isolated()
    collector = Collector([backend], interval_seconds=0.05, timeout_seconds=5.0)
    published: list[object] = []
    collector.subscribe(published.append)
    collector.start()
    try:
        assert collector.wait_for_first(10.0) is not None
        backend.release.clear()  # the next sample holds until released
        assert backend.in_sample.wait(10.0)
        closing = threading.Thread(target=collector.close)
        closing.start()
        closing.join(0.3)
        assert closing.is_alive() and not backend.closed.is_set()  # waiting for the cycle
        backend.release.set()
        closing.join(15.0)
        assert not closing.is_alive()
    finally:
        backend.release.set()
        collector.close()
    assert backend.closed.is_set() and not backend.closed_mid_sample
    last = published[-1]
    assert [d.health for d in last.devices] == ["ok"]  # type: ignore[attr-defined]
    assert [b.status for b in last.backends] == ["ok"]  # type: ignore[attr-defined]

"""The simulated node: a busy-looking GPU, honest activity beside the headline figure, and
holders of every waiting kind, deterministically (a pure function of time)."""

from __future__ import annotations

from allsmi.attribution import build_attributor
from allsmi.backends.simulated import load_scenario, simulated_backends
from allsmi.collection.collector import Collector
from allsmi.config import Config
from allsmi.hostactivity.settings import ActivitySettings
from allsmi.hostactivity.simulated import SimulatedHostActivity
from allsmi.collection.waiting import WaitingClassifier


def _snapshot(at: float):  # type: ignore[no-untyped-def]
    backends = simulated_backends("mixed", clock=lambda: at)
    step = WaitingClassifier(ActivitySettings(),
                             SimulatedHostActivity([b.host_evidence for b in backends]))
    collector = Collector(backends, Config(), attributor=build_attributor(Config(), simulate=True),
                          waiting=step, clock=lambda: at, inline=True)
    try:
        return collector.collect_once()
    finally:
        collector.close()


def test_every_waiting_kind_appears_and_the_busy_looking_gpu_reads_both_figures() -> None:
    epoch = load_scenario("mixed").epoch
    reasons: dict[str, str] = {}
    busy_seen = 0
    for hour in range(0, 12):
        snap = _snapshot(epoch + 86400 * 30 + hour * 1234.5)
        for dev in snap.devices:
            for w in dev.waiting or ():
                reasons.setdefault(w.reason, w.evidence)
            if dev.backend == "nvidia" and dev.index == 6 and dev.processes:
                busy_seen += 1
                assert (dev.utilization_percent, dev.compute_active_percent,
                        dev.compute_active_source) == (100.0, 20.0, "sm_active")
                assert dev.waiting and all(w.reason == "computing" and "20 %" in w.evidence
                                           for w in dev.waiting)
    assert busy_seen
    assert {"computing", "input", "host", "communication", "nothing"} <= set(reasons), reasons
    assert "MB/s read" in reasons["input"] and "device links" in reasons["communication"]


def test_the_same_instant_gives_the_same_classification() -> None:
    at = load_scenario("mixed").epoch + 86400 * 45 + 321.0
    one, two = _snapshot(at), _snapshot(at)
    assert [d.waiting for d in one.devices] == [d.waiting for d in two.devices]
    assert any(d.waiting for d in one.devices)
    # honest activity beside the headline figure, for the vendors that report one
    sources = {d.backend: d.compute_active_source for d in one.devices}
    assert sources["nvidia"] == "sm_active" and sources["amd"] == "gfx_busy"
    assert sources["tenstorrent"] is None

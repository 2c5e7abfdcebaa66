"""docs/metrics.md's sentence on allocated-time series comes from the rule the counters use."""

from __future__ import annotations

from pathlib import Path

from allsmi.exporter import reference
from allsmi.schema import DeviceSample, ProcessSample
from allsmi.usage import UsageIntegrator

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _sentence() -> str:
    return next(line for line in reference.metrics_markdown().splitlines()
                if line.startswith("`allsmi_device_allocated_seconds_total` and"))


def test_sentence_names_the_devices_the_integrator_leaves_without_allocated_time() -> None:
    # What the code does: a device with neither processes nor workloads known gets no allocated time,
    # one with a process list (even an empty one) does.
    def devices(processes):
        return [DeviceSample(id="d", vendor="intel", kind="gpu", backend="gaudi", health="ok",
                             processes=processes, workloads=None)]
    for processes, allocated in ((None, None), ((), 0.0), ((ProcessSample(pid=7),), 10.0)):
        integrator = UsageIntegrator()
        list(integrator.feed(devices(processes), 0.0, 0.0))
        [inc] = list(integrator.feed(devices(processes), 10.0, 10.0))
        assert inc.allocated_seconds == allocated
    sentence = _sentence()
    assert "`processes` and `workloads` are null" in sentence
    assert sentence in (DOCS / "metrics.md").read_text()


def test_sentence_follows_the_rule_when_it_changes(monkeypatch) -> None:
    # Were only the process list to decide, the generated sentence would say so.
    monkeypatch.setattr(reference, "held", lambda dev: None if dev.processes is None else bool(dev.processes))
    assert "whose `processes` is null in the snapshot" in _sentence()
    monkeypatch.setattr(reference, "held", lambda dev: bool(dev.processes or dev.workloads))
    assert "exist for every device seen" in _sentence()

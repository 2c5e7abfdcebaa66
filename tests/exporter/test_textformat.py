"""Our fast writers produce what prometheus_client's reference writers produce."""

from __future__ import annotations

from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from allsmi.exporter.exposition import Exposition
from allsmi.exporter.textformat import render_openmetrics, render_text
from allsmi.schema import BackendStatus, ProcessSample

from .support import T0, device, series, snapshot


class _Fixed:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


def _families():
    devs = [device(), device("GPU-b", index=1, name='odd "model"\\ \n x', power_watts=123.456789,
                             energy_joules=1e16, temperature_celsius=-3.25,
                             processes=(ProcessSample(9, "zoë", "naïve → ünïcode", 7),)),
            device("MIG-1", parent="GPU-b", power_watts=None, health="lost")]
    backends = [BackendStatus("nvidia", "ok", "", 0.000123), BackendStatus("amd", "error", "x", 2.5)]
    exposition = Exposition(processes=True, declared_groups={"g": {"team": 'a"b'}})
    exposition.on_snapshot(snapshot(devs, backends=backends))
    return list(exposition.metrics(snapshot(devs, T0 + 1.5, backends=backends)).collect())


def test_text_matches_prometheus_client() -> None:
    families = _families()
    ours = render_text(families).decode()
    reference = generate_latest(_Fixed(families)).decode()
    assert series(ours) == series(reference)
    assert ours.count("# TYPE") == reference.count("# TYPE")


def test_openmetrics_matches_prometheus_client() -> None:
    families = _families()
    ours = render_openmetrics(families).decode()
    reference = generate_openmetrics(_Fixed(families)).decode()
    assert series(ours, openmetrics=True) == series(reference, openmetrics=True)
    assert sorted(line for line in ours.splitlines() if line.startswith("#")) == \
        sorted(line for line in reference.splitlines() if line.startswith("#"))

"""The dashboard at fleet scale and under hostile hosts: memory bounded by configuration, every
number from Prometheus checked, big answers cut with a note, no key blocking the UI."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from allsmi.dashboard.app import DashboardApp
from allsmi.dashboard.model import GONE_GRACE_SECONDS, MAX_GONE_DEVICES
from allsmi.dashboard.prometheus import PrometheusSource
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import Snapshot

from .fixtures import scaled

pytestmark = pytest.mark.timeout(300)


def _churned(base: Snapshot, frame: int, copies: int) -> Snapshot:
    """``base`` x ``copies`` under device ids never used before, one second after frame - 1."""
    snap = scaled(base, copies)
    devices = tuple(replace(d, id=f"f{frame}-{d.id}", parent=None if d.parent is None else f"f{frame}-{d.parent}")
                    for d in snap.devices)
    return replace(snap, devices=devices, timestamp=base.timestamp + dt.timedelta(seconds=frame))


async def test_a_host_churning_device_ids_keeps_memory_bounded(sim_snapshots: list[Snapshot]) -> None:
    now = [1000.0]
    frames = [_churned(sim_snapshots[0], f, 12) for f in range(24)]
    per_frame = len(frames[0].devices)
    assert per_frame * len(frames) > 2 * (MAX_GONE_DEVICES + per_frame)
    source = StaticSource.of(frames, clock=lambda: now[0], interval=1.0)
    app = DashboardApp(source, clock=lambda: now[0])
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in frames[1:]:
            now[0] += 1.0
            source.advance()
            app.poll()
            assert len(app.history) <= per_frame + MAX_GONE_DEVICES
            assert len(app.energy._joules) <= per_frame + MAX_GONE_DEVICES
        await pilot.press("i")  # the idle view's windows are per host and bounded by points
        await pilot.press("c")
        last = _churned(sim_snapshots[0], 99, 1)
        for step in range(2):  # past the grace only the devices shown are kept
            now[0] += GONE_GRACE_SECONDS + 1
            source.frames.append({last.host.hostname: replace(
                last, timestamp=last.timestamp + dt.timedelta(seconds=step))})
            source.advance()
            app.poll()
        await pilot.pause()
        assert len(app.history) == len(sim_snapshots[0].devices)
        assert set(app.energy._joules) <= {r.key for r in app.all_refs()}


def _vector(samples: list[tuple[dict[str, str], float]]) -> tuple[float, list[dict[str, Any]]]:
    return 1000.0, [{"metric": m, "value": [1000.0, repr(v)]} for m, v in samples]


def test_prometheus_instances_that_left_are_dropped_after_the_grace() -> None:
    now = [0.0]
    round_ = [0]

    def query(promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        instance = f"node-{round_[0]}:9477"  # a new instance on every refresh
        if promql.startswith("count by (instance)"):
            return _vector([({"instance": instance}, 1)])
        if "allsmi_device_info" in promql and promql.startswith("{"):
            return _vector([({"__name__": "allsmi_device_info", "instance": instance, "uuid": "GPU-1",
                              "vendor": "nvidia", "index": "0", "model": "H100"}, 1)])
        return _vector([])

    source = PrometheusSource("http://127.0.0.1:9", query=query, clock=lambda: now[0], interval=1.0)
    for _ in range(50):
        source.refresh(lambda: False)
        round_[0] += 1
        now[0] += 10.0
    kept = source.hosts()
    assert len(kept) <= GONE_GRACE_SECONDS / 10 + 2, [h.key for h in kept]
    assert kept[-1].key == "node-49:9477" and kept[-1].error is None

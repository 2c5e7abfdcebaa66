"""The details panel names who holds a device held by several workloads of one holder (Pilot).

Two containers of one pod on one GPU (a DRA claim both containers share, a sidecar): the
``held by`` line was left out because the device had more than one workload, and the ``shared
by`` lines were left out because they are one holder, so the panel said nothing of who held it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.schema.holders import Workload
from allsmi.schema import Snapshot

from .conftest import frozen
from .fixtures import groups_config, simulated_snapshots

pytestmark = pytest.mark.timeout(120)


def _held(works: tuple[Workload, ...]) -> Snapshot:
    snap = simulated_snapshots(1, step=1.0)[0]
    first = next(d for d in snap.devices if d.parent is None)
    devices = tuple(replace(d, workloads=works) if d is first else d for d in snap.devices)
    return replace(snap, devices=devices)


async def _details(snap: Snapshot) -> str:
    source = StaticSource.of([snap], clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("home")
        await pilot.pause()
        return str(app.query_one("#details").plain)


async def test_two_containers_of_one_pod_are_named() -> None:
    text = await _details(_held((Workload("kubernetes", "ml", "train-0", "main"),
                                 Workload("kubernetes", "ml", "train-0", "sidecar"))))
    assert "held by pod ml/train-0/main  (kubernetes)" in text, text
    assert "held by pod ml/train-0/sidecar  (kubernetes)" in text, text
    assert "shared by" not in text


async def test_one_holder_given_half_a_device_is_one_holder() -> None:
    """Two time-slicing replicas of a quarter each, taken by one pod's two containers: one
    holder with half of the device, the other half unclaimed; never "1 holders"."""
    text = await _details(_held((Workload("kubernetes", "ml", "train-0", "a", share=0.25),
                                 Workload("kubernetes", "ml", "train-0", "b", share=0.25))))
    assert "shared by 1 holder " in text and "1 holders" not in text, text
    assert "alloc    50%" in text and "unclaimed" in text, text

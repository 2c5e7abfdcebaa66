"""One name per device and partition in every view: the device table's vendor and ``#``, the
details panel, the processes panel (both scopes, in a cluster with the host), the idle view."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import HostSample, Snapshot

from .conftest import frozen, make_app, play_all, screen_text
from .fixtures import simulated_snapshots

pytestmark = pytest.mark.timeout(120)


def region_lines(app: DashboardApp, selector: str) -> list[str]:
    """The characters on screen inside the widget ``selector``, one line per row."""
    region = app.query_one(selector).region
    lines = screen_text(app).splitlines()
    return [line[region.x:region.right] for line in lines[region.y:region.bottom]]


async def select(app: DashboardApp, pilot: Any, key: str) -> None:
    """Move the device table's cursor down to the row ``key``."""
    for _ in range(len(app.shown)):
        if app.selected == key:
            break
        await pilot.press("down")
    await pilot.pause()
    assert app.selected == key


def table_row(app: DashboardApp, text: str) -> str:
    """The device table's line on screen that shows ``text``."""
    found = [line for line in region_lines(app, "#device-table") if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


async def test_a_mig_slice_has_one_name_in_every_view() -> None:
    """GPU 7 of the simulated node runs three MIG slices: each is ``nvidia 7/N`` in the
    details, in the processes panel (selected device and all devices) and in the idle view,
    and its table row reads ``7/N`` under the vendor ``nvidia``; never ``nvidia N/A``, a
    ``MIG-...`` uuid, a star or the GPU's model name."""
    snaps = simulated_snapshots(12, step=1.0, attribution=True)
    app, source = make_app(snaps)
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        slices = [r for r in app.shown if r.device.parent is not None]
        profiles = [r.device.name.rsplit(" ", 1)[1] for r in slices]
        assert profiles == ["3g.40gb", "2g.20gb", "1g.10gb"]
        procs_seen = 0
        ids = ["7/1/0", "7/5/0", "7/13/0"]  # GPU instances 1, 5, 13 (compute instance 0)
        for n, ref in enumerate(slices):
            name = f"nvidia {ids[n]}"
            await select(app, pilot, ref.key)
            row = table_row(app, f"└ MIG {profiles[n]}").split()
            assert row[:2] == [ids[n], "nvidia"], row
            details = region_lines(app, "#details")
            assert details[0].startswith(f" {name}  NVIDIA H100 80GB HBM3 MIG {profiles[n]}  ok")
            shown = "\n".join(region_lines(app, "#processes"))
            for proc in ref.device.processes or ():
                line = next(l for l in shown.splitlines() if f" {proc.pid} " in l)
                assert f"  {name}  " in line, line
                procs_seen += 1
        assert procs_seen == 3
        await pilot.press("slash", *"MIG", "enter", "p")  # every shown device's: the same names
        await pilot.pause()
        shown = "\n".join(region_lines(app, "#processes"))
        for n, ref in enumerate(slices):
            for proc in ref.device.processes or ():
                line = next(l for l in shown.splitlines() if f" {proc.pid} " in l)
                assert f"  nvidia {ids[n]}  " in line, line
        await pilot.press("i")
        await pilot.pause()
        idle = "\n".join(region_lines(app, "#idle-table"))
        row = next(l for l in idle.splitlines() if "vllm-llama-8b" in l)
        assert row.rstrip().endswith("  nvidia 7/1/0"), row
        assert "MIG-" not in screen_text(app) and "N/A" not in row


def nvml_snapshot(monkeypatch: pytest.MonkeyPatch) -> Snapshot:
    """A snapshot of the NVIDIA backend over the fake NVML: an H100 and an A100 in MIG mode whose
    instances are GPU instances 1, 5 and 13 (compute instance 0), in MIG slots 0, 1 and 3."""
    from allsmi.backends.nvidia import NvidiaBackend
    from tests.backends.nvml_fake import FakeGpu, FakeNvml, FakeProcess

    a100 = FakeGpu.from_profile("a100-sxm4-40gb-mig", 1)
    a100.compute = [FakeProcess(4001, 10 << 30, gpu_instance_id=1, compute_instance_id=0),
                    FakeProcess(4002, 1 << 30, gpu_instance_id=13, compute_instance_id=0)]
    FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", 0), a100]).install(monkeypatch)
    backend = NvidiaBackend(process_owner=lambda pid: (f"user{pid}", f"train --rank {pid}"))
    backend.open()
    try:
        devices = tuple(backend.sample())
    finally:
        backend.close()
    return Snapshot(timestamp=dt.datetime(2026, 11, 22, 12, tzinfo=dt.timezone.utc),
                    host=HostSample(hostname="node-a"), devices=devices)


@pytest.mark.parametrize("cluster", [False, True])
async def test_mig_instances_are_named_by_gpu_index_gpu_and_compute_instance(
        monkeypatch: pytest.MonkeyPatch, cluster: bool) -> None:
    """Where NVML reports them, a MIG instance is named as nvidia-smi lists it (GPU, GI, CI):
    ``nvidia 1/13/0`` is GPU 1's GPU instance 13, compute instance 0 (in MIG slot 3, the third
    instance: neither its slot nor its place names it); in a cluster after its host."""
    snap = nvml_snapshot(monkeypatch)
    source = StaticSource.of([snap], clock=frozen, interval=1.0)
    if cluster:
        source = StaticSource([{"node-a": snap}], clock=frozen, interval=1.0, cluster=True)
    app = DashboardApp(source, clock=frozen)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        if cluster:
            await pilot.press("d")
            await pilot.pause()
        ref = next(r for r in app.shown if r.device.details.get("gpu_instance_id") == 13)
        await select(app, pilot, ref.key)
        assert table_row(app, "└ MIG 1g.5gb").split()[0] == "1/13/0"
        assert region_lines(app, "#details")[0].startswith(" nvidia 1/13/0  NVIDIA A100-SXM4-40GB MIG 1g.5gb")
        line = next(l for l in region_lines(app, "#processes") if " 4002 " in l)
        assert ("  node-a:nvidia 1/13/0  " if cluster else "  nvidia 1/13/0  ") in line, line
        await pilot.press("p")
        await pilot.pause()
        line = next(l for l in region_lines(app, "#processes") if " 4001 " in l)
        assert ("  node-a:nvidia 1/1/0  " if cluster else "  nvidia 1/1/0  ") in line, line


def test_partitions_read_through_prometheus_keep_their_names_in_any_series_order(
        sim_snapshots: list[Snapshot]) -> None:
    """Prometheus has no MIG ids and answers series in no fixed order: a partition's place
    among its GPU's, its name, must not change from one answer to the next."""
    from allsmi.dashboard.sources.prometheus import build_snapshots
    from allsmi.dashboard.state.naming import snapshot_places
    from allsmi.exporter.exposition import render_snapshot

    from .test_prometheus import as_query_result
    snap = sim_snapshots[-1]
    at = snap.unix_time + 0.5
    series = as_query_result(render_snapshot(snap), "node-a:9477", at)
    seen = []
    for answer in (series, series[::-1]):
        built = build_snapshots(answer, at, {"node-a:9477": snap.unix_time})["node-a:9477"]
        seen.append({d.id: place for d, place in zip(built.devices, snapshot_places(built))
                     if d.parent is not None})
    assert seen[0] == seen[1] and sorted(seen[0].values()) == ["7/0", "7/1", "7/2"]


async def test_the_text_filter_finds_a_device_by_its_name(sim_snapshots: list[Snapshot]) -> None:
    """``/nvidia 7/13/0`` (the name the details gave) keeps that MIG slice, with its GPU above it
    for context; ``nvidia 3`` finds GPU 3 (the name matched nothing: the text filter knew only
    ``nvidia:3``)."""
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("slash", *"nvidia 7/13/0", "enter")
        await pilot.pause()
        rows = [line.split()[:2] for line in region_lines(app, "#device-table")[1:] if line.strip()]
        assert rows == [["7", "nvidia"], ["7/13/0", "nvidia"]], rows
        await pilot.press("escape", "slash", *"nvidia 3", "enter")
        await pilot.pause()
        rows = [line.split()[:2] for line in region_lines(app, "#device-table")[1:] if line.strip()]
        assert rows == [["3", "nvidia"]], rows


async def test_a_device_that_left_keeps_its_name_in_the_idle_view() -> None:
    """The idle view lists the idle time of a device for its whole window, after the device
    left too (a MIG layout changed, a host stopped reporting it): by the name it had, not by
    its ``MIG-...`` uuid."""
    from dataclasses import replace
    snaps = simulated_snapshots(12, step=1.0, attribution=True)
    gone = next(d.id for d in snaps[0].devices if d.parent is not None)  # 7/1/0, held and idle
    frames = snaps[:8] + [replace(s, devices=tuple(d for d in s.devices if d.id != gone))
                          for s in snaps[8:]]
    app, source = make_app(frames)
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        assert all(r.device.id != gone for r in app.shown)
        await pilot.press("i")
        await pilot.pause()
        row = next(l for l in region_lines(app, "#idle-table") if "vllm-llama-8b" in l)
        assert row.rstrip().endswith("  nvidia 7/1/0"), row


def test_instance_ids_a_host_made_up_are_not_believed() -> None:
    """A hostile or broken host's ids (negative, huge, not whole numbers) fall back to the
    partition's place, so the ``#`` column stays narrow."""
    import datetime as dt
    from allsmi.dashboard.state.naming import snapshot_places
    from allsmi.schema import DeviceSample
    gpu = DeviceSample(id="GPU-a", vendor="nvidia", kind="gpu", backend="nvidia", index=2)

    def mig(n: int, **details: object) -> DeviceSample:
        return DeviceSample(id=f"MIG-{n}", vendor="nvidia", kind="gpu", backend="nvidia",
                            parent="GPU-a", details=details)  # type: ignore[arg-type]
    devices = (gpu, mig(0, gpu_instance_id=10**100, compute_instance_id=0),
               mig(1, gpu_instance_id=-1, compute_instance_id=0, mig_slot=True),
               mig(2, gpu_instance_id=3.0, compute_instance_id=0), mig(3, gpu_instance_id=9,
                                                                     compute_instance_id=1))
    snap = Snapshot(timestamp=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                    host=HostSample(hostname="h"), devices=devices)
    assert snapshot_places(snap) == ["2", "2/0", "2/1", "2/2", "2/9/1"]

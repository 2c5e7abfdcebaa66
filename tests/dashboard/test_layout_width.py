"""The device table uses the terminal's width: cut columns (model, host, vendor) widen first,
then columns are added; tiny terminals drop panels and columns by priority and still show
device rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.tables.columns import columns_for
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import Snapshot

from .conftest import frozen, make_app, play_all, screen_text
from .fixtures import groups_config

pytestmark = pytest.mark.timeout(120)

LONG_MODEL = "AMD Instinct MI300X OAM Platform Accelerator Rev B"  # 50 characters
LONG_HOST = "gpu-node-a.rack-17.datacenter-west.example.org"  # 46 characters


def _long_model(snapshots: list[Snapshot]) -> list[Snapshot]:
    """The first AMD device (no partitions) reports a 50-character model name."""
    out = []
    for snap in snapshots:
        devices = list(snap.devices)
        i = next(i for i, d in enumerate(devices) if d.vendor == "amd" and d.parent is None)
        devices[i] = replace(devices[i], name=LONG_MODEL)
        out.append(replace(snap, devices=tuple(devices)))
    return out


def _rows(app: DashboardApp) -> list[str]:
    """The screen lines that show a device row (the cursor's device's model is on it)."""
    return [line for line in screen_text(app).splitlines() if "H100" in line]


def _header(app: DashboardApp) -> str:
    return next(line for line in screen_text(app).splitlines() if line.lstrip().startswith("#"))


async def test_a_long_model_name_shows_whole_at_400_columns(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(_long_model(sim_snapshots))
    async with app.run_test(size=(400, 60)) as pilot:
        await play_all(app, source, pilot)
        text = screen_text(app)
        assert LONG_MODEL in text, text
        # The other cut columns keep their texts whole too, and the table reaches the edge.
        assert "tenstorrent" in text and "Tenstorrent Blackhole" in text
        assert app.device_table.virtual_size.width >= 380


async def test_at_120_columns_the_table_uses_the_width(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(_long_model(sim_snapshots))
    async with app.run_test(size=(120, 30)) as pilot:
        await play_all(app, source, pilot)
        header = _header(app)
        # Not the 80-column layout with 40 columns blank.
        assert app.device_table.virtual_size.width >= 110, header
        await pilot.press("slash", *"Rev B", "enter")
        await pilot.pause()
        text = screen_text(app)
        # Narrow cells leave the vendor out of the model; the rest of the name is whole.
        assert LONG_MODEL.removeprefix("AMD ") in text, text
        assert app.device_table.virtual_size.width <= app.device_table.size.width


@pytest.mark.parametrize("size", [(80, 24), (120, 30), (400, 60), (20, 5)])
async def test_rows_are_shown_and_never_scroll_sideways(sim_snapshots: list[Snapshot],
                                                        size: tuple[int, int]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=size) as pilot:
        await play_all(app, source, pilot)
        table = app.device_table
        assert _rows(app), screen_text(app)
        assert table.virtual_size.width <= table.scrollable_content_region.width
        assert [c.id for c in table.columns][:1] == ["idx"]
        assert "model" in [c.id for c in table.columns]


async def test_a_5_line_terminal_shows_device_rows_and_keeps_them_on_resize(
        sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(120, 30)) as pilot:
        await play_all(app, source, pilot)
        await pilot.resize_terminal(20, 5)
        await pilot.pause()
        lines = screen_text(app).splitlines()
        # Summary (one line), header, three device rows: the footer and the panel give way.
        assert len(_rows(app)) >= 3, lines
        assert lines[0].startswith(" node-a")
        await pilot.press("down")
        await pilot.pause()
        assert app.selected == app.device_table.order[1]
        await pilot.resize_terminal(400, 60)
        await pilot.pause()
        assert "NVIDIA H100 80GB HBM3" in screen_text(app)
        assert "Quit" in screen_text(app)  # the footer is back


@pytest.mark.parametrize("size", [(20, 5), (120, 30), (400, 60)])
async def test_cluster_devices_view_uses_the_width(sim_snapshots: list[Snapshot],
                                                   size: tuple[int, int]) -> None:
    frames = [{"10.0.0.1:9477": replace(s, host=replace(s.host, hostname=LONG_HOST)),
               "10.0.0.2:9477": replace(s, host=replace(s.host, hostname="node-b"))}
              for s in sim_snapshots]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=size) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("d")
        await pilot.pause()
        text = screen_text(app)
        assert _rows(app), text
        if size[0] >= 400:
            # The host column grows to its longest name (on the device rows, not only below).
            assert any(line.lstrip().startswith(f"0  {LONG_HOST}  ") for line in text.splitlines()), text
        elif size[0] >= 120:
            # The activity columns come first beside util; the host is cut with an ellipsis
            # (beside a `#` column as wide as a MIG slice's `7/13/0`).
            assert any(line.lstrip().startswith(f"0  {LONG_HOST[:8]}") and "\u2026" in line
                       for line in text.splitlines()), text
        if size[0] == 400:
            assert "NVIDIA H100 80GB HBM3" in text


@pytest.mark.parametrize("cluster", [False, True])
def test_every_width_fits_and_the_model_column_never_shrinks_below_its_text(cluster: bool) -> None:
    wants = {"model": 50, "model_compact": 46, "vendor": 11, "host": 30}
    for width in range(14, 600):
        columns, compact, spark = columns_for(width, cluster, wants)
        used = sum(c.width + 2 for c in columns)
        assert used <= width, (width, [(c.id, c.width) for c in columns])
        ids = [c.id for c in columns]
        assert ids[0] == "idx" and "model" in ids
        model = next(c.width for c in columns if c.id == "model")
        if "group" in ids or "history" in ids or "procs" in ids and compact:
            # Columns are added only once the model's name is whole.
            assert model == (46 if compact else 50), (width, ids)
        if not compact:
            assert width - used < 14 or spark == 400  # leftover room goes to the history
        assert spark == next((c.width for c in columns if c.id == "history"), 0)

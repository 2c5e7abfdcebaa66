"""The dashboard driven through Textual's Pilot: keys, mouse, views, panels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.screen.help import HelpScreen, key_label
from allsmi.dashboard.state.model import sort_value
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.dashboard.views.panels import ProcessTable
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import Snapshot

from .conftest import frozen, make_app, play_all, screen_text
from .fixtures import groups_config, scaled

pytestmark = pytest.mark.timeout(120)


def _top_level(app: DashboardApp) -> list:
    by_key = {r.key: r for r in app.shown}
    return [by_key[k].device for k in app.device_table.order if by_key[k].device.parent is None]


async def test_q_quits_at_once(sim_snapshots: list[Snapshot]) -> None:
    app, _ = make_app(sim_snapshots)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running
    assert app.return_code == 0


@pytest.mark.parametrize("key,field", [("u", "utilization"), ("m", "memory"), ("w", "power"),
                                       ("t", "temperature")])
async def test_sort_keys_order_devices_and_reverse(sim_snapshots: list[Snapshot], key: str, field: str) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press(key)
        values = [sort_value(d, field) for d in _top_level(app)]
        known = [v for v in values if v is not None]
        assert known == sorted(known, reverse=True) and values[:len(known)] == known
        await pilot.press(key)  # again: ascending
        known = [v for v in (sort_value(d, field) for d in _top_level(app)) if v is not None]
        assert known == sorted(known)
        assert "▲" in screen_text(app).splitlines()[1]
        await pilot.press("n")
        assert [d.id for d in _top_level(app)] == [d.id for d in sim_snapshots[-1].devices if d.parent is None]


async def test_cycle_sort_and_click_on_a_header(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("s")
        assert app.sort_key == "utilization" and app.descending
        await pilot.press("s", "s")
        assert app.sort_key == "power"
        # Click on the "temp" header: sorts by temperature.
        x = 0
        for column in app.device_table.spec:
            if column.id == "temp":
                break
            x += column.width + 2
        await pilot.click("#device-table", offset=(x + 2, 0))
        await pilot.pause()
        assert app.sort_key == "temperature"
        temps = [d.temperature_celsius for d in _top_level(app) if d.temperature_celsius is not None]
        assert temps == sorted(temps, reverse=True)


async def test_text_vendor_and_group_filters(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(100, 30)) as pilot:
        await play_all(app, source, pilot)
        total = app.device_table.row_count
        await pilot.press("slash", *"mi300x", "enter")
        assert {r.device.vendor for r in app.shown} == {"amd"} and app.device_table.row_count == 8
        assert "text='mi300x'" in screen_text(app)
        await pilot.press("escape")
        assert app.device_table.row_count == total
        await pilot.press("v")  # vendors cycle alphabetically: amd first
        assert {r.device.vendor for r in app.shown} == {"amd"}
        await pilot.press("v")
        assert {r.device.vendor for r in app.shown} == {"aws"}
        await pilot.press("escape", "f")  # groups cycle: default first
        assert {r.device.resource_group for r in app.shown} == {"default"}
        await pilot.press("f", "f")
        assert {r.device.resource_group for r in app.shown} == {"training"}
        assert app.device_table.row_count == 11  # 8 GPUs and 3 MIG slices
        # Typing in the filter box never triggers key bindings ("q" must not quit).
        await pilot.press("escape", "slash", "q")
        assert app.is_running and app.filter.text == "q"
        await pilot.press("escape")


async def test_f_after_v_cycles_only_through_groups_that_vendor_has(sim_snapshots: list[Snapshot]) -> None:
    """With a vendor chosen, ``f`` offers only the groups that vendor's devices are in (never
    ``vendor=furiosa group=inference (0 shown)``), then all of them again; ``v`` likewise."""
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(100, 30)) as pilot:
        await play_all(app, source, pilot)
        refs = app.all_refs()
        for vendor in sorted({r.device.vendor for r in refs}):
            groups = sorted({r.device.resource_group for r in refs if r.device.vendor == vendor})
            await pilot.press("escape")
            while app.filter.vendor != vendor:
                await pilot.press("v")
            seen = []
            for _ in range(len(groups)):
                await pilot.press("f")
                assert app.shown and "(0 shown)" not in screen_text(app), (vendor, app.filter)
                seen.append(app.filter.group)
            assert seen == groups, vendor
            await pilot.press("f")  # past the last: every group of that vendor again
            assert app.filter.group is None and app.filter.vendor == vendor
        # And the other way round: a group chosen, v offers only its vendors.
        await pilot.press("escape")
        while app.filter.group != "training":
            await pilot.press("f")
        await pilot.press("v")
        assert app.filter.vendor == "nvidia" and app.shown
        await pilot.press("v")
        assert app.filter.vendor is None


async def test_f_offers_the_devices_without_a_group_last(sim_snapshots: list[Snapshot]) -> None:
    """The devices no rule placed (the groups view's ``N/A`` row) are one of ``f``'s choices,
    after the named groups: before, ``f`` never reached them."""
    ungrouped = [replace(s, devices=tuple(replace(d, resource_group=None) if d.vendor == "amd"
                                          else d for d in s.devices)) for s in sim_snapshots]
    app, source = make_app(ungrouped)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_all(app, source, pilot)
        named = sorted({r.device.resource_group for r in app.all_refs()} - {None})
        seen = []
        for _ in range(len(named) + 1):
            await pilot.press("f")
            seen.append(app.filter.group)
        assert seen == [*named, ""]
        assert app.shown and {r.device.vendor for r in app.shown} == {"amd"}
        assert "group=N/A" in screen_text(app)
        await pilot.press("f")  # past the last: all devices again
        assert app.filter.group is None and len(app.shown) == len(app.all_refs())


async def test_group_view_totals_labels_energy_and_drill_down(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        assert app.view == "groups"
        groups = app.query_one("#group-table", DiffTable)
        assert groups.row_keys == ["group:default", "group:inference", "group:training"]
        row = [str(c) for c in groups.get_row("group:training")]
        assert row[1] == "8+3p" and "project=llm team=ml" in row[-1]
        assert row[5] != "N/A" and row[5].endswith(("J", "Wh"))  # energy since start
        vendors = app.query_one("#vendor-table", DiffTable)
        assert len(vendors.row_keys) == 9
        # Enter on a group shows its devices.
        groups.focus()
        await pilot.press("down", "enter")
        assert app.view == "devices" and app.filter.group == "inference"
        assert {r.device.vendor for r in app.shown} == {"amd"}
        await pilot.press("escape")  # back to the groups, the filter gone
        assert not app.filter.active and app.view == "groups"
        await pilot.press("g")  # g toggles back
        assert app.view == "devices"


async def test_help_lists_every_key_and_closes(sim_snapshots: list[Snapshot]) -> None:
    app, _ = make_app(sim_snapshots)
    async with app.run_test(size=(100, 60)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        for binding in app.BINDINGS:
            if binding.action == "view('cluster')":  # type: ignore[union-attr]
                # A single node has no cluster view: its key is not listed.
                assert (binding.tooltip or binding.description)[:30] not in text  # type: ignore[union-attr]
                continue
            assert key_label(binding.key).split()[0] in text  # type: ignore[union-attr]
            assert (binding.tooltip or binding.description)[:30] in text  # type: ignore[union-attr]
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("h")  # closes help (`q` quits, from help too: test_fleet_bounds)
        assert app.is_running and not isinstance(app.screen, HelpScreen)


async def test_selection_shows_details_history_and_processes(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("down", "down")
        ref = next(r for r in app.shown if r.key == app.selected)
        assert ref.device.index == 2 and ref.device.vendor == "nvidia"
        text = screen_text(app)
        assert ref.device.id in text and "energy" in text
        procs = app.query_one("#processes", ProcessTable)
        assert procs.row_count == len(ref.device.processes)
        for proc in ref.device.processes:
            assert str(proc.pid) in text
        # The MIG parent shows its slices' processes.
        await pilot.press("end")
        app.device_table.move_cursor(row=app.device_table.order.index(
            next(r.key for r in app.shown if r.device.name and "MIG" not in r.device.name
                 and r.device.details.get("mig_mode"))))
        await pilot.pause()
        mig_parent = next(r for r in app.shown if r.key == app.selected)
        children = [r for r in app.shown if r.device.parent == mig_parent.device.id]
        assert procs.row_count == sum(len(c.device.processes) for c in children)
        # p: every shown device's processes.
        await pilot.press("p")
        assert app.process_scope == "all"
        assert procs.row_count == sum(len(r.device.processes) for r in app.shown)


async def test_mouse_click_selects_a_row(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.click("#device-table", offset=(10, 4))  # header is row 0: fourth device
        await pilot.pause()
        assert app.selected == app.device_table.order[3]


async def test_only_changed_cells_are_rewritten(sim_snapshots: list[Snapshot]) -> None:
    first = sim_snapshots[0]
    same_again = replace(first, timestamp=sim_snapshots[1].timestamp)  # new object, same values
    source = StaticSource.of([first, same_again, sim_snapshots[2]], clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.device_table
        rows_before = dict(table.rows)
        source.advance()
        app.poll()
        await pilot.pause()
        assert table.cell_updates == 0, "identical values must not touch any cell"
        assert dict(table.rows) == rows_before
        source.advance()
        app.poll()
        await pilot.pause()
        cells = table.row_count * len(table.columns)
        assert 0 < table.cell_updates < cells


async def test_hundreds_of_devices_scroll_to_the_last(sim_snapshots: list[Snapshot]) -> None:
    big = [scaled(s, 16) for s in sim_snapshots[:2]]  # 16 x 41 = 656 rows
    app, source = make_app(big)
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        assert app.device_table.row_count == 656
        await pilot.press("end")
        await pilot.pause()
        assert app.selected == app.device_table.order[-1]
        assert "Blackhole" in screen_text(app)  # the last device (Tenstorrent) is on screen


async def test_npu_rows_draw_one_block_per_core(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        rngd = next(r for r in app.shown if r.device.vendor == "furiosa")
        cell = app.device_table.get_cell(rngd.key, "util")
        cores = rngd.device.details["core_utilization_percent"]
        assert len(cores) == 8
        assert sum(1 for ch in cell.plain if ch in "▁▂▃▄▅▆▇█") == 8


async def test_pause_freezes_and_light_theme_toggles(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("space")
        before = app.hosts[0].snapshot
        source.advance()
        app.poll()
        await pilot.pause()
        assert app.hosts[0].snapshot is before and "PAUSED" in screen_text(app)
        await pilot.press("space")
        assert app.hosts[0].snapshot is not before
        dark = app._palette
        await pilot.press("L")
        assert app.theme == "textual-light" and app._palette != dark
        await pilot.press("L")
        assert app.theme == "textual-dark"


async def test_no_color_keeps_every_value_readable(sim_snapshots: list[Snapshot],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        assert app.no_color and app._palette.mono
        text = screen_text(app)
        assert "N/A" in text and "%" in text and "°C" in text


async def test_cluster_view_marks_unreachable_hosts_and_drills_down(sim_snapshots: list[Snapshot]) -> None:
    a, b = sim_snapshots[0], replace(sim_snapshots[1], host=replace(sim_snapshots[1].host, hostname="node-b"))
    frames = [{"10.0.0.1:9477": a, "10.0.0.2:9477": b, "10.0.0.3:9477": "connection refused"},
              {"10.0.0.1:9477": a, "10.0.0.2:9477": "timed out after 5 s", "10.0.0.3:9477": "connection refused"}]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert app.view == "cluster"
        hosts = app.query_one("#host-table", DiffTable)
        assert hosts.row_keys == ["host:10.0.0.1:9477", "host:10.0.0.2:9477", "host:10.0.0.3:9477"]
        row = [str(c) for c in hosts.get_row("host:10.0.0.3:9477")]
        assert row[1] == "down" and "unreachable: connection refused" in row[-1]
        assert row[3] == "N/A"  # never heard from: nobody counted its devices (not 0)
        source.advance()
        app.poll()
        await pilot.pause()
        assert "unreachable: timed out" in str(hosts.get_row("host:10.0.0.2:9477")[-1])
        # node-b's devices stay visible, marked stale.
        await pilot.press("down", "enter")
        assert app.view == "devices" and app.filter.host == "10.0.0.2:9477"
        key = app.shown[0].key
        assert str(app.device_table.get_cell(key, "health")) == "stale"
        await pilot.press("escape")
        assert app.view == "cluster" and not app.filter.active


async def test_failing_and_hung_backends_are_shown_not_hidden(sim_snapshots: list[Snapshot]) -> None:
    from dataclasses import replace

    from allsmi.schema import BackendStatus
    healthy = sim_snapshots[0]
    statuses = tuple(
        BackendStatus(b.name, "error", "rbln-smi: failed to open /dev/rbln0") if b.name == "rebellions"
        else BackendStatus(b.name, "timeout", "no answer within 5 s") if b.name == "tenstorrent"
        else b for b in healthy.backends)
    faulty = replace(healthy, backends=statuses,
                     devices=tuple(d for d in healthy.devices if d.backend not in ("rebellions", "tenstorrent")))
    app, _ = make_app([faulty])
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "backends: rebellions error, tenstorrent timeout" in text
    app, _ = make_app([healthy])
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        assert "backends:" not in screen_text(app)


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 30), (200, 50)])
async def test_partition_rows_show_their_profile_first_at_any_width(sim_snapshots: list[Snapshot],
                                                                    size: tuple[int, int]) -> None:
    """The three MIG slices read ``└ MIG 3g.40gb``, ``2g.20gb``, ``1g.10gb`` however narrow the
    terminal, never the parent's model cut short; the summary counts them as partitions."""
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=size) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("slash", *"MIG", "enter")
        await pilot.pause()
        text = screen_text(app)
        for profile in ("└ MIG 3g.40gb", "└ MIG 2g.20gb", "└ MIG 1g.10gb"):
            assert profile in text, text
        assert "38 devices + 3 partitions" in text.splitlines()[0] or size[0] < 90


@pytest.mark.parametrize("size", [(80, 24), (120, 30)])
async def test_partition_rows_in_the_cluster_devices_view(sim_snapshots: list[Snapshot],
                                                          size: tuple[int, int]) -> None:
    """In a cluster the host column takes the vendor's place; the profile still shows whole."""
    frames = [{"10.0.0.1:9477": replace(s, host=replace(s.host, hostname="node-a"))} for s in sim_snapshots]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=size) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("d", "slash", *"MIG", "enter")
        await pilot.pause()
        text = screen_text(app)
        for profile in ("└ MIG 3g.40gb", "└ MIG 2g.20gb", "└ MIG 1g.10gb"):
            assert profile in text, text


def test_processes_panel_shows_each_process_utilization() -> None:
    """Per-process utilization (as nvitop's %SM), N/A where the vendor does not report it."""
    from allsmi.schema import ProcessSample
    names = [name for name, _, _ in ProcessTable.COLUMNS]
    at = names.index("util")
    cells = ProcessTable.cells(ProcessSample(7, "ann", "train", 1 << 30, utilization_percent=74.6),
                                "nvidia 0")
    assert cells[at].plain == "75%"
    assert ProcessTable.cells(ProcessSample(8), "nvidia 0")[at].plain == "N/A"


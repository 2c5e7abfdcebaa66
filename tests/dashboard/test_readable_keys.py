"""Keys and captions that read right: Enter leaves the filter before the next key, help lists
only keys that do something, the idle window is measured per host (a host whose clock is an
hour off neither stretches it nor goes unmentioned)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from textual import events

from allsmi.dashboard.state.idle import IdleMeter
from allsmi.dashboard.views.idleview import idle_note, idle_title
from allsmi.schema import Snapshot

from .conftest import make_app, play_all, screen_text
from .fixtures import simulated_snapshots

pytestmark = pytest.mark.timeout(120)


def _key(name: str) -> events.Key:
    return events.Key(name, name if len(name) == 1 else None)


async def test_keys_typed_right_after_enter_do_not_go_into_the_filter(
        sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("slash")
        # All queued at once, as a busy host delivers them: the filter's text, Enter, then keys
        # meant for the view (s: sort).
        sort_before = app.sort_key
        for name in (*"nothing", "enter", "s"):
            app.post_message(_key(name))
        for _ in range(20):
            await pilot.pause()
        assert app.filter.text == "nothing", app.filter
        assert app.sort_key != sort_before, "the key after Enter reached the view"
        assert app.focused is not None and app.focused.id != "filter"


async def test_help_lists_the_cluster_key_only_in_a_cluster(sim_snapshots: list[Snapshot]) -> None:
    app, _ = make_app(sim_snapshots)
    async with app.run_test(size=(100, 60)) as pilot:
        await pilot.press("question_mark")
        text = screen_text(app)
        assert "Cluster overview" not in text and "Filter by text" in text


def test_idle_window_is_measured_per_host_and_skewed_clocks_are_named() -> None:
    snaps = simulated_snapshots(4, step=10.0)
    meter = IdleMeter(threshold=5.0, points=60, interval=10.0)
    base = snaps[0].unix_time
    for k, snap in enumerate(snaps):
        received = base + 10.0 * k + 0.5
        meter.add("good", snap, now=received)
        ahead = replace(snap, timestamp=snap.timestamp + timedelta(hours=1))
        meter.add("ahead", ahead, now=received)
    start, end = meter.span()
    assert end - start == pytest.approx(30.0, abs=0.01)  # 4 snapshots 10 s apart: not 1 h 30 s
    assert "last 30 s" in idle_title(meter.span(), 5.0, 60, []).plain
    assert set(meter.skewed()) == {"ahead"}
    assert meter.skewed()["ahead"] == pytest.approx(3600 - 0.5, abs=0.01)
    note = idle_note(1, [], {"node-ahead": meter.skewed()["ahead"]}).plain
    assert "Clock off" in note and "node-ahead +1 h 0 min" in note, note


async def test_the_details_panel_scrolls_to_every_holder_at_80x24() -> None:
    from allsmi.dashboard.screen.app import DashboardApp
    from allsmi.dashboard.sources import StaticSource

    from .readable import SHARED, hostile_node
    source = StaticSource([{"gpu-node:9477": hostile_node()}], cluster=True, interval=1.0)
    app = DashboardApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("d")
        await pilot.press("end")
        await pilot.pause()
        panel = app.query_one("#details")
        assert "shared by 6 holders" in panel.plain
        region = panel.region
        seen = []
        for _ in range(15):  # the mouse wheel over the panel, as a terminal sends it
            panel.post_message(events.MouseScrollDown(panel, region.x + 2, region.y + 2, 0, 0, 0,
                                                      False, False, False))
            await pilot.pause()
            seen.append(screen_text(app))
        text = "\n".join(seen)
        # The last holder (the busiest: 10 of 45 points of util) and the unclaimed rest.
        assert len(SHARED) == 6 and "used  22.2%" in text and "used      -  unclaim" in text, text
        assert "waiting communication: NVLink" in text and "waiting host: 1 process" in text, text


def test_the_idle_row_nobody_claimed_is_labelled() -> None:
    from allsmi.dashboard.state.idle import NOBODY, IdleRow
    from allsmi.dashboard.views.idleview import UNCLAIMED, idle_cells
    from allsmi.dashboard.views.render import Palette
    cells = idle_cells(IdleRow("shared", NOBODY, idle_seconds=7.2), {}, Palette.from_theme(None, True))
    assert str(cells[3]) == UNCLAIMED == "(unclaimed)"


async def test_the_groups_view_gives_energy_in_one_unit(sim_snapshots: list[Snapshot]) -> None:
    import re
    from allsmi.dashboard.views.groups import energy_in, energy_unit
    assert energy_unit(500.0)[0] == "J" and energy_unit(5e4)[0] == "Wh" and energy_unit(5e7)[0] == "kWh"
    assert energy_in(500.0, energy_unit(5e4)) == "0.1 Wh"
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        table = app.query_one("#group-table")
        units = set()
        for key in table.rows:
            cells = [str(c) for c in table.get_row(key)]
            units.update(m.group(1) for c in cells for m in [re.fullmatch(r"[\d.]+ (J|Wh|kWh)", c)] if m)
        assert len(units) == 1, units


async def test_hosts_known_by_their_totals_alone_stay_fresh(sim_snapshots: list[Snapshot]) -> None:
    """A large Prometheus fleet sends each host's totals, no snapshot: every answer is fresh
    data (its time of arrival moves), so the summary's age stays that of the last answer instead
    of climbing with the dashboard's uptime."""
    from allsmi.dashboard.screen.app import DashboardApp
    from allsmi.dashboard.sources import HostState
    from allsmi.dashboard.state.totals import Totals

    clock = [1000.0]

    class Fleet:
        interval, cluster, fetches, detailed = 1.0, True, False, False

        def hosts(self):  # type: ignore[no-untyped-def]
            # answered 4 s ago, every time it is asked
            return [HostState(f"node{i}:9477", f"node{i}:9477", None, clock[0] - 4.0,
                              summary=Totals(f"node{i}:9477", devices=8)) for i in range(3)]

        def totals(self, by: str) -> dict:  # type: ignore[type-arg]
            return {}

        def refresh(self, cancelled):  # type: ignore[no-untyped-def]
            pass

        def history(self):  # type: ignore[no-untyped-def]
            return []

        def close(self) -> None:
            pass

    app = DashboardApp(Fleet(), clock=lambda: clock[0])  # type: ignore[arg-type]
    async with app.run_test(size=(160, 40)) as pilot:
        for _ in range(5):
            clock[0] += 60.0
            app.poll()
            await pilot.pause()
        summary = app.query_one("#summary").plain
        assert "age 4 s" in summary, summary


@pytest.mark.parametrize("view, text", [("g", "npu"), ("i", "carol")])
async def test_enter_in_the_filter_box_only_closes_it(sim_snapshots: list[Snapshot], view: str,
                                                      text: str) -> None:
    """Enter keeps the filter and leaves the box; it does not also act on the view (drill into
    the highlighted group or holder)."""
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press(view)
        shown = app.view
        await pilot.press("slash", *text, "enter")
        for _ in range(5):
            await pilot.pause()
        assert app.view == shown and app.filter.text == text, (app.view, app.filter)
        assert app.focused is not None and app.focused.id != "filter"


async def test_the_help_says_what_its_keys_do(sim_snapshots: list[Snapshot]) -> None:
    app, _ = make_app(sim_snapshots)
    async with app.run_test(size=(100, 60)) as pilot:
        await pilot.press("question_mark")
        assert "Esc or ? closes this screen; q quits." in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert "closes this screen" not in screen_text(app)


@pytest.mark.parametrize("view", ["g"])
async def test_esc_after_a_drill_down_goes_back_to_its_view(sim_snapshots: list[Snapshot],
                                                            view: str) -> None:
    """Enter on a group (or an idle holder) shows its devices; Esc goes back where it came from,
    as the help says; a view chosen by its key is not gone back from."""
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press(view)
        for _ in range(3):
            await pilot.pause()
        origin = app.view
        await pilot.press("enter")
        for _ in range(3):
            await pilot.pause()
        assert app.view == "devices" and app.filter.active, (app.view, app.filter)
        await pilot.press("escape")
        for _ in range(3):
            await pilot.pause()
        assert app.view == origin and not app.filter.active, (app.view, app.filter)
        await pilot.press("d", "slash", *"nvidia", "enter", "escape")
        for _ in range(3):
            await pilot.pause()
        assert app.view == "devices" and not app.filter.active


def test_one_holder_with_two_processes_is_not_shown_as_shared() -> None:
    """Two processes of one user: one holder, so no "shared by" lines (never "shared by 1
    holders"); two users: shared by 2."""
    from allsmi.dashboard.views.panels import share_lines
    from allsmi.schema import DeviceSample, ProcessSample

    def gpu(*users: str) -> DeviceSample:
        return DeviceSample(id="GPU-x", vendor="nvidia", kind="gpu", backend="nvidia", index=0,
                            utilization_percent=80.0, processes=tuple(
                                ProcessSample(100 + i, user=u, memory_bytes=1 << 30,
                                              utilization_percent=40.0)
                                for i, u in enumerate(users)))
    assert share_lines(gpu("alice", "alice"), "cyan") == []
    lines = share_lines(gpu("alice", "bob"), "cyan")
    assert lines and "".join(text for text, _ in lines[0]).startswith("shared by 2 holders")


async def test_the_details_panel_scrolls_by_keys_after_tab_at_80x24() -> None:
    """Without a mouse: Tab gives the details panel the focus, the keys then scroll it to every
    holder and its last line (the bus id); Tab goes on to the processes, then back to the table."""
    from allsmi.dashboard.screen.app import DashboardApp
    from allsmi.dashboard.sources import StaticSource

    from .readable import hostile_node
    source = StaticSource([{"gpu-node:9477": hostile_node()}], cluster=True, interval=1.0)
    app = DashboardApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("d")
        await pilot.press("end")
        await pilot.pause()
        panel = app.query_one("#details")
        assert "shared by 6 holders" in panel.plain and "bus " not in screen_text(app)
        await pilot.press("tab")
        assert app.focused is panel
        seen = []
        for key in ["pagedown"] * 2 + ["down"] * 12:
            await pilot.press(key)
            seen.append(screen_text(app))
        text = "\n".join(seen)
        assert "used  22.2%" in text and "used      -  unclaim" in text, text
        assert "waiting communication: NVLink" in text and "bus " in seen[-1], text
        await pilot.press("home")
        assert "shared by 6 holders" in screen_text(app)
        await pilot.press("tab")
        assert app.focused is app.query_one("#processes")
        await pilot.press("tab")
        assert app.focused is app.device_table

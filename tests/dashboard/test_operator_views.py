"""Moving between views as an operator does: a filter carried into another view, Enter on a row
and Esc back, a failing backend on one node of a cluster, the idle view's ranking (Pilot)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.dashboard.state.idle import IdleRow, order_rows
from allsmi.schema import ProcessSample, Snapshot
from allsmi.usage import Holder

from .conftest import frozen, make_app, play_all, screen_text
from .fixtures import groups_config, simulated_snapshots

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def held() -> list[Snapshot]:
    """The simulated node with its pods and jobs (an MI300X held by bob's job sits idle)."""
    return simulated_snapshots(4, step=1.0, attribution=True)


async def test_a_text_filter_typed_in_the_devices_view_keeps_meaning_in_the_idle_view(
        held: list[Snapshot]) -> None:
    """``/mi300x`` then ``i``: the idle view looked for "mi300x" in holder names only and went
    empty, though MI300Xs sat idle; now it keeps the holders of the devices the filter finds,
    and its state line counts holders, not devices."""
    app, source = make_app(held)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("slash", *"mi300x", "enter", "i")
        await pilot.pause()
        assert app.view == "idle" and app.idle_rows
        by_key = {r.key: r for r in app.all_refs()}
        for row in app.idle_rows:
            assert any(by_key[k].device.vendor == "amd" for k in row.devices)
        state = screen_text(app).splitlines()[1]
        count = len(app.idle_rows)
        assert f"({count} holder{'' if count == 1 else 's'} shown)" in state
        # The holder's own name still finds it, typed in the idle view.
        await pilot.press("escape", "slash", *app.idle_rows[0].holder.job or "bob", "enter")
        assert app.idle_rows


async def test_enter_on_an_unclaimed_idle_row_shows_its_device_not_its_whole_group(
        held: list[Snapshot]) -> None:
    """A device held by a process nobody is named for (no user, pod or job) is on the idle
    view's ``(unclaimed)`` row; Enter on it showed every device of its group (the drill was a
    text filter on the holder's name, and it has none)."""
    target = next(d for d in held[-1].devices if d.vendor == "amd" and not d.workloads
                  and not d.processes and d.utilization_percent == 0)
    nobody = (ProcessSample(pid=4242, memory_bytes=2**30),)
    frames = [replace(s, devices=tuple(replace(d, processes=nobody) if d.id == target.id else d
                                       for d in s.devices)) for s in held]
    app, source = make_app(frames)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        row = next(i for i, r in enumerate(app.idle_rows) if not any(r.holder))
        app.query_one("#idle-table").move_cursor(row=row)  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        assert app.view == "devices"
        assert [r.device.id for r in app.shown] == [target.id]
        assert "(unclaimed)" in screen_text(app).splitlines()[1]
        await pilot.press("escape")
        assert app.view == "idle" and not app.filter.active


async def test_enter_on_a_holder_shows_the_devices_it_holds_not_what_its_name_matches(
        held: list[Snapshot]) -> None:
    """A job id is also a substring of pids, commands and other ids: the drill-down showed every
    device where the text appeared. It shows the devices the holder holds (and held idle)."""
    last = held[-1]
    job = next(w.job_id for d in last.devices if d.vendor == "amd" for w in d.workloads or ()
               if w.job_id)
    holding = {d.id for d in last.devices if any(w.job_id == job for w in d.workloads or ())}
    group = next(d.resource_group for d in last.devices if d.id in holding)
    stranger = next(d for d in last.devices if d.id not in holding and d.processes
                    and d.resource_group == group)
    # Another device whose process command mentions the job id: found by the text, not held.
    frames = [replace(s, devices=tuple(
        replace(d, processes=tuple(replace(p, command=f"tail -f /logs/{job}.out") for p in d.processes))
        if d.id == stranger.id else d for d in s.devices)) for s in held]
    app, source = make_app(frames)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        row = next(i for i, r in enumerate(app.idle_rows) if r.holder.job == job)
        app.query_one("#idle-table").move_cursor(row=row)  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        assert {r.device.id for r in app.shown if r.device.parent is None} == holding


async def test_enter_on_the_group_of_devices_without_one_shows_those_devices(
        held: list[Snapshot]) -> None:
    """The groups view names devices without a resource group ``N/A``; Enter on that row set no
    group filter at all and showed every device."""
    frames = [replace(s, devices=tuple(replace(d, resource_group=None) if d.vendor == "furiosa" else d
                                       for d in s.devices)) for s in held]
    app, source = make_app(frames)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        table = app.query_one("#group-table")
        row = table.row_keys.index("group:N/A")  # type: ignore[attr-defined]
        table.move_cursor(row=row)  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        assert app.view == "devices" and {r.device.vendor for r in app.shown} == {"furiosa"}
        assert "group=N/A" in screen_text(app).splitlines()[1]
        await pilot.press("escape")
        assert app.view == "groups"


def _cluster(snaps: list[Snapshot], broken: bool = True) -> tuple[DashboardApp, StaticSource]:
    def host(snap: Snapshot, name: str, fail: bool) -> Snapshot:
        snap = replace(snap, host=replace(snap.host, hostname=name))
        if not fail:
            return snap
        return replace(snap, devices=tuple(d for d in snap.devices if d.vendor != "amd"),
                       backends=tuple(replace(b, status="timeout", message="no answer within 5 s")
                                      if b.name == "amd" else b for b in snap.backends))
    frames = [{"10.0.0.1:9477": host(s, "node-a", False), "10.0.0.2:9477": host(s, "node-b", broken)}
              for s in snaps]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    return DashboardApp(source, config=groups_config(), clock=frozen), source


async def test_a_backend_failing_on_one_node_is_said_on_that_node_s_row(held: list[Snapshot]) -> None:
    """The summary said ``backends: amd timeout`` without a node, and the node's row said nothing:
    which of a hundred nodes lost its GPUs was nowhere on screen."""
    app, source = _cluster(held)
    async with app.run_test(size=(160, 30)) as pilot:
        await play_all(app, source, pilot)
        text = screen_text(app)
        assert "backends: amd timeout on node-b" in text.splitlines()[0]
        node_b = [line for line in text.splitlines() if "10.0.0.2:9477" in line][0]
        assert "backend amd timeout: no answer within 5 s" in node_b
        node_a = [line for line in text.splitlines() if "10.0.0.1:9477" in line][0]
        assert "backend" not in node_a


async def test_esc_after_enter_on_a_group_of_the_cluster_view_goes_back_to_it(
        held: list[Snapshot]) -> None:
    """Enter on a host row and Esc came back to the cluster view; Enter on one of its group or
    vendor rows and Esc stayed in the devices view with the filter cleared."""
    app, source = _cluster(held, broken=False)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("tab")  # the cluster view's groups table
        await pilot.pause()
        assert app.focused is app.query_one("#cluster-group-table")
        await pilot.press("enter")
        await pilot.pause()
        assert app.view == "devices" and app.filter.group is not None
        await pilot.press("escape")
        await pilot.pause()
        assert app.view == "cluster" and not app.filter.active


def test_idle_rows_tied_on_time_never_compare_currencies() -> None:
    """By idle time, holders sharing a device equally tie; the tie went by cost across
    currencies (5 USD before 3 EUR) with an unknown cost counted as 0."""
    rows = [IdleRow("a", Holder("usd"), idle_seconds=60.0, idle_cost=5.0, currency="USD"),
            IdleRow("b", Holder("eur"), idle_seconds=60.0, idle_cost=3.0, currency="EUR"),
            IdleRow("c", Holder("none"), idle_seconds=60.0),
            IdleRow("d", Holder("zero"), idle_seconds=60.0, idle_cost=0.0, currency="USD"),
            IdleRow("e", Holder("long"), idle_seconds=90.0)]
    ranked = [r.holder.user for r in order_rows(rows, "time")]
    assert ranked == ["long", "eur", "usd", "zero", "none"]
    assert [r.holder.user for r in order_rows(rows, "time", descending=False)] == ranked[::-1]


async def test_a_click_on_a_totals_or_idle_header_sorts_by_it(held: list[Snapshot]) -> None:
    """The help and the docs say a click on a column header sorts by it; in the groups and idle
    views (Textual tables) a click did nothing."""
    app, source = make_app(held)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        table = app.query_one("#group-table")
        x = 0
        for column in table.ordered_columns:  # type: ignore[attr-defined]
            if column.key.value == "util":
                break
            x += column.get_render_width(table)
        await pilot.click("#group-table", offset=(x + 1, 0))
        await pilot.pause()
        assert app.sort_key == "utilization" and app.descending
        await pilot.click("#group-table", offset=(x + 1, 0))
        await pilot.pause()
        assert app.sort_key == "utilization" and not app.descending
        await pilot.press("i")
        await pilot.pause()
        table = app.query_one("#idle-table")
        x = 0
        for column in table.ordered_columns:  # type: ignore[attr-defined]
            if column.key.value == "idle":
                break
            x += column.get_render_width(table)
        await pilot.click("#idle-table", offset=(x + 1, 0))
        await pilot.pause()
        assert app.idle_sort == "time"


async def test_a_failing_backend_is_said_at_80_columns_and_no_number_is_cut() -> None:
    """The summary's first line was cut at the screen's edge: at 80 columns the failing backends
    (said last) never showed, and the power read ``(27 o…``. Whole pieces give way instead, the
    least needed first."""
    faults = simulated_snapshots(2, step=1.0, scenario="mixed-faults")
    app, source = make_app(faults)
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        line = screen_text(app).splitlines()[0]
        assert "backends: rebellions error, tenstorrent timeout" in line
    app, source = make_app(simulated_snapshots(2, step=1.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        line = screen_text(app).splitlines()[0]
        assert "…" not in line and "power 9.7/19.1 kW (27 of 36)" in line and "38+3p devices" in line
    app, source = make_app(simulated_snapshots(2, step=1.0))
    async with app.run_test(size=(200, 24)) as pilot:  # wide: everything, as before
        await play_all(app, source, pilot)
        line = screen_text(app).splitlines()[0]
        assert "38 devices + 3 partitions" in line and "CPU 12%" in line


async def test_the_idle_figures_show_on_an_80_column_terminal() -> None:
    """The idle view's 40-cell namespace/pod column pushed `idle h` and `idle cost` off an
    80-column screen: the figures come beside the group."""
    snaps = simulated_snapshots(12, step=1.0, attribution=True)
    source = StaticSource.of(snaps, clock=frozen)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        text = screen_text(app)
        assert "idle h" in text and "idle cost" in text, text

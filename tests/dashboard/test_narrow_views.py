"""The dashboard at its edges: below 80 columns the totals and hosts tables leave columns out
rather than cut a number at the table's edge (no sideways scrolling), as the devices table does;
the details panel's sparklines with long values; shared devices whose holders are unknown; the
processes panel's order where memory is unknown."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.dashboard.tables.process_table import ProcessTable
from allsmi.dashboard.views.panels import DetailPanel
from allsmi.schema import DeviceSample, ProcessSample, Snapshot

from .conftest import frozen, make_app, play_all, screen_text
from .fixtures import groups_config

pytestmark = pytest.mark.timeout(120)

GIB = 1024**3
NUMBERS = ("devices", "util", "memory", "power", "energy", "procs", "hosts", "age")


def whole_numbers(app: DashboardApp, selector: str) -> list[str]:
    """The columns of the table; asserts it does not scroll sideways and every number of the
    rows on screen is on its line whole."""
    table = app.query_one(selector, DiffTable)
    assert table.max_scroll_x == 0, (selector, table.virtual_size, table.size)
    columns = [str(c.key.value) for c in table.columns.values()]
    lines = screen_text(app).splitlines()
    top = table.region.y + 1  # under the header
    shown = max(0, min(table.region.height - 1, len(lines) - 1 - top))  # not under the footer
    for i, key in enumerate(table.row_keys[:shown]):
        line = lines[top + i][table.region.x:table.region.right]
        for column, cell in zip(columns, table.get_row(key)):
            text = str(cell).strip()
            if column in NUMBERS and text:
                assert "…" not in text and text in line, (selector, key, column, text, line)
    return columns


@pytest.mark.parametrize("width", [40, 56])
async def test_groups_view_leaves_power_and_memory_out_rather_than_cut_them(
        sim_snapshots: list[Snapshot], width: int) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(width, 24)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        shown = whole_numbers(app, "#group-table")
        assert shown[:2] == ["name", "util"], shown
        whole_numbers(app, "#vendor-table")
        await pilot.resize_terminal(20, 5)
        await pilot.pause()
        whole_numbers(app, "#group-table")
        await pilot.resize_terminal(200, 40)  # and back: every column again
        await pilot.pause()
        assert {"memory", "power"} <= set(whole_numbers(app, "#group-table"))


async def test_hosts_view_leaves_power_and_memory_out_rather_than_cut_them(
        sim_snapshots: list[Snapshot]) -> None:
    frames = [{"node-a": s, "node-b": "refused"} for s in sim_snapshots]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(40, 16)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("c")
        await pilot.pause()
        shown = whole_numbers(app, "#host-table")
        assert shown[:3] == ["host", "state", "util"], shown
        whole_numbers(app, "#cluster-group-table")
        await pilot.resize_terminal(30, 10)
        await pilot.pause()
        whole_numbers(app, "#host-table")


def _device(**values: object) -> DeviceSample:
    return DeviceSample(id="gpu-0", vendor="amd", kind="gpu", backend="amd", index=0,
                        name="AMD Instinct MI300X", health="ok", **values)  # type: ignore[arg-type]


@pytest.mark.parametrize("used,total", [(150 * GIB, 192 * GIB), (100 * GIB, 141 * GIB)])
async def test_detail_sparklines_end_in_one_column_whatever_the_memory(
        sim_snapshots: list[Snapshot], used: int, total: int) -> None:
    """``150.0 GiB/192.0 GiB`` is longer than the value's 18 cells: its sparkline still ends in
    the column the others end in, and is not cut with an ellipsis."""
    dev = _device(utilization_percent=50.0, memory_used_bytes=used, memory_total_bytes=total,
                  power_watts=500.0, power_limit_watts=750.0, temperature_celsius=60.0)
    app, source = make_app([replace(s, devices=(dev,)) for s in sim_snapshots])
    async with app.run_test(size=(120, 30)) as pilot:
        await play_all(app, source, pilot)
        panel = app.query_one("#details", DetailPanel)
        lines = screen_text(app).splitlines()[panel.region.y:panel.region.bottom]
        rows = {line.split()[0]: line[panel.region.x:panel.region.right].rstrip()
                for line in lines if line.split() and line.split()[0] in ("util", "mem", "power", "temp")}
        assert set(rows) == {"util", "mem", "power", "temp"}, lines
        assert not any(row.endswith("…") for row in rows.values()), rows
        assert len({len(row) for row in rows.values()}) == 1, rows  # the sparklines' right ends


@pytest.mark.parametrize("users", [(None, None), ("alice", None)])
async def test_a_device_shared_with_unknown_holders_says_so(sim_snapshots: list[Snapshot],
                                                             users: tuple[str | None, ...]) -> None:
    """Processes whose user and job are unknown are not attributed (allsmi.fairshare): the panel
    counts them among the holders and says why their part is unclaimed; no shares were declared."""
    procs = tuple(ProcessSample(pid=100 + i, user=u, command="python", memory_bytes=GIB)
                  for i, u in enumerate(users))
    dev = _device(utilization_percent=50.0, processes=procs)
    app, source = make_app([replace(s, devices=(dev,)) for s in sim_snapshots])
    async with app.run_test(size=(200, 50)) as pilot:
        await play_all(app, source, pilot)
        text = screen_text(app)
        assert "shared by 2 holders" in text, text
        assert "declared" not in text and "no known user" in text, text


async def test_processes_of_unknown_memory_come_last_in_pid_order(sim_snapshots: list[Snapshot]) -> None:
    """Processes that do not report their memory are after those that do (0 bytes too: unknown
    is not 0), and among equals in the order of their pids as numbers (162 before 1000)."""
    pids = (1000, 162, 7, 20000, 31)
    procs = tuple(ProcessSample(pid=pid, user="u", command="c", memory_bytes=None) for pid in pids)
    procs += (ProcessSample(pid=5000, user="u", command="c", memory_bytes=0),
              ProcessSample(pid=4000, user="u", command="c", memory_bytes=GIB))
    app, source = make_app([replace(s, devices=(_device(processes=procs),)) for s in sim_snapshots])
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        table = app.query_one("#processes", ProcessTable)
        shown = [int(key.rpartition("\x1e")[2]) for key in table.row_keys]
        assert shown == [4000, 5000, 7, 31, 162, 1000, 20000], shown


def test_the_summary_says_one_device_and_an_unknown_ram_once(sim_snapshots: list) -> None:  # type: ignore[type-arg]
    """One device is "1 device"; host memory nobody could read is "RAM N/A", not "N/A/N/A"."""
    import dataclasses

    from allsmi.dashboard.sources import HostState
    from allsmi.dashboard.state.filtering import Filter
    from allsmi.dashboard.state.model import refs_of
    from allsmi.dashboard.state.totals import totals_by
    from allsmi.dashboard.views.render import Palette
    from allsmi.dashboard.views.summary import summary_lines
    snap = sim_snapshots[-1]
    one = next(d for d in snap.devices if d.parent is None)
    host = dataclasses.replace(snap.host, memory_used_bytes=None, memory_total_bytes=None)
    snap = dataclasses.replace(snap, devices=(one,), host=host)
    state = HostState("node", "node", snap, 0.0, address="node")
    refs = list(refs_of(state.key, snap))
    (total,) = totals_by(refs, lambda r: "all")
    line, _ = summary_lines(hosts=[state], cluster=False, total=total, palette=Palette(), now=0.0,
                            interval=1.0, view="devices", sort_key="index", descending=False,
                            flt=Filter(), shown=refs, process_scope="selected", paused=False,
                            refresh_error=None)
    assert "  1 device " in line.plain + " " and "1 devices" not in line.plain, line.plain
    assert "RAM N/A" in line.plain and "N/A/N/A" not in line.plain, line.plain

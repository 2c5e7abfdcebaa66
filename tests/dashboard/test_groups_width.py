"""The groups view fits the terminal's width: at 80 columns no sideways scrolling, no number
cut, the least needed columns left out and named on the state line."""

from __future__ import annotations

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.state.totals import Totals
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.dashboard.views.groups import PAD, totals_layout
from allsmi.dashboard.views.render import Palette
from allsmi.schema import Snapshot

from .conftest import make_app, play_all, screen_text

pytestmark = pytest.mark.timeout(120)

NUMBERS = ("devices", "util", "memory", "power", "energy", "procs", "hosts")


def _lines_of(app: DashboardApp, selector: str) -> dict[str, str]:
    """Row key -> the line on screen that shows it."""
    table = app.query_one(selector, DiffTable)
    lines = screen_text(app).splitlines()
    top = table.region.y + 1  # under the header
    return {key: lines[top + i][table.region.x:table.region.right]
            for i, key in enumerate(table.row_keys[:table.region.height - 1])}


def _assert_whole(app: DashboardApp, selector: str) -> list[str]:
    """Every cell of every row of the table is on its line whole; the table does not scroll
    sideways. Returns the columns shown."""
    table = app.query_one(selector, DiffTable)
    assert table.max_scroll_x == 0, (selector, table.virtual_size, table.size)
    columns = [str(c.key.value) for c in table.columns.values()]
    for key, line in _lines_of(app, selector).items():
        for column, cell in zip(columns, table.get_row(key)):
            text = str(cell).strip()
            if column in NUMBERS:
                assert text and "…" not in text and text in line, (key, column, text, line)
    return columns


async def test_the_groups_view_fits_80_columns_and_cuts_no_number(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        groups = app.query_one("#group-table", DiffTable)
        assert _assert_whole(app, "#group-table")[-1] == "labels"  # wide: every column
        groups.move_cursor(row=groups.row_keys.index("group:training"))
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        shown = _assert_whole(app, "#group-table")
        assert shown[:6] == ["name", "devices", "util", "memory", "power", "energy"], shown
        assert _assert_whole(app, "#vendor-table") == [c for c in shown if c != "labels"]
        state = screen_text(app).splitlines()[1]
        assert "hidden: labels, hosts, pro" in state, state
        header = next(line for line in screen_text(app).splitlines() if "power / limit" in line)
        assert header.rstrip().endswith("energy") and len(header.rstrip()) <= 80
        # the same group highlighted after the new layout
        assert groups.row_keys[groups.cursor_row] == "group:training"


def _layout(totals: Totals, width: int = 80) -> tuple[dict[str, str], list[str], list[str]]:
    """(column id -> cell text, the columns' ids, the hidden columns) of one group row."""
    layout = totals_layout([totals], [totals], Palette.from_theme(None, True), width)
    ids = [cid for cid, _, _ in layout.columns]
    assert sum(w + PAD for _, _, w in layout.columns) <= width
    for (cid, _, w), cell in zip(layout.columns, layout.groups[0][1]):
        if cid in NUMBERS:
            assert cell.cell_len <= w, (cid, str(cell), w)  # never cut
    return dict(zip(ids, (str(c) for c in layout.groups[0][1]))), ids, layout.hidden


def test_memory_in_one_unit_keeps_the_energy_column_at_80() -> None:
    """``248.8 GiB/557.5 GiB (7 of 8)`` leaves no room for the energy at 80 columns;
    ``248.8/557.5 GiB (7 of 8)`` does."""
    group = Totals("training", devices=8, hosts={"a"}, utilization_sum=50.0, utilization_count=1,
                   memory_used_bytes=int(248.8 * 2**30), memory_total_bytes=int(557.5 * 2**30),
                   memory_count=7, memory_reported=8, power_watts=900.0, power_limit_watts=600.0,
                   power_limited_watts=201.0, power_count=5, power_limited_count=2,
                   energy_joules=12.3 * 3600, labels={"team": "ml"}, processes=4)
    cells, ids, hidden = _layout(group)
    assert ids == ["name", "devices", "util", "memory", "power", "energy"]
    assert (cells["memory"], cells["power"], cells["energy"]) == (
        "248.8/557.5 GiB (7 of 8)", "201/600 W (2 of 5)", "12.3 Wh")
    assert hidden == ["labels", "hosts", "procs"]
    cells, ids, hidden = _layout(group, 200)  # wide: every column, memory in two units
    assert cells["memory"] == "248.8 GiB/557.5 GiB (7 of 8)" and not hidden and ids[-1] == "labels"


def test_a_long_name_is_cut_before_a_column_of_numbers_goes() -> None:
    """The widest cells the totals make (lost devices, partial memory and power pairs, a long
    day's energy, a long name) at 80 columns: the name is cut (with an ellipsis) and grows back
    into the room left, the columns of numbers shown are whole."""
    big = Totals("inference-long-name", devices=4096, partitions=512, lost=3, hosts={"a", "b"},
                 utilization_sum=50.0, utilization_count=1, memory_used_bytes=700 * 2**30,
                 memory_total_bytes=3 * 2**39, memory_count=7, memory_reported=8,
                 power_watts=900.0, power_limit_watts=600.0, power_limited_watts=201.0,
                 power_count=5, power_limited_count=2, energy_joules=1234.56 * 3.6e6,
                 labels={"team": "x" * 40}, processes=12345)
    cells, ids, hidden = _layout(big)
    assert ids == ["name", "devices", "util", "memory", "power"], ids
    assert (cells["devices"], cells["memory"]) == ("4096+512p 3!", "0.7/1.5 TiB (7 of 8)")
    assert hidden == ["labels", "hosts", "procs", "energy"]
    layout = totals_layout([big], [big], Palette.from_theme(None, True), 80)
    assert dict((c, w) for c, _, w in layout.columns)["name"] == 16  # 12, and the 4 cells left
    cells, ids, hidden = _layout(big, 120)
    assert cells["energy"] == "1234.56 kWh" and cells["memory"] == "700.0 GiB/1.5 TiB (7 of 8)"

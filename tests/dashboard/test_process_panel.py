"""The processes panel (a line-based table): rows in memory order, the cursor and its keys,
scrolling, clicks, and repaints only of what changed."""

from __future__ import annotations

from allsmi.schema.formatting import human_bytes

from .conftest import make_app, play_all, screen_text
from .fixtures import simulated_snapshots


def _pid(key: str) -> str:
    return key.rsplit("\x1e", 1)[1]


async def test_rows_follow_memory_and_the_screen_shows_the_current_values() -> None:
    snaps = simulated_snapshots(6, step=1.0)
    app, source = make_app(snaps)
    app.process_scope = "all"
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        table = app.process_table
        procs = {str(p.pid): p for r in app.shown for p in r.device.processes or ()}
        keys = table.row_keys
        assert len(keys) == min(len(procs), 100)
        sizes = [procs[_pid(k)].memory_bytes or 0 for k in keys]
        assert sizes == sorted(sizes, reverse=True)
        first = procs[_pid(keys[0])]
        row = [str(c) for c in table.get_row(keys[0])]
        assert row[0] == str(first.pid) and row[2] == human_bytes(first.memory_bytes)
        text = screen_text(app)
        header = next(line for line in text.splitlines() if "job / pod" in line)
        for label in ("pid", "user", "memory", "device", "util", "command"):
            assert label in header
        assert f"{first.pid} " in text and human_bytes(first.memory_bytes) in text


async def test_cursor_keys_scroll_and_click_move_through_the_processes() -> None:
    app, source = make_app(simulated_snapshots(3, step=1.0))
    app.process_scope = "all"
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        table = app.process_table
        height = table.scrollable_content_region.height - 1  # lines under the header
        assert table.row_count > height
        table.focus()
        await pilot.pause()
        assert table.cursor_row == 0 and table.scroll_y == 0
        await pilot.press("down", "down")
        assert table.cursor_row == 2
        await pilot.press("end")
        await pilot.pause()
        last = table.row_keys[-1]
        assert table.cursor_row == table.row_count - 1
        assert table.scroll_y == table.row_count - height  # the last row is on screen
        assert f"{_pid(last)} " in screen_text(app)
        await pilot.press("home")
        await pilot.pause()
        assert table.cursor_row == 0 and table.scroll_y == 0
        await pilot.press("pagedown")
        assert table.cursor_row == height
        await pilot.press("up")
        assert table.cursor_row == height - 1
        # A click on the third line under the header highlights that row (under the title
        # border and the header).
        table.scroll_to(y=0, animate=False, force=True)
        await pilot.pause()
        await pilot.click(table, offset=(3, 4))
        assert table.cursor_row == 2
        # The device table kept its own cursor and selection.
        assert app.selected is not None


async def test_a_refresh_with_nothing_new_repaints_nothing_and_the_cursor_stays_in_range() -> None:
    snaps = simulated_snapshots(4, step=1.0)
    app, source = make_app(snaps)
    app.process_scope = "all"
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        table = app.process_table
        table.move_cursor(row=table.row_count - 1)
        await pilot.pause()
        drawn = table.lines_rendered
        app.poll()
        await pilot.pause()
        assert table.lines_rendered == drawn
        app.process_scope = "selected"  # fewer processes: the cursor moves onto the last one
        app._show_selected()
        await pilot.pause()
        assert 0 <= table.cursor_row < max(1, table.row_count)

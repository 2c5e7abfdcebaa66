"""What the dashboard keeps in memory: views built on first use, render caches that do not
pile up (benchmarks/dashboard.py measures the resident memory itself)."""

from __future__ import annotations

from allsmi.dashboard.footer import KeyFooter
from allsmi.dashboard.panels import DiffTable

from .conftest import make_app, play_all
from .fixtures import simulated_snapshots


async def test_hidden_views_and_the_filter_box_are_built_on_first_use() -> None:
    app, source = make_app(simulated_snapshots(3, step=1.0))
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        switcher = app.query_one("#views")
        assert [c.id for c in switcher.children] == ["devices"]
        assert not app.query("#filter") and not app.query("#group-table")
        assert len(app.query(KeyFooter)) == 1 and not app.query("FooterKey")
        app.action_view("groups")
        await pilot.pause()
        assert app.view == "groups" and app.query_one("#group-table", DiffTable).row_count > 0
        app.action_view("devices")
        await pilot.pause()
        app.action_view("groups")  # built once: shown again, not built again
        await pilot.pause()
        assert [c.id for c in switcher.children] == ["devices", "groups"]
        await pilot.press("slash")
        assert app.query_one("#filter").has_class("-visible")


async def test_process_panel_render_caches_stay_flat_while_values_change() -> None:
    """DataTable keys its line, row and cell caches by an update counter; the panel drops the
    entries of past counts at each change instead of keeping up to 10,000 cells of them."""
    snaps = simulated_snapshots(30, step=1.0)
    app, source = make_app(snaps)
    app.process_scope = "all"
    async with app.run_test(size=(200, 60)) as pilot:
        sizes = []
        for _ in range(len(snaps) - 1):
            source.advance()
            app.poll()
            await pilot.pause()
            table = app.process_table
            sizes.append((len(table._line_cache), len(table._cell_render_cache)))
        assert table.row_count > 10
        lines, cells = zip(*sizes[5:])
        assert max(lines) <= 60 and max(cells) <= 60 * len(table.columns), sizes

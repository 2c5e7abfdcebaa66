"""Keys that act in one view only. ``z`` and ``p`` act on the devices view's details and
processes panel: pressed in the groups, idle or cluster view they changed hidden state (the
panel's visibility, the processes scope) with nothing to see, while the footer and the help
offered them there. Now the footer and the help list in each view only the keys that act
there, and a key pressed where it does nothing says where it acts."""

from __future__ import annotations

from allsmi.dashboard.sources import StaticSource

from .conftest import frozen, make_app, play_all, screen_text
from .fixtures import simulated_snapshots


def _footer(app) -> str:  # type: ignore[no-untyped-def]
    return screen_text(app).splitlines()[-1]


def _help_keys(app) -> list[str]:  # type: ignore[no-untyped-def]
    """The first word of each line inside the help screen's box."""
    inside = [line.split("│")[1] for line in screen_text(app).splitlines() if line.count("│") >= 2]
    return [cell.split()[0] for cell in inside if cell.strip()]


async def test_z_and_p_act_in_the_devices_view_and_say_so_elsewhere() -> None:
    snaps = simulated_snapshots(3, step=1.0)
    app, source = make_app(snaps)
    said: list[str] = []
    app.notify = lambda message, **kwargs: said.append(str(message))  # type: ignore[method-assign]
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        assert " p Procs " in _footer(app)
        bottom = app.query_one("#bottom")
        for view in ("g", "i"):
            await pilot.press(view)
            await pilot.pause()
            assert " p Procs " not in _footer(app), _footer(app)
            scope, hidden = app.process_scope, bottom.has_class("-hidden")
            await pilot.press("z")
            await pilot.pause()
            assert bottom.has_class("-hidden") == hidden and app._panel_choice is None
            assert said and "press d for the devices view" in said[-1]
            await pilot.press("p")
            await pilot.pause()
            assert app.process_scope == scope
            assert "p chooses the processes panel's devices" in said[-1]
            # the help lists neither here
            await pilot.press("question_mark")
            await pilot.pause()
            keys = _help_keys(app)
            assert "z" not in keys and "p" not in keys and "Tab" not in keys, keys
            assert "s" in keys and "Space" in keys and "Enter" in keys, keys
            if app.view == "idle":  # the idle view sorts with s and r only
                assert not {"u", "m", "w", "t", "n"} & set(keys), keys
            else:
                assert {"u", "m", "w", "t", "n"} <= set(keys), keys
            await pilot.press("escape")
            await pilot.pause()
        # Back in the devices view both act, and the footer and the help offer them.
        await pilot.press("d")
        await pilot.pause()
        assert app.view == "devices" and " p Procs " in _footer(app)
        scope = app.process_scope
        await pilot.press("p")
        assert app.process_scope != scope
        await pilot.press("z")
        await pilot.pause()
        assert bottom.has_class("-hidden")
        await pilot.press("question_mark")
        await pilot.pause()
        keys = _help_keys(app)
        assert {"z", "p", "Tab", "u"} <= set(keys), keys


async def test_the_cluster_view_does_not_offer_the_panel_keys() -> None:
    snaps = simulated_snapshots(2, step=1.0)
    frames = [{"node-a:9477": s} for s in snaps]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    from allsmi.dashboard.screen.app import DashboardApp
    app = DashboardApp(source, clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert app.view == "cluster"
        assert " p Procs " not in _footer(app) and " c Cluster " in _footer(app), _footer(app)
        await pilot.press("question_mark")
        await pilot.pause()
        keys = _help_keys(app)
        assert "z" not in keys and "p" not in keys and "c" in keys, keys

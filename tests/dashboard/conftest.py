"""Fixtures for the dashboard tests: fixed simulated data, a frozen clock, app builders."""

from __future__ import annotations

from typing import Any, Sequence

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import Snapshot

from .fixtures import groups_config, simulated_snapshots

FROZEN_NOW = 1000.0


def frozen() -> float:
    """A monotonic clock that never moves: data ages on screen stay fixed."""
    return FROZEN_NOW


@pytest.fixture(scope="session")
def sim_snapshots() -> list[Snapshot]:
    """Six snapshots of the simulated mixed node, one second apart, at a fixed time."""
    return simulated_snapshots(6, step=1.0)


def make_app(snapshots: Sequence[Snapshot], **kwargs: Any) -> tuple[DashboardApp, StaticSource]:
    """An app over ``snapshots`` (shown one by one) with the groups config and a frozen clock."""
    source = StaticSource.of(snapshots, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=kwargs.pop("config", groups_config()), clock=frozen, **kwargs)
    return app, source


async def play_all(app: DashboardApp, source: StaticSource, pilot: Any) -> None:
    """Step through every frame so history and energy have several points."""
    for _ in range(len(source.frames) - 1):
        source.advance()
        app.poll()
    await pilot.pause()


def screen_text(app: DashboardApp) -> str:
    """The characters on screen, one line per row (no styles)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests in a fresh event loop (no pytest-asyncio dependency needed)."""
    import asyncio
    import inspect
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True

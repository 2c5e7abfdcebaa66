"""The dashboard's key tables give Textual's own answers, without the Unicode name database."""

from __future__ import annotations

import unicodedata

import pytest
from textual.keys import key_to_character

from allsmi.dashboard.screen.actions import BINDINGS
from allsmi.dashboard.screen.keynames import KEY_CHARACTERS, character_lookup, key_display
from allsmi.schema import Snapshot

from .conftest import make_app, play_all, screen_text


def test_key_characters_match_textual() -> None:
    for key, char in KEY_CHARACTERS.items():
        assert key_to_character(key) == char, key


def test_lookup_answers_like_textual_for_every_bound_key() -> None:
    lookup = character_lookup(key_to_character)
    keys = {k.strip() for b in BINDINGS for k in b.key.split(",")} | {"ctrl+home", "shift+left", "x"}
    for key in keys:
        assert lookup(key) == key_to_character(key), key


def test_key_display() -> None:
    assert key_display("slash") == "/"
    assert key_display("L") == "L"
    assert key_display("ctrl+q") == "^q"
    assert key_display("ctrl+shift+home") is None


async def test_running_app_never_reads_unicode_names(sim_snapshots: list[Snapshot],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A dashboard that starts, draws its footer, switches views and opens the filter box asks
    the Unicode name database nothing (its first lookups page most of it in: 0.8 MiB)."""
    calls: list[tuple[str, tuple[object, ...]]] = []
    for name in ("lookup", "name"):
        real = getattr(unicodedata, name)
        monkeypatch.setattr(unicodedata, name,
                            lambda *a, _real=real, _name=name: (calls.append((_name, a)), _real(*a))[1])
    key_to_character.cache_clear()  # an earlier test's answers must not hide a lookup
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        assert "Quit" in screen_text(app) and "/ Filter" in screen_text(app)
        for view in ("groups", "idle", "devices"):
            app.action_view(view)
            await pilot.pause()
        app.action_filter_text()
        await pilot.pause()
    assert calls == []


async def test_footer_shows_the_keys_and_a_click_presses_one(sim_snapshots: list[Snapshot]) -> None:
    """The one-line footer lists the shown bindings and a click on one runs it (as Textual's
    footer does); a key whose action is hidden (the cluster view without a cluster) is absent."""
    from allsmi.dashboard.screen.footer import KeyFooter
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        footer = app.query_one(KeyFooter)
        line = footer.render().plain
        assert " q Quit " in line and " / Filter " in line and " g Groups " in line
        assert "Cluster" not in line
        start = line.index(" g Groups ")
        await pilot.click(KeyFooter, offset=(start + 2, 0))
        await pilot.pause()
        assert app.view == "groups"

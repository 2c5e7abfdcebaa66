"""The suite's own scheduling (tests/conftest.py): tests marked ``alone`` run first."""

from __future__ import annotations

import pytest

from .conftest import alone_first


class _Item:
    def __init__(self, name: str, alone: bool) -> None:
        self.name = name
        self.alone = alone

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "alone" and self.alone else None


def test_alone_tests_move_to_the_start_in_their_order() -> None:
    items = [_Item("a", False), _Item("b", True), _Item("c", False), _Item("d", True),
             _Item("e", False)]
    alone_first(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["b", "d", "a", "c", "e"]


def test_this_run_collected_the_alone_tests_first(request: pytest.FixtureRequest) -> None:
    alone = [item.get_closest_marker("alone") is not None for item in request.session.items]
    assert alone == sorted(alone, reverse=True), "a test marked alone is collected after one that is not"

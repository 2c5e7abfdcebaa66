"""The suite's own scheduling (tests/conftest.py): tests marked ``alone`` run last."""

from __future__ import annotations

import pytest

from .conftest import alone_last


class _Item:
    def __init__(self, name: str, alone: bool) -> None:
        self.name = name
        self.alone = alone

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "alone" and self.alone else None


def test_alone_tests_move_to_the_end_in_their_order() -> None:
    items = [_Item("a", False), _Item("b", True), _Item("c", False), _Item("d", True),
             _Item("e", False)]
    alone_last(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["a", "c", "e", "b", "d"]


def test_this_run_collected_the_alone_tests_last(request: pytest.FixtureRequest) -> None:
    alone = [item.get_closest_marker("alone") is not None for item in request.session.items]
    assert alone == sorted(alone), "a test marked alone is collected before one that is not"

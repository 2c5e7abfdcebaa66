"""Each test's own empty home (tests/conftest.py, ``_isolated_env``), made at a cost that does
not grow with the tests a worker has run before it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_SEEN: list[Path] = []


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_has_a_fresh_home_outside_the_numbered_folders(
        turn: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    home = Path(os.environ["XDG_CONFIG_HOME"]).parent
    assert Path(os.environ["XDG_STATE_HOME"]).parent == home
    assert home.is_dir() and not any(home.iterdir())  # fresh and empty
    assert home not in _SEEN  # never an earlier test's
    _SEEN.append(home)
    # Not one of pytest's numbered folders in the run's directory: numbering one lists that
    # whole directory, which grew by a folder (and a link) a test.
    assert home.parent != tmp_path_factory.getbasetemp()

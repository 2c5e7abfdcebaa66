"""Fixtures shared by the backend tests."""

from __future__ import annotations

from typing import Iterator

import pytest

from allsmi.backends.nvidia import NvidiaBackend


@pytest.fixture
def backends() -> Iterator[list[NvidiaBackend]]:
    """NVIDIA backends a test makes (appended to the list), closed when it ends."""
    made: list[NvidiaBackend] = []
    yield made
    for backend in made:
        backend.close()

"""How a backend's fixture scenarios are declared for the contract suite.

Each registered backend ``NAME`` has a module ``tests/contract/scenarios_NAME.py``
defining ``SCENARIOS: list[Scenario]``. The contract suite
(``test_backend_contract.py``) runs every scenario of every registered backend
and fails when a backend has no scenarios module, so a new backend cannot
skip the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from allsmi.backend_api import Backend

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


@dataclass
class ScenarioEnv:
    """What a scenario builder may use to set up fakes and stand-ins."""

    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch


@dataclass
class Scenario:
    """One fixture scenario for one backend.

    ``expected_devices`` is the number of samples ``sample()`` must return, or
    ``None`` when the scenario has no hardware: then ``probe()`` must say
    unavailable with a reason, or ``sample()`` must return an empty list.
    """

    name: str
    build: Callable[[ScenarioEnv], Backend]
    expected_devices: int | None

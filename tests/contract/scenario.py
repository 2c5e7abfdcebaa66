"""How a backend's fixture scenarios are declared for the contract suite.

Each registered backend ``NAME`` has a module ``tests/contract/scenarios_NAME.py``
(or, shipped by a third-party package, a top-level ``allsmi_scenarios_NAME``)
defining ``SCENARIOS: list[Scenario]``; a CLI backend also declares ``CLI``
(:class:`CliTool`) and the fault-and-drift matrix runs it. The contract suite
(``test_backend_contract.py``) runs every scenario of every registered backend
and fails when a backend has no scenarios module, so a new backend cannot
skip the contract.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

import pytest

from allsmi.backend_api import Backend
from allsmi.schema import DeviceSample

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


class _Finalizer:
    """Runs ``action`` when the monkeypatch that armed it is undone (the test's teardown)."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action = action
        self._armed = False

    @property
    def armed(self) -> bool:
        return self._armed

    @armed.setter
    def armed(self, value: bool) -> None:
        if self._armed and not value:
            self._action()
        self._armed = value


@dataclass
class ScenarioEnv:
    """What a scenario builder may use to set up fakes and stand-ins."""

    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch

    def on_teardown(self, action: Callable[[], None]) -> None:
        """Run ``action`` at the test's teardown (a server the scenario started is stopped)."""
        self.monkeypatch.setattr(_Finalizer(action), "armed", True)


@dataclass
class Scenario:
    """One fixture scenario for one backend.

    ``expected_devices`` is the number of samples ``sample()`` must return, or
    ``None`` when the scenario has no hardware: then ``probe()`` must say
    unavailable with a reason, or ``sample()`` must return an empty list.
    ``expected`` holds exact values per device id (built with :func:`expect`).
    ``unread`` names devices the tool lists but gives no reading row for this sample: the
    contract suite asserts they are ``degraded`` (never ``ok``) with no reading values.
    """

    name: str
    build: Callable[[ScenarioEnv], Backend]
    expected_devices: int | None
    expected: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    unread: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.expected, Mapping):
            self.expected = dict(self.expected)


def expect(device_id: str, **values: Any) -> tuple[str, dict[str, Any]]:
    """Exact values one device of a scenario must have:
    ``expect("GPU-1", power_watts=json_value(FIX / "smi.json", "devices/0/card_power"))``.

    Keys are :class:`DeviceSample` attributes (``None`` asserts an honest null),
    ``details__KEY`` for one ``details`` entry, or ``processes`` for the list of
    ``(pid, memory_bytes)`` pairs. A bytes, watts, joules or degrees value is read from the
    fixture in the unit it states (:mod:`tests.contract.fixture_truth`: ``"17521800uW"`` ->
    ``17.5218``), never typed in, so a unit error (KiB taken as bytes, 0 for a missing value)
    fails the contract suite; ids, parents, shares and averages are plain values.
    """
    return device_id, values


def check_expected(devices: Sequence[DeviceSample], expected: Mapping[str, Mapping[str, Any]]) -> None:
    """Assert every declared exact value (see :func:`expect`)."""
    by_id = {d.id: d for d in devices}
    for device_id, values in expected.items():
        assert device_id in by_id, f"expected device {device_id!r} missing; got {sorted(by_id)}"
        dev = by_id[device_id]
        for key, want in values.items():
            if key == "processes":
                got: Any = None if dev.processes is None else [(p.pid, p.memory_bytes) for p in dev.processes]
            elif key.startswith("details__"):
                got = dev.details.get(key[len("details__"):])
            else:
                got = getattr(dev, key)
            if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
                assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9), (device_id, key, got, want)
            else:
                assert got == want, (device_id, key, got, want)


@dataclass
class CliTool:
    """How the fault-and-drift matrix drives a CLI backend's tool (declared as ``CLI`` in its scenario module).

    The matrix replaces the tool with the shared stand-in (:mod:`tests.contract.standin`)
    under ``executable``, named by ``env_var``, answering every call with one fault.
    ``partial`` is a fixture file holding the tool's output cut in half;
    ``partial_status`` is what a cut output gives: ``error`` for a JSON tool, ``ok`` for a
    line-oriented one that keeps its whole rows (and says which line it skipped).
    ``options`` are the backend options the matrix runs it with (``{"method": "cli"}``).
    ``drift`` maps matrix cells (``oldest``, ``newest``, ``na-fields``, ``64-devices``,
    ``partitions``) to names of this module's :data:`SCENARIOS`.
    ``calls`` are the distinct argument strings (as the stand-in keys them, placeholders
    replaced) that ``open()`` and the first ``sample()`` run against the ``newest`` scenario:
    the matrix faults each one alone, the others answered by that scenario's own stand-in, so
    a call made only in ``sample()`` is faulted too (a test checks the list against the calls
    really made).

    A backend that runs more than one tool declares ``CLI`` as a tuple, its main tool first: each
    tool gets its own fault cells (the other tools answered by the ``newest`` scenario's
    stand-ins), its own calls checked and faulted; ``drift`` is read from the first.
    """

    env_var: str
    executable: str
    partial: Path
    options: Mapping[str, Any] = field(default_factory=dict)
    partial_status: str = "error"
    drift: Mapping[str, str] = field(default_factory=dict)
    calls: tuple[str, ...] = ()
    stream: bool = False
    """A long-running tool (``neuron-monitor``, ``tpu-info --streaming``): its healthy stand-in
    keeps printing (the stand-in's ``every``), and each fault is what one run of it does."""
    optional: bool = False
    """A tool the backend can do without (``xpu-smi`` beside sysfs): every fault leaves the
    backend ``ok`` with the devices it read elsewhere, the fault named in its message."""
    expect: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Fault -> (status, text in the message) where this tool's fault is not the matrix's usual
    outcome (a missing optional second tool leaves the backend ``ok``, saying so)."""


def scenario_module(name: str) -> ModuleType | None:
    """The scenario module of backend ``name``: ``tests.contract.scenarios_NAME``, else a
    top-level ``allsmi_scenarios_NAME`` (how a third-party backend ships its scenarios)."""
    for module_name in (f"tests.contract.scenarios_{name}", f"allsmi_scenarios_{name}"):
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name not in (module_name, module_name.rsplit(".", 1)[0]):
                raise
    return None

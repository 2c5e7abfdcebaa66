"""The fault matrix's garbage-readings cells: each CLI tool answers every call in its usual
shape with every reading garbled, and the backend fails or reports those readings unknown, never
a made-up 0 (a cell per tool; the helpers are the matrix's, ``test_cli_faults``)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from allsmi.schema.fields import MEASURED_FIELDS

from . import standin
from .scenario import ScenarioEnv
from .test_cli_faults import BOUND, CLI_BACKENDS, fault_cell_id, collect_with, newest_scenario, routed_backend, vendor_tools, wait_gone

_NUMBER_TEXT = re.compile(r"-?\d+(?:\.\d+)?\s*[A-Za-z%°/()]*")
_BARE_NUMBER = re.compile(r"(?<![\w:.\-/])-?\d+(?:\.\d+)?(?![\w:.\-/])")


def _garbled(value: Any) -> Any:
    """A JSON value with every number, and every string that is a number with a unit, replaced."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return "garbage"
    if isinstance(value, str):
        return "garbage" if _NUMBER_TEXT.fullmatch(value.strip()) else value
    if isinstance(value, list):
        return [_garbled(v) for v in value]
    return {k: _garbled(v) for k, v in value.items()}


def garble(text: str) -> str:
    """The tool's own output with every reading replaced by garbage and its shape kept: a JSON
    document or JSON lines re-serialised, any other text with its free-standing numbers replaced
    (``0000:c1:00.0`` and ``rbln0`` stay: identities, not readings)."""
    try:
        document = _garbled(json.loads(text))
    except json.JSONDecodeError:
        pass
    else:  # (a one-line document stays one line: a streaming tool prints a report per line)
        return json.dumps(document, indent=None if "\n" not in text.strip() else 2) + "\n"
    lines = text.splitlines()
    try:
        return "".join(json.dumps(_garbled(json.loads(line))) + "\n" for line in lines if line.strip())
    except json.JSONDecodeError:
        return _BARE_NUMBER.sub("garbage", text)


def _garbage_cells() -> list[Any]:
    return [pytest.param(name, tool, id=fault_cell_id(name, tool, "garbage-values"))
            for name, _, _ in CLI_BACKENDS for tool, spec in enumerate(vendor_tools(name)) if not spec.optional]


@pytest.mark.parametrize(("name", "tool"), _garbage_cells())
def test_garbage_readings_are_unknown_never_zero(name: str, tool: int, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool answers every call in its usual shape with every reading garbled: the backend
    fails, or reports what it could read with those readings unknown, never a made-up 0."""
    spec = vendor_tools(name)[tool]
    newest_scenario(name).build(ScenarioEnv(tmp_path=tmp_path / "healthy", monkeypatch=monkeypatch))
    config = json.loads(Path(os.environ[spec.env_var] + ".json").read_text())
    if "routes" not in config:
        pytest.skip(f"{name}'s {spec.executable} stand-in is its own, not the shared route table")
    routes = {}
    for call in spec.calls:
        route = dict(config["routes"].get(call) or config.get("default") or {})
        text = (Path(route["file"]).read_text() if route.get("file") else "") + route.get("text", "")
        routes[call] = {"text": garble(text), **({"every": route["every"]} if route.get("every") else {})}
    backend, bindir = routed_backend(name, ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch), routes, tool)
    snap, took = collect_with([backend], 10.0)
    assert took < 10.0 + BOUND
    status = next(b for b in snap.backends if b.name == name)
    assert status.status in ("ok", "error", "timeout"), status
    for dev in (d for d in snap.devices if d.backend == name):
        zeros = [m.field for m in MEASURED_FIELDS if getattr(dev, m.field) == 0]
        assert not zeros, f"{name}: {dev.id} reports {zeros} as 0 from garbage ({status.message})"
    assert wait_gone(standin.pids(bindir / "pids"), time.monotonic() + 5.0) == []

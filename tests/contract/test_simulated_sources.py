"""``--simulate`` names each impersonated vendor's activity as that vendor's real backend does:
the source a simulated device reports is one the real backend gives on its fixtures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from allsmi.collection import registry
from allsmi.backend_api import BackendError

from .scenario import ScenarioEnv, scenario_module


@pytest.fixture(scope="module")
def simulated() -> dict[str, set[str]]:
    """Each impersonated backend's activity sources in ``snapshot --simulate mixed``."""
    out = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", "mixed",
                          "--format", "json"], capture_output=True, text=True, timeout=120, check=True)
    sources: dict[str, set[str]] = {}
    for dev in json.loads(out.stdout)["devices"]:
        if dev.get("compute_active_source"):
            sources.setdefault(dev["backend"], set()).add(dev["compute_active_source"])
    return sources


@pytest.mark.parametrize("name", registry.names())
def test_a_simulated_vendor_names_its_activity_as_the_real_backend_does(
        name: str, simulated: dict[str, set[str]], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    if name not in simulated:
        assert name in ("simulated", "tenstorrent"), f"--simulate mixed has no {name} activity"
        pytest.skip(f"--simulate mixed gives {name} devices no compute activity")
    module = scenario_module(name)
    assert module is not None
    real: set[str] = set()
    for scenario in module.SCENARIOS:
        if not scenario.expected_devices:
            continue
        with monkeypatch.context() as patch:
            backend = scenario.build(ScenarioEnv(tmp_path=tmp_path_factory.mktemp(name), monkeypatch=patch))
            try:
                backend.open()
                for _ in range(2):  # (a rate or a GPM sample needs a second reading)
                    real |= {d.compute_active_source for d in backend.sample() if d.compute_active_source}
            except BackendError:
                continue
            finally:
                backend.close()
    assert real, f"no {name} scenario reports a compute activity source"
    assert simulated[name] <= real, (name, simulated[name], real)

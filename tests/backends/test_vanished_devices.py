"""A device that drops out of its vendor tool's output between two samples is reported
``degraded`` with no values and unknown processes, and named in a warning: never silently gone
(the contract in :mod:`allsmi.backend_api`). One case per CLI backend that lists its devices
anew each sample (Gaudi, AMD and Intel keep their own lists and have their own tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from allsmi.backends._common.vanished import MissingDevices
from allsmi.schema import DeviceSample
from tests.contract import scenarios_ascend, scenarios_furiosa, scenarios_neuron, scenarios_rebellions
from tests.contract import scenarios_tenstorrent
from tests.contract.scenario import ScenarioEnv


def _json_without_last(path: Path, key: str | None) -> str:
    data = json.loads(path.read_text())
    rows = data if key is None else data[key]
    del rows[-1]
    return json.dumps(data)


def _rebellions(env: ScenarioEnv) -> tuple[Any, Callable[[], None]]:
    backend = scenarios_rebellions.backend_for(env, scenarios_rebellions.LOADED)
    fewer = _json_without_last(scenarios_rebellions.RBLN_FIXTURES / scenarios_rebellions.LOADED, "devices")
    return backend, lambda: scenarios_rebellions.write_standin(env.tmp_path / "bin", text=fewer)


def _ascend(env: ScenarioEnv) -> tuple[Any, Callable[[], None]]:
    fixture = "npu-smi-24.1.0-910b3x4-training.txt"
    backend = scenarios_ascend.backend_for(env, fixture)
    lines = (scenarios_ascend.ASCEND / fixture).read_text().splitlines(keepends=True)
    start = next(n for n, line in enumerate(lines) if line.startswith("| 3     910B3"))
    fewer = "".join(line for n, line in enumerate(lines) if not start <= n < start + 3
                    and "found in NPU 3" not in line)
    return backend, lambda: scenarios_ascend.backend_for(env, None, text=fewer)


def _neuron(env: ScenarioEnv) -> tuple[Any, Callable[[], None]]:
    listing = "neuron-ls-trn2-4dev-two-apps.json"
    backend = scenarios_neuron.backend_for(env, listing)
    fewer = _json_without_last(scenarios_neuron.NEURON / listing, None)
    return backend, lambda: scenarios_neuron.backend_for(env, None, listing_text=fewer)


def _tenstorrent(env: ScenarioEnv) -> tuple[Any, Callable[[], None]]:
    fixture = "snapshot-5.3-blackhole-p150a-wormhole-n150.json"
    args = scenarios_tenstorrent.STDOUT_ARGS
    scenarios_tenstorrent.use_standin(env, {args: scenarios_tenstorrent.route(fixture)})
    from allsmi.backends.tenstorrent import TenstorrentBackend
    backend = TenstorrentBackend()
    fewer = _json_without_last(scenarios_tenstorrent.TENSTORRENT / fixture, "device_info")
    return backend, lambda: scenarios_tenstorrent.use_standin(
        env, {args: scenarios_tenstorrent.route(text=fewer)})


def _furiosa(env: ScenarioEnv) -> tuple[Any, Callable[[], None]]:
    fixtures = scenarios_furiosa.FURIOSA
    files = scenarios_furiosa.RNGD_4X
    scenarios_furiosa.use_cli(env, {sub: scenarios_furiosa.route(name) for sub, name in files.items()})
    from allsmi.backends.furiosa import FuriosaBackend
    backend = FuriosaBackend(user_lookup=lambda pid: None)
    fewer = {sub: scenarios_furiosa.route(text=_json_without_last(fixtures / name, None))
             for sub, name in files.items() if sub != "ps"}
    fewer["ps"] = scenarios_furiosa.route(files["ps"])
    return backend, lambda: scenarios_furiosa.use_cli(env, fewer)


@pytest.mark.parametrize("build", [_rebellions, _ascend, _neuron, _tenstorrent, _furiosa],
                         ids=["rebellions", "ascend", "neuron", "tenstorrent", "furiosa"])
def test_a_device_gone_from_the_output_is_degraded_not_dropped(
        build: Callable[[ScenarioEnv], tuple[Any, Callable[[], None]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = ScenarioEnv(tmp_path, monkeypatch)
    backend, drop_last = build(env)
    backend.open()
    try:
        before = {d.id: d for d in backend.sample()}
        drop_last()
        after = {d.id: d for d in backend.sample()}
        assert set(after) == set(before)
        gone = [d for d in after.values() if d.health == "degraded" and d.processes is None
                and any("missing from" in w and d.id in w for w in backend.warnings)]
        assert gone, backend.warnings
        for device in gone:
            was = before[device.id]
            assert (device.name, device.bus_id, device.index, device.parent) == \
                (was.name, was.bus_id, was.index, was.parent)
            assert device.temperature_celsius is None and device.power_watts is None
            assert device.memory_used_bytes is None and device.utilization_percent is None
    finally:
        backend.close()


def test_missing_devices_come_back_when_listed_again() -> None:
    missing = MissingDevices("tool")
    one = DeviceSample(id="a", vendor="v", kind="npu", backend="b", index=0, health="ok",
                       power_watts=5.0)
    two = DeviceSample(id="b", vendor="v", kind="npu", backend="b", index=1, health="ok")
    warnings: list[str] = []
    assert missing.complete([one, two], warnings) == [one, two] and warnings == []
    (kept, placeholder) = missing.complete([two], warnings)
    assert kept is two and placeholder.id == "a" and placeholder.health == "degraded"
    assert placeholder.power_watts is None and placeholder.processes is None and placeholder.index == 0
    assert warnings == ["a: reported earlier but missing from tool's output now; "
                        "reported degraded without values"]
    warnings.clear()
    assert missing.complete([one, two], warnings) == [one, two] and warnings == []

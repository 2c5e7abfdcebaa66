"""The Furiosa backend's SDK path, with fake ``furiosa_smi`` / ``furiosa_smi_py`` modules."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from allsmi.backend_api import BackendError, BackendUnavailable
from allsmi.backends.furiosa import sdk
from allsmi.backends.furiosa import ENV_VAR, FuriosaBackend
from tests.contract.scenarios_furiosa import (RNGD_4X, FakeSmiError, FakeVersionInfo, block_sdk, four_rngd,
                                              legacy_sdk, modern_sdk, route, use_sdk, write_standin)

GIB = 1024 ** 3


@pytest.fixture(autouse=True)
def _no_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "no-such-furiosa-smi"))


def _open(**kwargs: object) -> FuriosaBackend:
    backend = FuriosaBackend(timeout_seconds=5.0, **kwargs)  # type: ignore[arg-type]
    assert backend.probe().available
    backend.open()
    return backend


def test_modern_sdk_values_and_first_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    use_sdk(monkeypatch, modern_sdk(four_rngd(npu3={"util": [90.0, 95.0, 100.0, 85.0, 90.0, 95.0, 100.0, 85.0]})))
    backend = _open()
    first = backend.sample()
    # Utilization is a difference of two counter samples: unknown on the first one.
    assert all(d.utilization_percent is None for d in first)
    assert all("core_utilization_percent" not in d.details for d in first)
    second = backend.sample()
    npu3 = second[3]
    assert npu3.id == npu3.uuid == "5E3A7C10-2B3D-4E5F-8A9B-0C1D2E3F4A53"
    assert npu3.details["core_utilization_percent"] == (90.0, 95.0, 100.0, 85.0, 90.0, 95.0, 100.0, 85.0)
    assert npu3.utilization_percent == pytest.approx(92.5)
    assert npu3.memory_used_bytes == 12 * GIB and npu3.memory_total_bytes == 51002736640
    assert npu3.temperature_celsius == 43.0 and npu3.details["ambient_temperature_celsius"] == 30.0
    assert npu3.power_watts == 70.0 and npu3.clock_mhz == 1000.0
    assert npu3.firmware_version == "2026.4.0+3c1f2aa" and npu3.driver_version == "2026.4.0"
    assert npu3.name == "Furiosa RNGD" and npu3.details["source"] == "furiosa_smi"
    assert npu3.health == "ok" and npu3.processes is None  # SDK path without furiosa-smi ps: unknown
    assert backend.warnings == []


def test_modern_sdk_one_failing_call_keeps_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    use_sdk(monkeypatch, modern_sdk(four_rngd(npu1={"power": FakeSmiError("IoError: power sensor busy")},
                                              npu2={"uuid": FakeSmiError("x"), "serial": FakeSmiError("x"),
                                                    "bdf": FakeSmiError("x")})))
    backend = _open()
    devices = backend.sample()
    assert [d.details["dev_name"] for d in devices] == ["npu0", "npu1", "npu3"]
    assert devices[1].power_watts is None and devices[1].temperature_celsius == 41.0
    assert any("power_consumption() failed: IoError" in w for w in backend.warnings)
    assert any("device 2: no uuid, serial or bdf readable; skipped" in w for w in backend.warnings)


def test_modern_sdk_without_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    use_sdk(monkeypatch, modern_sdk([]))
    backend = _open()
    assert backend.sample() == []  # driver_info() raises DeviceNotFoundError: not an error


def test_legacy_sdk_init_observer_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    use_sdk(monkeypatch, legacy_sdk(four_rngd(npu0={"throttle": 4, "util": [12.0, 0, 0, 0, 0, 0, 0, 4.0]})))
    backend = _open()
    npu0 = backend.sample()[0]
    assert npu0.details["source"] == "furiosa_smi_py"
    assert npu0.details["core_utilization_percent"] == (12.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0)
    assert npu0.utilization_percent == pytest.approx(2.0)  # observer values need no first sample
    assert npu0.firmware_version == "2026.1.2+9ab01cd" and npu0.driver_version == "1.9.8"
    assert npu0.details["throttle_reason"] == "4" and npu0.details["arch"] == "Rngd"
    assert npu0.name == "Furiosa RNGD"


def test_legacy_dead_device_reports_no_values(monkeypatch: pytest.MonkeyPatch) -> None:
    use_sdk(monkeypatch, legacy_sdk(four_rngd(npu2={"alive": False})))
    dead = _open().sample()[2]
    assert dead.health == "lost"
    assert dead.utilization_percent is None and dead.power_watts is None and dead.temperature_celsius is None
    assert dead.bus_id == "0000:3d:00.0"  # identity is kept


def test_modern_generation_is_preferred(monkeypatch: pytest.MonkeyPatch) -> None:
    block_sdk(monkeypatch)
    monkeypatch.setitem(sys.modules, "furiosa_smi", modern_sdk(four_rngd()))
    monkeypatch.setitem(sys.modules, "furiosa_smi_py", legacy_sdk(four_rngd()))
    assert _open().sample()[0].details["source"] == "furiosa_smi"


def test_legacy_init_failure_falls_back_to_the_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_sdk(monkeypatch, legacy_sdk(four_rngd(), init_error="Device not found error"))
    exe = write_standin(tmp_path / "bin", {s: route(f) for s, f in RNGD_4X.items()})
    monkeypatch.setenv(ENV_VAR, str(exe))
    backend = _open()
    devices = backend.sample()
    assert len(devices) == 4 and devices[0].details["source"] == "furiosa-smi"


def test_legacy_init_failure_without_tool_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    use_sdk(monkeypatch, legacy_sdk(four_rngd(), init_error="driver version mismatch"))
    with pytest.raises(BackendError, match="init\\(\\) failed: driver version mismatch"):
        FuriosaBackend().open()


def test_method_sdk_without_sdk_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    block_sdk(monkeypatch)
    backend = FuriosaBackend(options={"method": "sdk"})
    probe = backend.probe()
    assert not probe.available and "furiosa_smi" in probe.reason
    with pytest.raises(BackendUnavailable):
        backend.open()


def test_sdk_plus_cli_ps_gives_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_sdk(monkeypatch, modern_sdk(four_rngd()))
    exe = write_standin(tmp_path / "bin", {"ps": route(RNGD_4X["ps"])})
    monkeypatch.setenv(ENV_VAR, str(exe))
    devices = _open(user_lookup=lambda pid: "svc").sample()
    assert [p.pid for p in devices[1].processes] == [41230, 52011]
    assert (exe.parent / "calls.log").read_text().splitlines() == ["ps --format json"]


@pytest.mark.parametrize(("version", "text"), [
    (FakeVersionInfo(1, 7, 0, metadata="4dfed18"), "1.7.0+4dfed18"),
    (FakeVersionInfo(2026, 4, 0, prerelease="rc1"), "2026.4.0-rc1"),
    ("2025.1.0+696efad", "2025.1.0+696efad"),
    (object(), None),  # a binding object without __str__ is not a version
    (None, None),
])
def test_version_text(version: object, text: str | None) -> None:
    assert sdk.version_text(version) == text


def test_probe_does_not_import_the_sdk(tmp_path: Path) -> None:
    # A furiosa_smi whose import would fail loudly: probe() must only look for it.
    (tmp_path / "furiosa_smi.py").write_text("raise ImportError('libfuriosa_smi.so: cannot open')\n")
    code = textwrap.dedent("""
        import sys
        from allsmi.backends.furiosa import FuriosaBackend
        backend = FuriosaBackend()
        probe = backend.probe()
        assert probe.available and probe.details["sdk_module"] == "furiosa_smi", probe
        assert "furiosa_smi" not in sys.modules
        try:
            backend.open()
        except Exception as exc:
            print(type(exc).__name__, exc)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(tmp_path), "PATH": "/nonexistent",
                                 "ALLSMI_FURIOSA_SMI": str(tmp_path / "none")})
    assert result.returncode == 0, result.stderr
    assert "BackendUnavailable" in result.stdout and "libfuriosa_smi.so" in result.stdout

"""Contract scenarios for the Furiosa backend, and the fakes its own tests share.

* :func:`write_standin` writes the shared stand-in (``fixtures/standin.py``)
  as ``furiosa-smi`` with a route per subcommand.
* :func:`modern_sdk` / :func:`legacy_sdk` build small module objects shaped
  like ``furiosa_smi`` (2026.4.0+) and ``furiosa_smi_py`` (up to 2026.1.x)
  as the vendor reference documents them; tests install them in
  ``sys.modules`` through monkeypatch.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

from allsmi.backends import furiosa as furiosa_module
from allsmi.backends.furiosa import ENV_VAR, FuriosaBackend

from . import standin
from .fixture_truth import json_value, total
from .scenario import FIXTURES, CliTool, Scenario, ScenarioEnv, expect

FURIOSA = FIXTURES / "furiosa"

#: The fixture set of a healthy 4x RNGD host, by subcommand.
RNGD_4X = {"info": "info-rngd-4x-2026.3.json", "status": "status-rngd-4x-2026.3.json",
           "ps": "ps-rngd-2026.3.json"}


def route(fixture: str | None = None, **behaviour: Any) -> dict[str, Any]:
    """One stand-in route: print ``fixtures/furiosa/<fixture>`` and/or behave (rc, hang, die...)."""
    spec = dict(behaviour)
    if fixture is not None:
        spec["file"] = str(FURIOSA / fixture)
    return spec


def write_standin(directory: Path, routes: dict[str, dict[str, Any]], *,
                  default: dict[str, Any] | None = None, flag: str = "--format") -> Path:
    """An executable ``furiosa-smi`` stand-in (the shared one); ``routes`` maps a subcommand to its route."""
    return standin.write_standin(directory, "furiosa-smi",
                                 {f"{sub} {flag} json": spec for sub, spec in routes.items()},
                                 default=default)


def block_sdk(env_or_monkeypatch: Any) -> None:
    """Make both SDK generations unimportable, whatever this machine has installed."""
    mp = getattr(env_or_monkeypatch, "monkeypatch", env_or_monkeypatch)
    for name in ("furiosa_smi", "furiosa_smi_py"):
        mp.setitem(sys.modules, name, None)


def use_cli(env: ScenarioEnv, routes: dict[str, dict[str, Any]], **kwargs: Any) -> Path:
    """Block the SDK, write a stand-in and point ``ALLSMI_FURIOSA_SMI`` at it."""
    block_sdk(env)
    exe = write_standin(env.tmp_path / "bin", routes, **kwargs)
    env.monkeypatch.setenv(ENV_VAR, str(exe))
    return exe


# -- fake SDK modules ---------------------------------------------------------


class _Obj:
    """Attributes given as keywords, read through getter methods like the bindings."""

    def __init__(self, **values: Any) -> None:
        for key, value in values.items():
            setattr(self, key, (lambda v: (lambda: v))(value))


class FakeVersionInfo:
    def __init__(self, major: int, minor: int, patch: int, metadata: str = "", prerelease: str = "") -> None:
        self.major, self.minor, self.patch = major, minor, patch
        self.metadata, self.prerelease = metadata, prerelease


class _PeCounter:
    def __init__(self, core: int, busy: float, sequence: int) -> None:
        self._core, self._busy, self._sequence = core, busy, sequence

    def core(self) -> int:
        return self._core

    def utilization_since(self, previous: "_PeCounter") -> float:
        if previous._sequence >= self._sequence:
            raise RuntimeError("counter did not advance")
        return self._busy

    def duration_since(self, previous: "_PeCounter") -> int:
        return (self._sequence - previous._sequence) * 1000


def _spec(n: int, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "uuid": f"5E{n}A7C10-2B3D-4E5F-8A9B-0C1D2E3F4A5{n}", "serial": f"RNG2604010030{n}Q",
        "bdf": f"0000:{0x17 + 0x13 * n:02x}:00.0", "name": f"npu{n}", "alive": True,
        "soc_peak": 40.0 + n, "ambient": 30.0, "power": 40.0 + 10 * n,
        "dram": (n * 4 * 1024 ** 3, 51002736640), "freq": [1000] * 8,
        "util": [10.0 * n] * 8,
    }
    spec.update(overrides)
    return spec


def four_rngd(**per_device: dict[str, Any]) -> list[dict[str, Any]]:
    """Specs of four RNGD devices; ``npuN={...}`` overrides one device's values."""
    return [_spec(n, **per_device.get(f"npu{n}", {})) for n in range(4)]


class FakeSmiError(Exception):
    pass


class _DeviceNotFoundError(FakeSmiError):
    pass


def modern_sdk(specs: list[dict[str, Any]]) -> types.ModuleType:
    """A ``furiosa_smi`` (2026.4.0+) look-alike: no init(), flat methods, counter diffs."""
    module = types.ModuleType("furiosa_smi")
    module.__version__ = "2026.4.0"  # type: ignore[attr-defined]
    module.SmiError = FakeSmiError  # type: ignore[attr-defined]
    module.DeviceNotFoundError = _DeviceNotFoundError  # type: ignore[attr-defined]

    class Device:
        def __init__(self, spec: dict[str, Any]) -> None:
            self.spec = spec
            self.sequence = 0

        def _value(self, key: str) -> Any:
            value = self.spec[key]
            if isinstance(value, Exception):
                raise value
            return value

        def uuid(self) -> str:
            return self._value("uuid")

        def serial(self) -> str:
            return self._value("serial")

        def bdf(self) -> str:
            return self._value("bdf")

        def device_name(self) -> str:
            return self._value("name")

        def arch(self) -> str:
            return "rngd"

        def product_name(self) -> str:
            return "RNGD"

        def firmware_version(self) -> FakeVersionInfo:
            return FakeVersionInfo(2026, 4, 0, metadata="3c1f2aa")

        def liveness(self) -> bool:
            return self._value("alive")

        def device_temperature(self) -> _Obj:
            return _Obj(soc_peak=self._value("soc_peak"), ambient=self.spec["ambient"])

        def power_consumption(self) -> float:
            return self._value("power")

        def memory_usage(self) -> _Obj:
            used, total = self._value("dram")
            return _Obj(total_bytes=total, in_use_bytes=used)

        def core_frequency(self) -> _Obj:
            return _Obj(pe_frequency=[_Obj(core=i, frequency=f) for i, f in enumerate(self._value("freq"))])

        def performance_counter(self) -> _Obj:
            self.sequence += 1
            return _Obj(pe_performance_counters=[_PeCounter(i, u, self.sequence)
                                                 for i, u in enumerate(self._value("util"))])

        def governor_profile(self) -> str:
            return "OnDemand"

    devices = [Device(spec) for spec in specs]

    def list_devices() -> list[Device]:
        return list(devices)

    def driver_info() -> FakeVersionInfo:
        if not devices:
            raise _DeviceNotFoundError("device not found: no available device to read driver version")
        return FakeVersionInfo(2026, 4, 0)

    module.list_devices = list_devices  # type: ignore[attr-defined]
    module.driver_info = driver_info  # type: ignore[attr-defined]
    return module


def legacy_sdk(specs: list[dict[str, Any]], *, init_error: str | None = None) -> types.ModuleType:
    """A ``furiosa_smi_py`` (up to 2026.1.x) look-alike: init(), device_info(), an observer."""
    module = types.ModuleType("furiosa_smi_py")
    state = {"initialised": False}

    def init() -> None:
        if init_error:
            raise RuntimeError(init_error)
        state["initialised"] = True

    class Device:
        def __init__(self, spec: dict[str, Any]) -> None:
            self.spec = spec

        def _check(self) -> None:
            if not state["initialised"]:
                raise RuntimeError("library is not initialized")

        def device_info(self) -> _Obj:
            self._check()
            s = self.spec
            return _Obj(arch="Rngd", name=s["name"], uuid=s["uuid"], serial=s["serial"], bdf=s["bdf"],
                        index=int(s["name"][3:]), core_num=8, numa_node=0,
                        firmware_version=_Obj(major=2026, minor=1, patch=2, metadata="9ab01cd",
                                              prerelease=""))

        def liveness(self) -> bool:
            return self.spec["alive"]

        def device_temperature(self) -> _Obj:
            return _Obj(soc_peak=self.spec["soc_peak"], ambient=self.spec["ambient"])

        def power_consumption(self) -> float:
            value = self.spec["power"]
            if isinstance(value, Exception):
                raise value
            return value

        def memory_utilization(self) -> _Obj:
            used, total = self.spec["dram"]
            block = _Obj(total_bytes=total, in_use_bytes=used)
            return _Obj(dram=block, dram_shared=block, sram=block, instruction=block)

        def core_frequency(self) -> _Obj:
            return _Obj(pe_frequency=[_Obj(core=i, frequency=f) for i, f in enumerate(self.spec["freq"])])

        def throttle_reason(self) -> int:
            return self.spec.get("throttle", 0)

    devices = [Device(spec) for spec in specs]

    class Observer:
        def get_core_utilization(self, device: Device) -> list[_Obj]:
            return [_Obj(core=i, pe_usage_percentage=u, time_window_mil=1000)
                    for i, u in enumerate(device.spec["util"])]

    def list_devices() -> list[Device]:
        if not state["initialised"]:
            raise RuntimeError("library is not initialized")
        return list(devices)

    def driver_info() -> _Obj:
        if not devices:
            raise RuntimeError("Device not found error")
        return _Obj(major=1, minor=9, patch=8, metadata="", prerelease="")

    module.init = init  # type: ignore[attr-defined]
    module.list_devices = list_devices  # type: ignore[attr-defined]
    module.driver_info = driver_info  # type: ignore[attr-defined]
    module.create_default_observer = lambda: Observer()  # type: ignore[attr-defined]
    return module


def use_sdk(env_or_monkeypatch: Any, module: types.ModuleType) -> None:
    """Install a fake SDK generation; the other generation is blocked."""
    mp = getattr(env_or_monkeypatch, "monkeypatch", env_or_monkeypatch)
    block_sdk(mp)
    mp.setitem(sys.modules, module.__name__, module)


# -- scenarios ---------------------------------------------------------------


def _absent(env: ScenarioEnv) -> FuriosaBackend:
    block_sdk(env)
    env.monkeypatch.delenv(ENV_VAR, raising=False)
    empty = env.tmp_path / "empty-path"
    empty.mkdir()
    env.monkeypatch.setenv("PATH", str(empty))
    env.monkeypatch.setattr(furiosa_module, "INSTALL_DIRS", ())
    return FuriosaBackend(timeout_seconds=5.0)


def _env_points_nowhere(env: ScenarioEnv) -> FuriosaBackend:
    block_sdk(env)
    env.monkeypatch.setenv(ENV_VAR, str(env.tmp_path / "no-such-furiosa-smi"))
    return FuriosaBackend(timeout_seconds=5.0)


def _cli_no_devices(env: ScenarioEnv) -> FuriosaBackend:
    use_cli(env, {"info": route(text="[]\n"), "status": route(text="[]\n"), "ps": route(text="[]\n")})
    return FuriosaBackend(timeout_seconds=5.0)


def _sdk_no_devices(env: ScenarioEnv) -> FuriosaBackend:
    use_sdk(env, legacy_sdk([]))
    env.monkeypatch.setenv(ENV_VAR, str(env.tmp_path / "no-such-furiosa-smi"))
    return FuriosaBackend(timeout_seconds=5.0)


def _cli_rngd_4x(env: ScenarioEnv) -> FuriosaBackend:
    use_cli(env, {sub: route(name) for sub, name in RNGD_4X.items()})
    return FuriosaBackend(timeout_seconds=5.0, user_lookup=lambda pid: None)


def _cli_rngd_faults(env: ScenarioEnv) -> FuriosaBackend:
    use_cli(env, {"info": route("info-na-cells.json"), "status": route("status-partial.json"),
                  "ps": route(rc=1, stderr="permission denied\n")})
    return FuriosaBackend(timeout_seconds=5.0)


def _cli_warboy(env: ScenarioEnv) -> FuriosaBackend:
    """The oldest CLI: Warboy-era ``--output json``, ``utilization`` per PE, per-core ps rows with memory."""
    use_cli(env, {"info": route("info-warboy-output-flag.json"), "status": route("status-warboy-output-flag.json"),
                  "ps": route("ps-warboy-output-flag.json")}, flag="--output")
    return FuriosaBackend(timeout_seconds=5.0, user_lookup=lambda pid: None)


def _cli_64(env: ScenarioEnv) -> FuriosaBackend:
    """64 RNGD: the 4x fixtures' first rows repeated under their own labels and uuids."""
    info = json.loads((FURIOSA / RNGD_4X["info"]).read_text())[0]
    status = json.loads((FURIOSA / RNGD_4X["status"]).read_text())[1]
    infos, statuses = [], []
    for n in range(64):
        infos.append({**info, "dev_name": f"npu{n}", "device_uuid": f"00000000-0000-4000-8000-{n:012d}",
                      "device_sn": f"RNG{n:013d}", "pci_bdf": f"0000:{n + 16:02x}:00.0"})
        statuses.append({**status, "device": f"npu{n}"})
    use_cli(env, {"info": route(text=json.dumps(infos)), "status": route(text=json.dumps(statuses)),
                  "ps": route(text="[]")})
    return FuriosaBackend(timeout_seconds=5.0)


def _modern_sdk_4x(env: ScenarioEnv) -> FuriosaBackend:
    use_sdk(env, modern_sdk(four_rngd()))
    env.monkeypatch.setenv(ENV_VAR, str(env.tmp_path / "no-such-furiosa-smi"))
    return FuriosaBackend(timeout_seconds=5.0)


def _legacy_sdk_4x_with_ps(env: ScenarioEnv) -> FuriosaBackend:
    use_sdk(env, legacy_sdk(four_rngd(npu2={"alive": False})))
    exe = write_standin(env.tmp_path / "bin", {"ps": route("ps-rngd-2026.3.json")})
    env.monkeypatch.setenv(ENV_VAR, str(exe))
    return FuriosaBackend(timeout_seconds=5.0, user_lookup=lambda pid: "svc")


def _info(fixture: str, device: str, key: str, unit: str | None = None):
    """``info``'s ``key`` of ``device``: ``"52.00 W"``, ``"35°C"`` state their unit; RNGD's bare
    ``temperature`` is in °C; or ``status``'s DRAM sizes (``memory/DRAM/used_size``), in bytes."""
    where = f"device={device}/{key}" if key.startswith("memory/") else f"dev_name={device}/{key}"
    return json_value(FURIOSA / fixture, where, "B" if key.startswith("memory/") else unit)


INFO, STATUS, WARBOY, WARBOY_PS = RNGD_4X["info"], RNGD_4X["status"], "info-warboy-output-flag.json", \
    "ps-warboy-output-flag.json"
USED, TOTAL = "memory/DRAM/used_size", "memory/DRAM/total_size"

SCENARIOS: list[Scenario] = [
    Scenario("tool-and-sdk-absent", _absent, None),
    Scenario("env-override-not-executable", _env_points_nowhere, None),
    Scenario("cli-no-devices", _cli_no_devices, None),
    Scenario("sdk-no-devices", _sdk_no_devices, None),
    # power and temperature from info, DRAM bytes from status, utilization the mean of the 8 PEs;
    # RNGD ps has no memory.
    Scenario("cli-rngd-4x", _cli_rngd_4x, 4, dict([
        expect("B9E2F4A7-1C3D-4F6B-8A20-5E7D9C1B3F22", power_watts=_info(INFO, "npu1", "power"),
               temperature_celsius=_info(INFO, "npu1", "temperature", "C"),
               clock_mhz=1000.0, power_limit_watts=None, utilization_percent=45.25,
               compute_active_percent=45.25, compute_active_source="pe_busy",
               memory_used_bytes=_info(STATUS, "npu1", USED), memory_total_bytes=_info(STATUS, "npu1", TOTAL),
               health="ok", processes=[(41230, None), (52011, None)]),
        expect("A3D7E1C2-5B8F-4E2A-9C61-0D4F7B2E8A11", power_watts=_info(INFO, "npu0", "power"),
               utilization_percent=0.0, memory_used_bytes=_info(STATUS, "npu0", USED))])),
    # Warboy: "1.37 W", "35°C"; one process on two PE ranges (npu0pe0 and npu0pe1), summed.
    Scenario("cli-warboy-output-flag", _cli_warboy, 1, dict([
        expect("0D8A1F3E-6B2C-4D5A-8E97-2F1C3B4A5D66", power_watts=_info(WARBOY, "npu0", "power"),
               temperature_celsius=_info(WARBOY, "npu0", "temperature"), clock_mhz=None, utilization_percent=31.6,
               processes=[(3771, total(*(json_value(FURIOSA / WARBOY_PS, f"npu={pe}/memory")
                                         for pe in ("npu0pe0", "npu0pe1"))))])])),
    # each of the 64 is the 4x fixtures' npu0 info row and npu1 status row
    Scenario("cli-rngd-64", _cli_64, 64, dict([
        expect("00000000-0000-4000-8000-000000000063", index=63, power_watts=_info(INFO, "npu0", "power"),
               memory_used_bytes=_info(STATUS, "npu1", USED), utilization_percent=45.25, processes=[])])),
    # npu2 is listed by info but has no status row: degraded
    Scenario("cli-rngd-na-and-partial", _cli_rngd_faults, 2,
             unread=("C4F1A8B3-7D2E-4A9C-B153-6F8E0D2C4A33",)),
    Scenario("sdk-furiosa_smi-4x", _modern_sdk_4x, 4),
    Scenario("sdk-furiosa_smi_py-4x-one-dead", _legacy_sdk_4x_with_ps, 4),
]

#: How the fault-and-drift matrix (tests/contract/test_cli_faults.py) drives furiosa-smi.
CLI = CliTool(env_var=ENV_VAR, executable="furiosa-smi", partial=FURIOSA / "info-truncated.json",
              options={"method": "cli"},
              calls=("info --format json", "status --format json", "ps --format json"),
              drift={"oldest": "cli-warboy-output-flag", "newest": "cli-rngd-4x",
                     "na-fields": "cli-rngd-na-and-partial", "64-devices": "cli-rngd-64",
                     "multi-process": "cli-rngd-4x"})

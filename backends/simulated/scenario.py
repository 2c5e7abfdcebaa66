"""Scenario files of the simulation: reading, ``include``, and strict validation.

A scenario is validated whole: every key of every file (the one given and those it includes)
is checked for its type and range, and entries that refer to each other (``[[partitions]]``
and ``[[faults]]`` naming a device or a backend) are checked against the merged scenario. Every problem is a :class:`ScenarioError` naming the file, the line
and the key, which the CLI turns into exit code 2.

``include = "NAME"`` (or a path) starts from another scenario: the including file's top-level
scalars (``name``, ``seed``, ``epoch``, ``users``, ``commands``) replace the included ones, and
its ``[[devices]]``, ``[[partitions]]`` and ``[[faults]]`` are added to the included ones.

``[groups.NAME]`` and ``[[rules]]`` are the scenario's default resource groups, in the
configuration file's format: their shape is checked here, their values by the configuration's
own validator when the CLI merges them under the user's configuration
(:func:`allsmi.config.parse_group_tables`, which this layer may not import), with the same file,
line and key. An including file's rules come first; its groups replace included ones.
"""

from __future__ import annotations

import datetime as dt
import math
import sys
import time
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from allsmi.tomlkeys import KeyLocator, toml_syntax_line

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCENARIO_DIR = Path(__file__).with_name("scenarios")
DEFAULT_EPOCH = "2026-01-01T00:00:00+00:00"
MAX_DEVICES = 4096
"""Devices of one ``[[devices]]`` entry, and partitions of one device: at most this many."""
MAX_SECONDS = 10 * 365 * 86400.0
"""Longest duration a scenario may name (ten years)."""


class ScenarioError(ValueError):
    """A scenario file is missing or malformed; the message names the file, line and key."""

    def __init__(self, message: str, path: Path | str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        where = str(path) if path else "<scenario>"
        if line:
            where += f", line {line}"
        if key:
            where += f", key '{key}'"
        self.path, self.line, self.key, self.reason = path, line, key, message
        super().__init__(f"{where}: {message}")


def builtin_scenarios() -> list[str]:
    """Names accepted by ``--simulate NAME``."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


@dataclass(frozen=True)
class DeviceSpec:
    """One ``[[devices]]`` entry of a scenario."""

    backend: str
    vendor: str
    kind: str
    model: str
    count: int
    memory_total_bytes: int
    power_idle_watts: float
    power_limit_watts: float
    clock_idle_mhz: float
    clock_max_mhz: float
    temperature_idle_celsius: float
    temperature_max_celsius: float
    has_fan: bool = False
    has_energy_counter: bool = False
    cores: int = 0
    driver_version: str | None = None
    firmware_version: str | None = None
    id_style: str = "uuid"
    bus_base: int = 0x10
    duty_cycle: float = 0.6
    job_seconds: tuple[float, float] = (600.0, 2400.0)
    busy_looking: tuple[int, ...] = ()
    """Indexes of "busy-looking" devices: 100 % utilization, 20 % compute activity in a job."""


@dataclass(frozen=True)
class FaultSpec:
    """One ``[[faults]]`` entry: ``lost`` (a device), ``error`` or ``hang`` (a backend)."""

    type: str
    device: str | None = None
    backend: str | None = None
    message: str = "simulated failure"
    seconds: float = 3600.0
    every_seconds: float | None = None
    duration_seconds: float | None = None


@dataclass(frozen=True)
class GroupTables:
    """One scenario file's ``[groups.NAME]`` and ``[[rules]]`` tables, as written."""

    path: Path
    locator: KeyLocator
    groups: dict[str, Any]
    rules: list[Any]


@dataclass(frozen=True)
class Scenario:
    """A whole simulated node."""

    name: str
    seed: int
    epoch: float
    users: tuple[str, ...]
    commands: tuple[str, ...]
    devices: tuple[DeviceSpec, ...]
    partitions: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    faults: tuple[FaultSpec, ...] = ()
    source: str = ""
    group_tables: tuple[GroupTables, ...] = ()
    """The default resource groups of this file and the files it includes, this file first."""

    def backend_names(self) -> list[str]:
        """Backends the scenario impersonates, in file order."""
        seen: list[str] = []
        for spec in self.devices:
            if spec.backend not in seen:
                seen.append(spec.backend)
        return seen


# -- value rules: (kind, minimum, maximum); minimum exclusive where marked ----------------
_INT, _NUM, _STR, _BOOL = "integer", "number", "string", "boolean"
_DEVICE_RULES: dict[str, tuple[str, float | None, float | None]] = {
    "backend": (_STR, None, None), "vendor": (_STR, None, None), "kind": (_STR, None, None),
    "model": (_STR, None, None), "count": (_INT, 0, MAX_DEVICES),
    "memory_total_bytes": (_INT, 1, 2**60), "power_idle_watts": (_NUM, 0, 100_000),
    "power_limit_watts": (_NUM, 0, 100_000), "clock_idle_mhz": (_NUM, 0, 100_000),
    "clock_max_mhz": (_NUM, 0, 100_000), "temperature_idle_celsius": (_NUM, -50, 200),
    "temperature_max_celsius": (_NUM, -50, 200), "has_fan": (_BOOL, None, None),
    "has_energy_counter": (_BOOL, None, None), "cores": (_INT, 0, 1024),
    "driver_version": (_STR, None, None), "firmware_version": (_STR, None, None),
    "id_style": (_STR, None, None), "bus_base": (_INT, 0, 0xFF), "duty_cycle": (_NUM, 0, 1),
}
_FAULT_RULES: dict[str, tuple[str, float | None, float | None]] = {
    "type": (_STR, None, None), "device": (_STR, None, None), "backend": (_STR, None, None),
    "message": (_STR, None, None), "seconds": (_NUM, 0, MAX_SECONDS),
    "every_seconds": (_NUM, 0, MAX_SECONDS), "duration_seconds": (_NUM, 0, MAX_SECONDS),
}
_INSTANCE_RULES: dict[str, tuple[str, float | None, float | None]] = {
    "profile": (_STR, None, None), "memory_total_bytes": (_INT, 1, 2**60),
}
_TOP = ("name", "seed", "epoch", "users", "commands", "devices", "partitions", "faults", "include",
        "groups", "rules")
_ID_STYLES = ("nvidia", "uuid", "gaudi", "board")
_KINDS = ("gpu", "npu")
_FAULT_TYPES = ("lost", "error", "hang")
_POSITIVE = ("memory_total_bytes", "seconds", "every_seconds", "duration_seconds", "duty_cycle")


class _File:
    """One scenario file: its data and where each key stands in it."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        try:
            self.data: dict[str, Any] = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            reason, line = toml_syntax_line(exc)
            raise ScenarioError(f"invalid TOML: {reason}", path, line) from None
        self.locator = KeyLocator(text)

    def error(self, message: str, *key_path: str | int) -> ScenarioError:
        keys = tuple(str(k) for k in key_path)
        shown = ".".join(k if not k.isdigit() else f"[{int(k) + 1}]" for k in keys).replace(".[", "[")
        return ScenarioError(message, self.path, self.locator.find(keys), shown or None)

    # -- typed values ------------------------------------------------------
    def value(self, raw: Any, rule: tuple[str, float | None, float | None], *key: str | int) -> Any:
        kind, low, high = rule
        name = str(key[-1])
        if kind == _STR:
            if not isinstance(raw, str) or not raw.strip():
                raise self.error(f"must be a non-empty string, got {raw!r}", *key)
            return raw
        if kind == _BOOL:
            if not isinstance(raw, bool):
                raise self.error(f"must be true or false, got {raw!r}", *key)
            return raw
        if kind == _INT and (isinstance(raw, bool) or not isinstance(raw, int)):
            raise self.error(f"must be a whole number, got {raw!r}", *key)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
            raise self.error(f"must be a finite number, got {raw!r}", *key)
        positive = name in _POSITIVE
        if low is not None and (raw < low or (positive and raw <= 0)):
            raise self.error(f"must be {'>' if positive else '>='} {low:g}, got {raw!r}", *key)
        if high is not None and raw > high:
            raise self.error(f"must be at most {high:g}, got {raw!r}", *key)
        return raw if kind == _INT else float(raw)

    def table(self, raw: Any, rules: dict[str, tuple[str, float | None, float | None]],
              required: tuple[str, ...], *key: str | int, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.error("must be a table", *key)
        for name in raw:
            if name not in rules and name not in extra:
                allowed = ", ".join(sorted((*rules, *extra)))
                raise self.error(f"unknown key (allowed: {allowed})", *key, name)
        for name in required:
            if name not in raw:
                raise self.error(f"missing required key {name!r}", *key)
        return {name: self.value(v, rules[name], *key, name) for name, v in raw.items()
                if name in rules}

    def strings(self, raw: Any, *key: str) -> tuple[str, ...]:
        if not isinstance(raw, list) or not raw:
            raise self.error("must be a non-empty list of strings", *key)
        return tuple(self.value(v, (_STR, None, None), *key, i) for i, v in enumerate(raw))

    def array(self, name: str) -> list[Any]:
        raw = self.data.get(name, [])
        if not isinstance(raw, list):
            raise self.error("must be an array of tables ([[" + name + "]])", name)
        return raw


def _read(ref: str | Path) -> _File:
    path = Path(ref)
    if not path.suffix and not path.exists():
        path = SCENARIO_DIR / f"{ref}.toml"
        if not path.is_file():
            raise ScenarioError(f"unknown scenario {str(ref)!r}: built-in scenarios are "
                                f"{', '.join(builtin_scenarios())}, or give a path to a .toml file")
    try:
        return _File(path, path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError("scenario file not found", path) from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"not UTF-8 text: {exc}", path) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read: {exc}", path) from None


def _device(f: _File, raw: Any, i: int) -> DeviceSpec:
    required = tuple(x.name for x in fields(DeviceSpec) if x.default is MISSING)
    values = f.table(raw, _DEVICE_RULES, required, "devices", i,
                     extra=("job_seconds", "busy_looking"))
    if values["kind"] not in _KINDS:
        raise f.error(f"must be one of {', '.join(_KINDS)}, got {values['kind']!r}", "devices", i, "kind")
    if values.get("id_style", "uuid") not in _ID_STYLES:
        raise f.error(f"must be one of {', '.join(_ID_STYLES)}, got {values['id_style']!r}",
                      "devices", i, "id_style")
    for low, high in (("power_idle_watts", "power_limit_watts"), ("clock_idle_mhz", "clock_max_mhz"),
                      ("temperature_idle_celsius", "temperature_max_celsius")):
        if values[high] < values[low] or (high == "power_limit_watts" and values[high] == values[low]):
            raise f.error(f"must be {'more than' if high == 'power_limit_watts' else 'at least'} "
                          f"{low} ({values[low]:g}), got {values[high]:g}", "devices", i, high)
    if "job_seconds" in raw:
        spans = raw["job_seconds"]
        if not isinstance(spans, list) or len(spans) != 2:
            raise f.error(f"must be [shortest, longest] seconds, got {spans!r}", "devices", i, "job_seconds")
        lo, hi = (f.value(v, (_NUM, 0, MAX_SECONDS), "devices", i, "job_seconds") for v in spans)
        if lo <= 0 or hi < lo:
            raise f.error(f"needs 0 < shortest <= longest, got {spans!r}", "devices", i, "job_seconds")
        values["job_seconds"] = (lo, hi)
    looking = raw.get("busy_looking", [])
    if not isinstance(looking, list) or any(type(n) is not int or not 0 <= n < values["count"]
                                            for n in looking):
        raise f.error(f"must be a list of device indexes from 0 to count - 1, got {looking!r}",
                      "devices", i, "busy_looking")
    values["busy_looking"] = tuple(looking)
    return DeviceSpec(**values)


def _fault(f: _File, raw: Any, i: int) -> FaultSpec:
    values = f.table(raw, _FAULT_RULES, ("type",), "faults", i)
    kind = values["type"]
    if kind not in _FAULT_TYPES:
        raise f.error(f"must be one of {', '.join(_FAULT_TYPES)}, got {kind!r}", "faults", i, "type")
    needed = "device" if kind == "lost" else "backend"
    if needed not in values:
        raise f.error(f"a {kind!r} fault needs {needed!r}", "faults", i)
    if ("every_seconds" in values) != ("duration_seconds" in values):
        raise f.error("every_seconds and duration_seconds go together", "faults", i)
    return FaultSpec(**values)


def _partition(f: _File, raw: Any, i: int) -> tuple[str, tuple[dict[str, Any], ...]]:
    if not isinstance(raw, dict):
        raise f.error("must be a table", "partitions", i)
    for name in raw:
        if name not in ("device", "instances"):
            raise f.error("unknown key (allowed: device, instances)", "partitions", i, name)
    device = f.value(raw.get("device"), (_STR, None, None), "partitions", i, "device")
    instances = raw.get("instances")
    if not isinstance(instances, list) or not 0 < len(instances) <= MAX_DEVICES:
        raise f.error("must be a non-empty list of { profile, memory_total_bytes } tables",
                      "partitions", i, "instances")
    return device, tuple(f.table(inst, _INSTANCE_RULES, ("memory_total_bytes",), "partitions", i,
                                 "instances") for inst in instances)


def _group_tables(f: _File) -> GroupTables | None:
    """The file's ``[groups.NAME]`` and ``[[rules]]``, their shape checked."""
    groups = f.data.get("groups", {})
    if not isinstance(groups, dict):
        raise f.error("must be a table of [groups.NAME] tables", "groups")
    for name, table in groups.items():
        if not isinstance(table, dict):
            raise f.error("must be a table", "groups", name)
    rules = f.array("rules")
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            raise f.error("must be a table", "rules", i)
    if not groups and not rules:
        return None
    return GroupTables(f.path, f.locator, groups, rules)


def _epoch(f: _File, raw: Any) -> float:
    when = raw if isinstance(raw, dt.datetime) else None
    if isinstance(raw, str):
        try:
            when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            pass
    if when is None:
        raise f.error(f"must be an RFC 3339 date-time, got {raw!r}", "epoch")
    if when.tzinfo is None:
        raise f.error(f"needs a UTC offset (e.g. 'Z'), got {raw!r}", "epoch")
    if when.timestamp() > time.time():  # the energy counters count from it: a live sample
        raise f.error(f"must not be in the future, got {raw!r}", "epoch")  # would be negative
    return when.timestamp()


def load_scenario(ref: str | Path, _seen: tuple[Path, ...] = ()) -> Scenario:
    """Load a built-in scenario by name or a scenario file by path; validate all of it."""
    f = _read(ref)
    if f.path.resolve() in _seen:
        raise f.error("includes itself (directly or through another file)", "include")
    data = f.data
    for key in data:
        if key not in _TOP:
            raise f.error(f"unknown top-level key (allowed: {', '.join(_TOP)})", key)
    base: Scenario | None = None
    if "include" in data:
        include = f.value(data["include"], (_STR, None, None), "include")
        target = Path(include)
        if target.suffix and not target.is_absolute():
            target = f.path.parent / target
        try:
            base = load_scenario(target if target.suffix else include, _seen + (f.path.resolve(),))
        except ScenarioError as exc:
            if exc.path is None:  # an unknown built-in name: say where it was asked for
                raise f.error(exc.reason, "include") from None
            raise
    name = f.value(data["name"], (_STR, None, None), "name") if "name" in data else (
        base.name if base else f.path.stem)
    seed = f.value(data["seed"], (_INT, -(2**63), 2**63 - 1), "seed") if "seed" in data else (
        base.seed if base else 0)
    epoch = _epoch(f, data["epoch"]) if "epoch" in data else (
        base.epoch if base else dt.datetime.fromisoformat(DEFAULT_EPOCH).timestamp())
    users = f.strings(data["users"], "users") if "users" in data else (base.users if base else ("user",))
    commands = (f.strings(data["commands"], "commands") if "commands" in data
                else (base.commands if base else ("python job.py",)))
    devices = (base.devices if base else ()) + tuple(
        _device(f, d, i) for i, d in enumerate(f.array("devices")))
    faults = tuple(_fault(f, x, i) for i, x in enumerate(f.array("faults")))
    partitions = dict(base.partitions) if base else {}
    own_partitions = [_partition(f, p, i) for i, p in enumerate(f.array("partitions"))]
    # Cross-references are checked against the merged scenario, and reported in this file.
    refs = {f"{d.backend}:{n}" for d in devices for n in range(d.count)}
    backends = {d.backend for d in devices}
    for i, (device, instances) in enumerate(own_partitions):
        if device not in refs:
            raise f.error(f"no such device {device!r} (devices are named backend:index)",
                          "partitions", i, "device")
        if device in partitions:
            raise f.error(f"{device!r} is partitioned twice", "partitions", i, "device")
        partitions[device] = instances
    for i, fault in enumerate(faults):
        if fault.device is not None and fault.device not in refs:
            raise f.error(f"no such device {fault.device!r} (devices are named backend:index)",
                          "faults", i, "device")
        if fault.backend is not None and fault.backend not in backends:
            raise f.error(f"no such backend {fault.backend!r} in the scenario", "faults", i, "backend")
    own_groups = _group_tables(f)
    return Scenario(name=name, seed=seed, epoch=epoch, users=users, commands=commands,
                    devices=devices, partitions=partitions,
                    faults=(base.faults if base else ()) + faults, source=str(f.path),
                    group_tables=((own_groups,) if own_groups else ()) + (
                        base.group_tables if base else ()))

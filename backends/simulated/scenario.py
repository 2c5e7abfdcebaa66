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
import time
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from allsmi.schema.text import MAX_COMMAND, MAX_MESSAGE
from allsmi.support.tomlkeys import KeyLocator

from .checks import BACKEND_NAME, bus_numbers, partition_problem
from .scenariofile import (BOOL, INT, NUM, STR, Rule, ScenarioError, ScenarioFile, find_file,
                           read_file)

DEFAULT_EPOCH = "2026-01-01T00:00:00+00:00"
MAX_DEVICES = 4096
"""Devices of a scenario (all its ``[[devices]]`` entries), and partitions of one device: at
most this many."""
MAX_SECONDS = 10 * 365 * 86400.0
"""Longest duration a scenario may name (ten years)."""
MAX_INCLUDES = 16
"""Deepest chain of ``include``: a file, the one it includes, and so on."""


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
    """Indexes of "busy-looking" devices: 100 % utilization, 20 % compute activity in a job
    (the backend's device indexes: :attr:`first_index` and up)."""
    first_index: int = 0
    """The backend's index of the entry's first device: the devices of an earlier entry of
    the same backend come first (``nvidia:0`` to ``nvidia:7``, then ``nvidia:8``...)."""


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


# -- value rules: (kind, minimum, maximum); minimum exclusive for scenariofile.POSITIVE ----
_DEVICE_RULES: dict[str, Rule] = {
    "backend": (STR, None, None), "vendor": (STR, None, None), "kind": (STR, None, None),
    "model": (STR, None, None), "count": (INT, 0, MAX_DEVICES),
    "memory_total_bytes": (INT, 1, 2**60), "power_idle_watts": (NUM, 0, 100_000),
    "power_limit_watts": (NUM, 0, 100_000), "clock_idle_mhz": (NUM, 0, 100_000),
    "clock_max_mhz": (NUM, 0, 100_000), "temperature_idle_celsius": (NUM, -50, 200),
    "temperature_max_celsius": (NUM, -50, 200), "has_fan": (BOOL, None, None),
    "has_energy_counter": (BOOL, None, None), "cores": (INT, 0, 1024),
    "driver_version": (STR, None, None), "firmware_version": (STR, None, None),
    "id_style": (STR, None, None), "bus_base": (INT, 0, 0xFF), "duty_cycle": (NUM, 0, 1),
}
_FAULT_RULES: dict[str, Rule] = {
    "type": (STR, None, None), "device": (STR, None, None), "backend": (STR, None, None),
    "message": (STR, None, None), "seconds": (NUM, 0, MAX_SECONDS),
    "every_seconds": (NUM, 0, MAX_SECONDS), "duration_seconds": (NUM, 0, MAX_SECONDS),
}
_INSTANCE_RULES: dict[str, Rule] = {
    "profile": (STR, None, None), "memory_total_bytes": (INT, 1, 2**60),
}
_TOP = ("name", "seed", "epoch", "users", "commands", "devices", "partitions", "faults", "include",
        "groups", "rules")
_ID_STYLES = ("nvidia", "uuid", "gaudi", "board")
_KINDS = ("gpu", "npu")
#: Each fault type's keys (beside ``type``, ``every_seconds`` and ``duration_seconds``).
_FAULT_KEYS = {"lost": ("device",), "error": ("backend", "message"), "hang": ("backend", "seconds")}


def _device(f: ScenarioFile, raw: Any, i: int, first: dict[str, int]) -> DeviceSpec:
    """Entry ``i`` of ``[[devices]]``; ``first`` holds each backend's next device index."""
    required = tuple(x.name for x in fields(DeviceSpec) if x.default is MISSING)
    values = f.table(raw, _DEVICE_RULES, required, "devices", i,
                     extra=("job_seconds", "busy_looking"))
    if not BACKEND_NAME.match(values["backend"]):
        raise f.error("must be a backend name (lowercase letters, digits, '-' and '_', from a "
                      f"letter), got {values['backend']!r}", "devices", i, "backend")
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
        lo, hi = (f.value(v, (NUM, 0, MAX_SECONDS), "devices", i, "job_seconds") for v in spans)
        if lo <= 0 or hi < lo:
            raise f.error(f"needs 0 < shortest <= longest, got {spans!r}", "devices", i, "job_seconds")
        values["job_seconds"] = (lo, hi)
    looking = raw.get("busy_looking", [])
    if not isinstance(looking, list) or len(set(map(repr, looking))) != len(looking) or any(
            type(n) is not int or not 0 <= n < values["count"] for n in looking):
        raise f.error(f"must be a list of distinct device indexes from 0 to count - 1, got "
                      f"{looking!r}", "devices", i, "busy_looking")
    start = values["first_index"] = first.get(values["backend"], 0)
    first[values["backend"]] = start + values["count"]
    values["busy_looking"] = tuple(start + n for n in looking)
    return DeviceSpec(**values)


def _fault(f: ScenarioFile, raw: Any, i: int) -> FaultSpec:
    values = f.table(raw, _FAULT_RULES, ("type",), "faults", i, longest={"message": MAX_MESSAGE})
    kind = values["type"]
    if kind not in _FAULT_KEYS:
        raise f.error(f"must be one of {', '.join(_FAULT_KEYS)}, got {kind!r}", "faults", i, "type")
    keys = ("type", *_FAULT_KEYS[kind], "every_seconds", "duration_seconds")
    for name in values:
        if name not in keys:
            raise f.error(f"not a key of a fault of type {kind!r} (its keys: {', '.join(keys)})",
                          "faults", i, name)
    needed = _FAULT_KEYS[kind][0]
    if needed not in values:
        raise f.error(f"a fault of type {kind!r} needs {needed!r}", "faults", i)
    if ("every_seconds" in values) != ("duration_seconds" in values):
        raise f.error("every_seconds and duration_seconds go together", "faults", i)
    if values.get("duration_seconds", 0) > values.get("every_seconds", MAX_SECONDS):
        raise f.error(f"must be at most every_seconds ({values['every_seconds']:g}), got "
                      f"{values['duration_seconds']:g}", "faults", i, "duration_seconds")
    return FaultSpec(**values)


def _partition(f: ScenarioFile, raw: Any, i: int) -> tuple[str, tuple[dict[str, Any], ...]]:
    if not isinstance(raw, dict):
        raise f.error("must be a table", "partitions", i)
    for name in raw:
        if name not in ("device", "instances"):
            raise f.error("unknown key (allowed: device, instances)", "partitions", i, name)
    device = f.value(raw.get("device"), (STR, None, None), "partitions", i, "device")
    instances = raw.get("instances")
    if not isinstance(instances, list) or not 0 < len(instances) <= MAX_DEVICES:
        raise f.error(f"must be a list of 1 to {MAX_DEVICES} {{ profile, memory_total_bytes }} "
                      "tables", "partitions", i, "instances")
    return device, tuple(f.table(inst, _INSTANCE_RULES, ("memory_total_bytes",), "partitions", i,
                                 "instances", n) for n, inst in enumerate(instances))


def _group_tables(f: ScenarioFile) -> GroupTables | None:
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


def _epoch(f: ScenarioFile, raw: Any) -> float:
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
    # The energy counters count from it: a live sample must not be before it.
    if not 0 <= when.timestamp() <= time.time():
        raise f.error(f"must be from 1970-01-01T00:00:00Z to now, got {raw!r}", "epoch")
    return when.timestamp()


def _bus_base(f: ScenarioFile, spec: DeviceSpec, raw: dict[str, Any], i: int,
              used: set[int]) -> DeviceSpec:
    """``spec`` with PCI bus numbers no earlier device has: its ``bus_base`` if given (else an
    error), else the first free one from the default."""
    numbers = bus_numbers(spec.bus_base, spec.count)
    if "bus_base" in raw:
        taken = sorted(used.intersection(numbers))
        if taken:
            raise f.error(f"gives bus 0x{taken[0] % 256:02x} (domain {taken[0] // 256}) to a "
                          "second device: another entry's devices have it", "devices", i, "bus_base")
    else:
        base = next((b for b in range(spec.bus_base, 0x100)
                     if not used.intersection(bus_numbers(b, spec.count))), None)
        if base is None:
            raise f.error("no free PCI bus numbers for the entry's devices: give bus_base",
                          "devices", i)
        spec = DeviceSpec(**{**spec.__dict__, "bus_base": base})
        numbers = bus_numbers(base, spec.count)
    used.update(numbers)
    return spec


def _include(f: ScenarioFile, seen: tuple[Path, ...]) -> "Scenario":
    """The scenario ``include`` names: a built-in name, or a path (a name with a suffix or a
    directory) relative to the including file."""
    include = f.value(f.data["include"], (STR, None, None), "include", longest=4096)
    if len(seen) >= MAX_INCLUDES:
        raise f.error(f"includes nest more than {MAX_INCLUDES} deep", "include")
    target = Path(include)
    is_path = bool(target.suffix) or "/" in include
    try:
        path = f.path.parent / target if is_path else find_file(include, builtin=True)
        return _load(path, seen + (f.path.resolve(),))
    except ScenarioError as exc:
        if exc.path is None or exc.line is None:  # the file itself: say where it was asked for
            raise f.error(exc.reason + (f" ({exc.path})" if exc.path else ""), "include") from None
        raise


def load_scenario(ref: str | Path) -> Scenario:
    """Load a built-in scenario by name or a scenario file by path; validate all of it."""
    scenario = _load(find_file(ref), ())
    if not scenario.devices:  # (an empty file; a node without devices says count = 0)
        raise ScenarioError("the scenario has no [[devices]] entry (a node without devices has "
                            "one with count = 0)", scenario.source, None, "devices")
    return scenario


def _load(path: Path, seen: tuple[Path, ...]) -> Scenario:
    f = read_file(path)
    if f.path.resolve() in seen:
        raise f.error("includes itself (directly or through another file)", "include")
    data = f.data
    for key in data:
        if key not in _TOP:
            raise f.error(f"unknown top-level key (allowed: {', '.join(_TOP)})", key)
    base = _include(f, seen) if "include" in data else None
    name = f.value(data["name"], (STR, None, None), "name") if "name" in data else (
        base.name if base else f.path.stem)
    seed = f.value(data["seed"], (INT, -(2**63), 2**63 - 1), "seed") if "seed" in data else (
        base.seed if base else 0)
    epoch = _epoch(f, data["epoch"]) if "epoch" in data else (
        base.epoch if base else dt.datetime.fromisoformat(DEFAULT_EPOCH).timestamp())
    users = (f.strings(data["users"], "users", as_processes_say=True) if "users" in data
             else (base.users if base else ("user",)))
    commands = (f.strings(data["commands"], "commands", longest=MAX_COMMAND, as_processes_say=True)
                if "commands" in data
                else (base.commands if base else ("python job.py",)))
    devices = base.devices if base else ()
    first: dict[str, int] = {d.backend: d.first_index + d.count for d in devices}
    used = {n for d in devices for n in bus_numbers(d.bus_base, d.count)}
    total = sum(d.count for d in devices)
    for i, raw in enumerate(f.array("devices")):
        spec = _device(f, raw, i, first)
        total += spec.count
        if total > MAX_DEVICES:
            raise f.error(f"makes {total} devices; a scenario has at most {MAX_DEVICES}",
                          "devices", i, "count")
        devices += (_bus_base(f, spec, raw, i, used),)
    faults = tuple(_fault(f, x, i) for i, x in enumerate(f.array("faults")))
    partitions = dict(base.partitions) if base else {}
    own_partitions = [_partition(f, p, i) for i, p in enumerate(f.array("partitions"))]
    # Cross-references are checked against the merged scenario, and reported in this file.
    specs = {f"{d.backend}:{n}": d for d in devices
             for n in range(d.first_index, d.first_index + d.count)}
    backends = {d.backend for d in devices}
    for i, (device, instances) in enumerate(own_partitions):
        if device not in specs:
            raise f.error(f"no such device {device!r} (devices are named backend:index)",
                          "partitions", i, "device")
        if device in partitions:
            raise f.error(f"{device!r} is partitioned twice", "partitions", i, "device")
        spec = specs[device]
        problem = partition_problem(instances, spec.model, spec.memory_total_bytes,
                                    spec.id_style == "nvidia")
        if problem is not None:
            at, key, reason = problem
            raise f.error(reason, "partitions", i, "instances", *(
                (at, key) if at is not None else ()))
        partitions[device] = instances
    for i, fault in enumerate(faults):
        if fault.device is not None and fault.device not in specs:
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

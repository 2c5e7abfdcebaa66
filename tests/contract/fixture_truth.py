"""Expected readings computed from the fixture files, not written by the scenario's author.

A scenario declares WHERE in its fixture a reading is and in WHAT unit the fixture states it;
this module reads the value and converts it with its own unit table (:data:`UNITS`, which
shares nothing with ``allsmi.schema.units`` nor any backend's conversion code). A backend that
converts with the wrong unit, or reads the wrong field, then disagrees with a number nobody
typed::

    power = json_value(FIX / "status.json", "devices/0/power_mW", unit="mW")   # 17521.8 mW -> 17.5218
    total = csv_value(FIX / "query.csv", row=0, column="memory.total [MiB]")   # unit from the header
    temp = text_value(FIX / "npu-smi.txt", r"\\| 0 +910B3 .*?\\| +(\\S+) +\\d+", unit="C")
    energy = times(json_value(F, "energy_accumulator"), json_value(F, "counter_resolution", unit="uJ"))

Each value is a :class:`TrueInt` (bytes) or :class:`TrueFloat` (watts, joules, degrees,
percent) that remembers where it came from (``.where``); the contract suite checks that every
bytes, watts, joules and degrees value a scenario declares is one of these (or ``None``).
A value whose text carries its unit (``"17521800uW"``, ``"45.0 C"``, ``"1.4GiB"``) is read with
``unit=None``: the unit is the fixture's own; ``aliases`` maps a tool's spelling to the table's
(npu-smi's ``MB`` is MiB).
"""

from __future__ import annotations

import csv
import json
import re
import tomllib
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

#: unit -> (quantity, factor to the schema's unit). Written from SI and IEC 80000-13, not from
#: allsmi: bytes are counted in bytes, power in watts, energy in joules, temperature in degrees
#: Celsius, shares in percent.
UNITS: dict[str, tuple[str, Fraction]] = {
    "B": ("bytes", Fraction(1)),
    "KiB": ("bytes", Fraction(2**10)),
    "MiB": ("bytes", Fraction(2**20)),
    "GiB": ("bytes", Fraction(2**30)),
    "TiB": ("bytes", Fraction(2**40)),
    "kB": ("bytes", Fraction(10**3)),
    "MB": ("bytes", Fraction(10**6)),
    "GB": ("bytes", Fraction(10**9)),
    "W": ("watts", Fraction(1)),
    "mW": ("watts", Fraction(1, 10**3)),
    "uW": ("watts", Fraction(1, 10**6)),
    "kW": ("watts", Fraction(10**3)),
    "J": ("joules", Fraction(1)),
    "mJ": ("joules", Fraction(1, 10**3)),
    "uJ": ("joules", Fraction(1, 10**6)),
    "C": ("celsius", Fraction(1)),
    "mC": ("celsius", Fraction(1, 10**3)),  # hwmon's temp*_input: millidegrees Celsius
    "%": ("percent", Fraction(1)),
    "ratio": ("percent", Fraction(100)),  # a 0..1 fraction
    "count": ("count", Fraction(1)),  # a bare number: a tick count, a core count
}

#: The schema's field suffixes and the quantity each holds.
FIELD_QUANTITIES = {"_bytes": "bytes", "_watts": "watts", "_joules": "joules", "_celsius": "celsius"}


class TrueInt(int):
    """A byte count read from a fixture; ``where`` says from which file, place and unit."""

    where: str
    quantity: str

    def __new__(cls, value: int, where: str, quantity: str = "bytes") -> "TrueInt":
        self = super().__new__(cls, value)
        self.where, self.quantity = where, quantity
        return self

    def __repr__(self) -> str:
        return f"{int(self)} (from {self.where})"


class TrueFloat(float):
    """A reading (watts, joules, degrees, percent) read from a fixture, with its ``where``."""

    where: str
    quantity: str

    def __new__(cls, value: float, where: str, quantity: str) -> "TrueFloat":
        self = super().__new__(cls, value)
        self.where, self.quantity = where, quantity
        return self

    def __repr__(self) -> str:
        return f"{float(self)!r} (from {self.where})"


Truth = TrueInt | TrueFloat


def _exact(quantity: str, value: Fraction, where: str) -> Truth:
    if quantity in ("bytes", "count"):
        return TrueInt(round(value), where, quantity)
    return TrueFloat(float(value), where, quantity)


_NUMBER_UNIT = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z%µ°]*)\s*$")


def convert(raw: Any, unit: str | None, *, where: str, aliases: Mapping[str, str] | None = None) -> Truth:
    """``raw`` (a number, or text with or without its unit) in ``unit`` as the schema's unit.
    ``unit=None``: the text states its own unit (``"17521800uW"``)."""
    if isinstance(raw, bool) or raw is None:
        raise ValueError(f"{where}: {raw!r} is no reading")
    if isinstance(raw, (int, float)):
        number, stated = Fraction(str(raw)), ""
    else:
        match = _NUMBER_UNIT.match(str(raw))
        if not match:
            raise ValueError(f"{where}: {raw!r} is not a number with a unit")
        number, stated = Fraction(match.group(1)), match.group(2).replace("µ", "u").replace("°", "")
    if stated:
        stated = (aliases or {}).get(stated, stated)
        if unit is not None and stated != unit:
            raise ValueError(f"{where}: the fixture says {stated!r}, the scenario declared {unit!r}")
        unit = stated
    if unit is None:
        raise ValueError(f"{where}: {raw!r} states no unit and the scenario declared none")
    unit = (aliases or {}).get(unit, unit)
    if unit not in UNITS:
        raise ValueError(f"{where}: unknown unit {unit!r} (known: {', '.join(UNITS)})")
    quantity, factor = UNITS[unit]
    return _exact(quantity, number * factor, f"{where} [{unit}]")


def _rel(path: Path) -> str:
    parts = Path(path).parts
    return "/".join(parts[parts.index("fixtures"):]) if "fixtures" in parts else str(path)


@lru_cache(maxsize=None)
def _load_json(path: Path, mtime: float) -> Any:
    return json.loads(Path(path).read_text())


def _walk(document: Any, location: str, where: str) -> Any:
    """Follow ``a/0/b`` through a JSON/TOML document; a segment ``key=value`` picks the first
    list item whose ``key`` is ``value`` (``devices/bdf=0000:0c:00.0/power``), and
    ``k1=v1&k2=v2`` the first matching both."""
    node = document
    for segment in location.split("/"):
        if isinstance(node, list):
            if "=" in segment:
                wanted = [condition.partition("=")[::2] for condition in segment.split("&")]
                picked = [item for item in node if isinstance(item, dict)
                          and all(str(item.get(key)) == value for key, value in wanted)]
                if not picked:
                    raise KeyError(f"{where}: no item with {segment}")
                node = picked[0]
            else:
                node = node[int(segment)]
        elif isinstance(node, dict):
            if segment not in node:
                raise KeyError(f"{where}: no key {segment!r} (has {sorted(node)[:12]})")
            node = node[segment]
        else:
            raise KeyError(f"{where}: {segment!r} below a {type(node).__name__}")
    return node


def json_value(path: Path, location: str, unit: str | None = None, *,
               aliases: Mapping[str, str] | None = None) -> Truth:
    """The value at ``location`` (``a/0/key``) of a JSON fixture, stated in ``unit``."""
    path = Path(path)
    where = f"{_rel(path)}:{location}"
    return convert(_walk(_load_json(path, path.stat().st_mtime), location, where), unit,
                   where=where, aliases=aliases)


def jsonl_value(path: Path, line: int, location: str, unit: str | None = None) -> Truth:
    """The value at ``location`` of the ``line``-th (0-based) JSON document of a JSON-lines fixture."""
    path = Path(path)
    documents = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    where = f"{_rel(path)}#{line}:{location}"
    return convert(_walk(documents[line], location, where), unit, where=where)


def toml_value(path: Path, location: str, unit: str | None = None) -> Truth:
    """The value at ``location`` of a TOML file (the simulator's scenario files)."""
    path = Path(path)
    where = f"{_rel(path)}:{location}"
    return convert(_walk(tomllib.loads(path.read_text()), location, where), unit, where=where)


_HEADER_UNIT = re.compile(r"\[([^\]]+)\]\s*$")


def csv_value(path: Path, row: int, column: str, unit: str | None = None, *,
              aliases: Mapping[str, str] | None = None, fieldnames: Iterable[str] | None = None) -> Truth:
    """A CSV cell: ``row`` (0-based, after the header), ``column`` by its header name. The unit
    is the header's (``memory.total [MiB]``) or the cell's own (``81920 MiB``) unless declared.
    ``fieldnames`` names the columns of a header-less CSV (read from a ``.fields`` file)."""
    path = Path(path)
    with path.open(newline="") as handle:
        reader = csv.reader(handle, skipinitialspace=True)
        rows = list(reader)
    header = [h.strip() for h in (list(fieldnames) if fieldnames is not None else rows.pop(0))]
    where = f"{_rel(path)}:row {row}:{column}"
    if column not in header:
        raise KeyError(f"{where}: no column {column!r} (has {header})")
    cell = rows[row][header.index(column)].strip()
    header_unit, own = _HEADER_UNIT.search(column), _NUMBER_UNIT.match(cell)
    if unit is None and header_unit and not (own and own.group(2)):
        unit = header_unit.group(1)
    return convert(cell, unit, where=where, aliases=aliases)


def text_value(path: Path, pattern: str, unit: str | None = None, *, group: int | str = 1,
               aliases: Mapping[str, str] | None = None) -> Truth:
    """Group ``group`` of the first match of ``pattern`` (multi-line) in a tool's text output."""
    path = Path(path)
    match = re.search(pattern, path.read_text(), re.MULTILINE)
    where = f"{_rel(path)}:/{pattern}/"
    if not match:
        raise ValueError(f"{where}: the pattern matches nothing")
    return convert(match.group(group), unit, where=f"{where}{group}", aliases=aliases)


def file_value(path: Path, unit: str) -> Truth:
    """A sysfs-style file holding one number (hwmon ``power1_input`` in uW, ``temp1_input`` in mC)."""
    path = Path(path)
    return convert(path.read_text().strip(), unit, where=_rel(path))


def total(*values: Truth) -> Truth:
    """The sum of several readings of one quantity (a chip's memory summed over its cores)."""
    where = " + ".join(v.where for v in values)
    quantities = {v.quantity for v in values}
    if len(quantities) != 1:
        raise ValueError(f"adding {' and '.join(sorted(quantities))}: {where}")
    if all(isinstance(v, TrueInt) for v in values):
        return TrueInt(sum(int(v) for v in values), where, *quantities)
    return TrueFloat(float(sum(Fraction(str(float(v))) for v in values)), where, *quantities)


def times(count: Truth, per: Truth) -> Truth:
    """``count`` ticks of ``per`` each (an energy counter times its resolution)."""
    if count.quantity != "count":
        raise ValueError(f"{count.where} is {count.quantity}, not a count")
    value = Fraction(int(count)) * Fraction(repr(float(per)))
    return _exact(per.quantity, value, f"{count.where} x {per.where}")


def quantity_of(field: str) -> str | None:
    """The quantity a schema field holds by its name (``memory_used_bytes`` -> ``bytes``);
    ``None`` for a rate (``..._bytes_per_second``) or an unlisted field."""
    for suffix, quantity in FIELD_QUANTITIES.items():
        if field.endswith(suffix):
            return quantity
    return None


def _problem(value: Any, quantity: str) -> str | None:
    """Why ``value`` is no reading read from a fixture as ``quantity``, or ``None``."""
    if value is None or (type(value) in (int, float) and value == 0):
        return None
    if not isinstance(value, (TrueInt, TrueFloat)):
        return "typed in, not read from a fixture"
    if value.quantity != quantity:
        return f"{value.quantity} read for {quantity}"
    return None


def undeclared_readings(expected: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The declared bytes/watts/joules/degrees values (process memory included) that were typed
    in rather than read from a fixture: each must be a :class:`TrueInt`/:class:`TrueFloat`,
    ``None`` (an honest null) or ``0`` (nothing held: zero in every unit, no slip to catch)."""
    found = []
    for device_id, values in expected.items():
        for key, want in values.items():
            if key == "processes":
                for pid, memory in want or ():
                    if problem := _problem(memory, "bytes"):
                        found.append(f"{device_id} processes pid {pid}: {memory!r}: {problem}")
            elif (quantity := quantity_of(key)) and (problem := _problem(want, quantity)):
                found.append(f"{device_id} {key}={want!r}: {problem}")
    return found


def fed(value: int | float, unit: str, what: str) -> Truth:
    """A reading the scenario itself feeds a fake library (a process's ``usedGpuMemory`` built
    in the scenario's code, where the fake has no fixture file for it), in ``unit``: the fake
    is given this value and the backend must report it converted, as from a file."""
    return convert(value, unit, where=f"fed by the scenario: {what}")


def difference(whole: Truth, part: Truth) -> Truth:
    """``whole`` less ``part`` (memory in use: the physical size less the free size)."""
    if whole.quantity != part.quantity:
        raise ValueError(f"{whole.where} is {whole.quantity}, {part.where} is {part.quantity}")
    where = f"{whole.where} - {part.where}"
    if isinstance(whole, TrueInt) and isinstance(part, TrueInt):
        return TrueInt(int(whole) - int(part), where, whole.quantity)
    return TrueFloat(float(Fraction(repr(float(whole))) - Fraction(repr(float(part)))), where, whole.quantity)

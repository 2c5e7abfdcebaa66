"""Reading the table ``npu-smi info`` prints.

The table has a title row (``npu-smi 24.1.0   Version: 24.1.0``), a device section and a process
section. The device section's two header rows name the columns of each chip's two rows::

    | NPU   Name          | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
    | Chip                | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
    | 0     910B          | OK            | 70.0        34                0    / 0             |
    | 0                   | 0000:C1:00.0  | 0           1197 / 13553      1365 / 32768         |

Ascend 310/310P tables add a ``Device`` column after ``Chip`` (``Phy-ID`` where an NPU has two
chips) and have no ``HBM-Usage``; a card
with several chips prints one pair of rows per chip, each with the card's NPU id. Cells are
split on ``|`` and white space, with ``used / total`` pairs kept as one token; values are read by
their header's name, so a column added or moved by a newer npu-smi is read where it is. ``NA``
means no value. Sizes are printed in MB, which npu-smi means as MiB (32768 for a 32 GiB HBM).
The process section lists ``NPU Chip | Process id | Process name | Process memory(MB)`` rows,
or ``No running processes found in NPU <n>``. Sources: ``fixtures/ascend/README.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from allsmi.schema import units
from allsmi.backends._common.cells import shorten

_PAIR = re.compile(r"\s*/\s*")
_VERSION = re.compile(r"Version:\s*(\S+)")
#: ``[0-9]``, not ``\d``: that takes other scripts' digits too (as do ``str.isdecimal`` and ``int``).
_NO_PROCESS = re.compile(r"No running processes found in NPU\s+([0-9]+)", re.IGNORECASE)


class NpuSmiOutputError(ValueError):
    """Output that is not an ``npu-smi info`` table."""


@dataclass
class Chip:
    """One chip's two rows, as ``{header: token}``."""

    npu: int
    chip: int
    cells: dict[str, str]


@dataclass
class NpuProcess:
    npu: int
    chip: int
    pid: int
    name: str | None
    memory_mib: str | None


@dataclass
class NpuTable:
    version: str | None = None
    chips: list[Chip] = field(default_factory=list)
    processes: list[NpuProcess] | None = None
    """``None`` when the table has no process section."""
    idle_npus: set[int] = field(default_factory=set)
    """NPUs the tool says run no process."""


def _cells(line: str) -> list[list[str]]:
    """``| a  b | c / d |`` -> ``[["a", "b"], ["c/d"]]``."""
    inner = line.strip().strip("|")
    return [_PAIR.sub("/", cell).split() for cell in inner.split("|")]


def _is_row(line: str) -> bool:
    text = line.strip()
    return text.startswith("|") and text.endswith("|")


def parse_info(text: str, tool: str, warnings: list[str]) -> NpuTable:
    """The chips and processes of ``npu-smi info``; raises :class:`NpuSmiOutputError` for text
    that has no device header (garbage, an error page, a cut-off table)."""
    lines = [line for line in text.splitlines() if line.strip()]
    table = NpuTable()
    head1 = head2 = None
    for n, line in enumerate(lines):
        if table.version is None and (found := _VERSION.search(line)):
            table.version = found.group(1)
        if _is_row(line) and "Health" in line and head1 is None:
            head1 = n
        elif head1 is not None and head2 is None and _is_row(line) and "Bus-Id" in line:
            head2 = n
            break
    if head1 is None or head2 is None:
        raise NpuSmiOutputError(f"{tool} printed no device table: {shorten(text)!r}")
    names1 = [name for cell in _cells(lines[head1]) for name in cell]
    names2 = [name for cell in _cells(lines[head2]) for name in cell]
    rows = [line for line in lines[head2 + 1:]]
    section = 0
    rows_seen = 0
    pending: list[str] | None = None
    for line in rows:
        if not _is_row(line):
            if line.strip().startswith("+") and pending is not None:
                warnings.append(f"{tool}: a chip row without its second row skipped: {shorten(pending)!r}")
                pending = None
            continue
        if "Process id" in line:
            section = 1
            table.processes = []
            continue
        if section == 0:
            tokens = [t for cell in _cells(line) for t in cell]
            if pending is None:
                pending = tokens
                continue
            chip = _chip(pending, tokens, names1, names2, tool, warnings)
            rows_seen += 1
            pending = None
            if chip is not None:
                table.chips.append(chip)
        else:
            _process_row(line, table, tool, warnings)
    if pending is not None:
        raise NpuSmiOutputError(f"{tool} printed a table that stops inside a chip's rows "
                                f"(cut off?): {shorten(' '.join(pending))!r}")
    if rows_seen and not table.chips:
        raise NpuSmiOutputError(f"{tool} printed {rows_seen} chip(s), none readable (see the warnings)")
    if table.processes is None:
        # Every npu-smi prints its process section after the chips, even with no process.
        raise NpuSmiOutputError(f"{tool} printed no process section: the table is cut off after "
                                f"{len(table.chips)} chip(s)")
    return table


def _chip(first: list[str], second: list[str], names1: list[str], names2: list[str], tool: str,
          warnings: list[str]) -> Chip | None:
    if len(first) != len(names1) or len(second) != len(names2):
        warnings.append(f"{tool}: a chip's rows do not match the header ({len(first)}/{len(names1)} "
                        f"and {len(second)}/{len(names2)} cells): {shorten(' '.join(first + second))!r}; skipped")
        return None
    cells = dict(zip(names1, first)) | dict(zip(names2, second))
    npu, chip = units.to_int(cells.get("NPU")), units.to_int(cells.get("Chip"))
    if npu is None or chip is None:
        warnings.append(f"{tool}: a chip row without NPU and chip numbers: "
                        f"{shorten(' '.join(first + second))!r}; skipped")
        return None
    return Chip(npu, chip, cells)


def _process_row(line: str, table: NpuTable, tool: str, warnings: list[str]) -> None:
    none = _NO_PROCESS.search(line)
    if none:
        table.idle_npus.add(int(none.group(1)))
        return
    cells = _cells(line)
    if len(cells) < 3 or len(cells[0]) != 2:
        warnings.append(f"{tool}: unreadable process row {shorten(line)!r}; skipped")
        return
    (npu, chip), pid = [units.to_int(n) for n in cells[0]], units.to_int("".join(cells[1]), minimum=1)
    if npu is None or chip is None or pid is None:
        warnings.append(f"{tool}: unreadable process row {shorten(line)!r}; skipped")
        return
    name = " ".join(cells[2]) or None
    memory = "".join(cells[3]) if len(cells) > 3 else None
    table.processes = table.processes if table.processes is not None else []
    table.processes.append(NpuProcess(npu, chip, pid, name, memory or None))

"""Intel Gaudi (Gaudi 1, 2 and 3) through ``hl-smi``.

Values come from ``hl-smi -Q <fields> -f csv,noheader,nounits``. By default
one long-running ``hl-smi ... -l <interval>`` child prints a block of rows per
interval, cut into frames by :class:`allsmi.backends.gaudi.csv_output.FrameAssembler`;
``options={"mode": "oneshot"}`` runs the tool once per :meth:`GaudiBackend.sample`
instead, and loop mode falls back to it by itself when the installed hl-smi
cannot loop. The field set is negotiated once at :meth:`GaudiBackend.open`,
because hl-smi fails the whole query on one field it does not know.

Firmware versions come from ``hl-smi -L`` (once, at open) and processes from
the table view (each sample, only with ``options={"processes": True}``), since
``-Q`` has fields for neither. See ``docs/backends/gaudi.md``.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from allsmi.backend_api import BackendError, BackendTimeout
from allsmi.backends._common.activity import COUNTER_ONLY_FIELDS
from allsmi.backends.gaudi.loop import LoopMode
from allsmi.backends.gaudi import DECLARATION, EXECUTABLE, TOOL
from allsmi.backends.gaudi.samples import MAX_LINE_WARNINGS, Identity, SampleBuilder
# probe() only looks for hl-smi: the CSV and text parsers, the loop reader and the tool runner
# are imported by open() and sample(), once there is a tool (tests/test_layers.py checks it).
from allsmi.backends._common.clibackend import CliToolBackend
from allsmi.schema import DeviceSample, ProcessSample

if TYPE_CHECKING:
    from allsmi.backends.gaudi.csv_output import Frame, FrameAssembler, Row
    from allsmi.backends.gaudi.text_output import ListedDevice
    from allsmi.backends._common.stream import LineStream
    from allsmi.backends._common.runner import ToolResult
    from allsmi.backends._common.cells import SaidOnce

FORMAT = "csv,noheader,nounits"

#: How hl-smi rejects a query field it does not know ("invalid query field", "unknown field").
_QUERY_REJECTED = r"field|query|invalid|unknown|unrecogni[sz]ed|not (supported|recognized)"


class GaudiBackend(LoopMode, SampleBuilder, CliToolBackend, declared=DECLARATION):
    """Intel Gaudi accelerators read through ``hl-smi`` (see the module docstring)."""

    tool_spec = TOOL
    #: hl-smi's query fields have neither an energy counter nor a fan.
    unreported_fields = frozenset({"energy_joules", "fan_percent"}) | COUNTER_ONLY_FIELDS

    def __init__(self, *, timeout_seconds: float = 5.0,
                 options: Mapping[str, Any] | None = None,
                 tool_path: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 restart_backoff: tuple[float, float] = (0.5, 30.0)) -> None:
        """``tool_path`` skips the search for hl-smi; ``clock`` and
        ``restart_backoff`` (initial, maximum seconds) exist for tests."""
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._tool_path_override = tool_path
        self._clock = clock
        self._backoff = restart_backoff
        self._tool: str | None = None
        self._fields: tuple[str, ...] = ()
        self.mode: str = "loop"
        """``loop`` or ``oneshot``: how data is read now (loop may have fallen back)."""
        self.interval: float = DECLARATION.option("interval_seconds").default  # type: ignore[assignment]
        self._want_firmware = True
        self._want_processes = False
        self._lock = threading.Lock()
        self._assembler: FrameAssembler | None = None
        self._stream: LineStream | None = None
        self._first_frame = threading.Event()
        self._loop_unusable: str | None = None
        self._issues: collections.deque[str] = collections.deque(maxlen=50)
        self._notes: list[str] = []
        self._known: dict[str, Identity] = {}
        self._firmware: dict[str, str] = {}
        self._said: SaidOnce | None = None  # made by open(): the cell readers load with the parsers
        self._seed: Frame | None = None
        self._generation = 0
        self._opened = False
        self._last_crash: str | None = None
        self.missing_fields: tuple[str, ...] = ()
        """Query fields this hl-smi rejected at :meth:`open`: always ``None`` in samples."""

    # -- contract ------------------------------------------------------------

    @property
    def fields(self) -> tuple[str, ...]:
        """The ``-Q`` fields in use, as negotiated at :meth:`open`."""
        return self._fields

    @property
    def stream(self) -> LineStream | None:
        """The loop-mode child reader, while loop mode runs."""
        return self._stream

    def locate_tool(self) -> str | None:
        if self._tool_path_override:
            path = self._tool_path_override
            return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
        return super().locate_tool()

    def probe_details(self, path: str) -> dict[str, str]:
        if not self._opened:
            return {}
        # what open() learned about this hl-smi
        return {"mode": self.mode, "fields_missing": ", ".join(self.missing_fields) or "none"}

    def open(self) -> None:
        """Find hl-smi, negotiate the field set, read firmware, start loop mode."""
        self.close()  # a second open() must not leave the first loop child running
        from allsmi.backends.gaudi import csv_output as csvfmt
        from allsmi.backends.gaudi.csv_output import Frame
        self._read_options()
        from allsmi.backends._common.cells import SaidOnce
        self._said = SaidOnce()  # a reopened backend says each refused value again, once
        self._tool = self.require_tool()
        self._fields, result = self._negotiate_fields()
        rows, problems = csvfmt.parse_output(result.stdout, self._fields,
                                             last_line_complete=not result.truncated)
        if not rows and result.stdout.strip():
            raise BackendError(f"{EXECUTABLE} printed no usable rows: {problems[0] if problems else ''}")
        self._notes.extend(problems[:MAX_LINE_WARNINGS])
        self._seed = Frame(rows=tuple(rows), closed_at=self._clock(), complete=True)
        self._remember(self._seed)
        if self._want_firmware and rows:
            self._read_firmware()  # also keeps devices -L lists without a -Q row (degraded)
        self._opened = True
        if self.mode == "loop" and rows:
            self._start_loop(frozenset(r.key for r in rows))

    def sample(self) -> Sequence[DeviceSample]:
        """One sample per known device; degraded with values dropped when its data are stale."""
        self.warnings = []
        if not self._opened:
            raise BackendError("gaudi backend used before open()")
        if self.mode == "loop" and self._loop_unusable is not None:
            self._fall_back_to_oneshot(self._loop_unusable)
        if self._notes:
            self.warnings.extend(self._notes)
            self._notes = []
        if not self._known and self._seed is not None and not self._seed.rows:
            return []  # hl-smi lists no devices
        if self.mode == "oneshot":
            frame = self._run_oneshot()
            stale_for = None
        else:
            frame, stale_for = self._loop_frame()
        self._remember(frame)
        devices = self._build(frame, stale_for)
        if self._want_processes and stale_for is None:
            return self._attach_processes(devices)
        # Without the table view we do not know who uses a device: unknown, not "nobody".
        return [replace(dev, processes=None) for dev in devices]

    def close(self) -> None:
        """Stop the loop child (killed and reaped) and its reader thread. Idempotent."""
        self._opened = False  # sample() now raises until open() again
        self._stop_loop()

    # -- options and field negotiation --------------------------------------

    def _read_options(self) -> None:
        known = {option.name for option in self.declared_options or ()}
        unknown = sorted(set(self.options) - known)
        if unknown:  # a backend built in code: a config file with them is refused when read
            self._notes.append(f"unknown gaudi options ignored: {', '.join(unknown)}")
        self.mode = self.option("mode")
        self.interval = self.option("interval_seconds")
        self._want_firmware = self.option("firmware")
        self._want_processes = self.option("processes")

    def _query_argv(self, fields: Sequence[str]) -> list[str]:
        assert self._tool is not None
        return [self._tool, "-Q", ",".join(fields), "-f", FORMAT]

    def _run(self, argv: Sequence[str]) -> ToolResult:
        """Run hl-smi; any exit status comes back (callers decide), a signal is an error."""
        from allsmi.backends._common.runner import ToolError, ToolTimeout
        tool = self.tool(argv[0])
        try:
            result = tool.run(*argv[1:], ok_codes=range(0, 256))
        except ToolTimeout as exc:
            raise BackendTimeout(f"{exc} (timed out; the child was killed)") from exc
        except ToolError as exc:
            raise BackendError(str(exc)) from exc
        return result

    def _negotiate_fields(self) -> tuple[tuple[str, ...], ToolResult]:
        """The widest field set this hl-smi accepts, and the output of that query.

        An unknown field fails the whole query ("invalid query field"), so: ask
        for everything; when the tool rejects the query, drop the fields its
        message names (``driver_version`` included; one identity field must
        stay), else, when it names none, ask for each field alone; ask again. A failure that is not about the query (a crash, no
        driver) is an error at once. Rejected fields are :attr:`missing_fields`:
        ``None`` in every sample, and named in the first sample's message.
        """
        import re

        from allsmi.backends.gaudi import csv_output as csvfmt
        from allsmi.backends._common.runner import ToolFailed
        fields = list(csvfmt.ALL_FIELDS)
        probed = False
        while True:
            result = self._run(self._query_argv(fields))
            if result.returncode == 0:
                self.missing_fields = tuple(f for f in csvfmt.ALL_FIELDS if f not in fields)
                if self.missing_fields:
                    self._notes.append(f"this {EXECUTABLE} does not know the field(s) "
                                       f"{', '.join(self.missing_fields)}; reported as unknown")
                return tuple(fields), result
            message = _tool_message(result)
            if not re.search(_QUERY_REJECTED, message, re.IGNORECASE):
                # Not a complaint about the query (a crash, no driver): fail now, do not retry.
                raise BackendError(str(ToolFailed(f"{EXECUTABLE} -Q", result)))
            named = csvfmt.named_fields(message, fields)
            left = [f for f in fields if f not in named]
            if named and any(f in csvfmt.KEY_FIELDS for f in left):
                fields = left
            elif not probed:
                probed = True
                fields = [f for f in csvfmt.ALL_FIELDS if self._accepts(f)]
                if not any(f in csvfmt.KEY_FIELDS for f in fields):
                    raise BackendError(str(ToolFailed(f"{EXECUTABLE} -Q", result)) +
                                       " (it accepts none of index, bus_id, uuid)")
            else:
                raise BackendError(str(ToolFailed(f"{EXECUTABLE} -Q", result)))

    def _accepts(self, field: str) -> bool:
        """Whether this hl-smi accepts ``field`` (queried alone)."""
        return self._run(self._query_argv([field])).returncode == 0

    def _read_firmware(self) -> None:
        """Firmware versions from ``hl-smi -L``; optional, so a failure is only a warning."""
        from allsmi.backends.gaudi.text_output import parse_listing
        assert self._tool is not None
        try:
            result = self._run([self._tool, "-L"])
        except BackendError as exc:
            self._notes.append(f"firmware versions unavailable: {exc}")
            return
        listed: list[ListedDevice] = parse_listing(result.stdout) if result.returncode == 0 else []
        if not listed:
            from allsmi.backends._common.runner import describe_exit, first_line
            said = first_line(result.stderr) or (first_line(result.stdout) if result.returncode else "")
            self._notes.append(f"firmware versions unavailable: {EXECUTABLE} -L "
                               f"{describe_exit(result.returncode)} and printed no device blocks"
                               + (f": {said}" if said else ""))
        self._remember_listed(listed)
        for dev in listed:
            if dev.firmware_spi:
                self._firmware[f"bus:{dev.bus_id.lower()}"] = dev.firmware_spi
                if dev.uuid:
                    self._firmware[f"uuid:{dev.uuid}"] = dev.firmware_spi

    # -- one-shot mode ---------------------------------------------------------

    def _run_oneshot(self) -> Frame:
        from allsmi.backends.gaudi import csv_output as csvfmt
        from allsmi.backends.gaudi.csv_output import Frame
        from allsmi.backends._common.runner import ToolFailed
        result = self._run(self._query_argv(self._fields))
        if result.returncode != 0:
            raise BackendError(str(ToolFailed(f"{EXECUTABLE} -Q", result)))
        rows, problems = csvfmt.parse_output(result.stdout, self._fields,
                                             last_line_complete=not result.truncated)
        self._add_line_warnings(problems)
        if not rows and result.stdout.strip():
            raise BackendError(f"{EXECUTABLE} printed no usable rows: {problems[0] if problems else ''}")
        unique: dict[str, Row] = {}
        for row in rows:
            if row.key in unique:
                self.warnings.append(f"{EXECUTABLE} printed {row.key} twice; kept the first row")
                continue
            unique[row.key] = row
        return Frame(rows=tuple(unique.values()), closed_at=self._clock(),
                     complete=set(unique) >= set(self._known))

    # -- building samples ------------------------------------------------------

    def _attach_processes(self, devices: list[DeviceSample]) -> list[DeviceSample]:
        """Processes from the table view; a failure there is a warning, not an error."""
        from allsmi.backends.gaudi.text_output import parse_processes
        from allsmi.backends._common.runner import ToolFailed
        assert self._tool is not None
        try:
            result = self._run([self._tool])
        except BackendError as exc:
            self.warnings.append(f"processes unavailable: {exc}")
            return [replace(dev, processes=None) for dev in devices]
        if result.returncode != 0:
            self.warnings.append(f"processes unavailable: {ToolFailed(EXECUTABLE, result)}")
            return [replace(dev, processes=None) for dev in devices]
        refused: list[str] = []
        by_index: dict[int, list[ProcessSample]] = parse_processes(result.stdout, refused)
        for warning in refused[:MAX_LINE_WARNINGS]:
            line = f"{EXECUTABLE} table view: {warning}"
            if self._said is None:
                self.warnings.append(line)
            else:
                self._said.say(self.warnings, ("", "processes", warning), line)
        from allsmi.backends._common.orphans import note_unmatched
        note_unmatched(by_index, {dev.index for dev in devices}, self.warnings, f"{EXECUTABLE} (AIP)",
                       {aip: len(rows) for aip, rows in by_index.items()})
        return [replace(dev, processes=tuple(by_index.get(dev.index, ())))
                if dev.index is not None and dev.health == "ok" else replace(dev, processes=None)
                for dev in devices]


def _tool_message(result: ToolResult) -> str:
    """The tool's own words (stderr, else stdout), on one line."""
    text = result.stderr.strip() or result.stdout.strip() or "no output"
    return " ".join(text.split())[:300]

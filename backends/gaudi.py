"""Intel Gaudi (Gaudi 1, 2 and 3) through ``hl-smi``.

Values come from ``hl-smi -Q <fields> -f csv,noheader,nounits``. By default
one long-running ``hl-smi ... -l <interval>`` child prints a block of rows per
interval, cut into frames by :class:`allsmi.backends._gaudi_csv.FrameAssembler`;
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
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from allsmi import units
from allsmi.backend_api import Backend, BackendError, BackendTimeout, BackendUnavailable, ProbeResult
from allsmi.backends import _gaudi_csv as csvfmt
from allsmi.backends._gaudi_csv import Frame, FrameAssembler, Row
from allsmi.backends._gaudi_text import ListedDevice, parse_listing, parse_processes
from allsmi.backends._stream import LineStream, StreamExit
from allsmi.backends._subprocess import ToolError, ToolResult, ToolTimeout, describe_missing, find_tool, run_tool
from allsmi.schema import DeviceSample, ProcessSample

EXECUTABLE = "hl-smi"
ENV_VAR = "ALLSMI_HL_SMI"
#: Where Habana/Intel packages install hl-smi when it is not on PATH.
INSTALL_DIRS: tuple[str, ...] = ("/usr/bin", "/usr/local/bin", "/opt/habanalabs/bin",
                                 "/opt/habanalabs/qual/bin")
FORMAT = "csv,noheader,nounits"

MODES = ("loop", "oneshot")
DEFAULT_INTERVAL = 2.0
#: A device whose newest row is older than this many intervals is degraded.
STALE_INTERVALS = 3.0
#: Cap on per-line warnings in one sample, so a flood of garbage stays readable.
MAX_LINE_WARNINGS = 10
KNOWN_OPTIONS = frozenset({"mode", "interval_seconds", "firmware", "processes"})


@dataclass(frozen=True)
class _Identity:
    """The stable facts of one device, kept across frames."""

    key: str
    id: str
    index: int | None
    uuid: str | None
    bus_id: str | None
    name: str | None
    driver_version: str | None


def _text(row: Row, name: str) -> str | None:
    value = row.get(name)
    return value.strip() if value and value.strip() else None


class GaudiBackend(Backend):
    """Intel Gaudi accelerators read through ``hl-smi`` (see the module docstring)."""

    name = "gaudi"
    vendor = "intel"
    kind = "gpu"

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
        self.interval: float = DEFAULT_INTERVAL
        self._want_firmware = True
        self._want_processes = False
        self._lock = threading.Lock()
        self._assembler: FrameAssembler | None = None
        self._stream: LineStream | None = None
        self._first_frame = threading.Event()
        self._loop_unusable: str | None = None
        self._issues: collections.deque[str] = collections.deque(maxlen=50)
        self._notes: list[str] = []
        self._known: dict[str, _Identity] = {}
        self._firmware: dict[str, str] = {}
        self._seed: Frame | None = None
        self._generation = 0
        self._opened = False

    # -- contract ------------------------------------------------------------

    @property
    def fields(self) -> tuple[str, ...]:
        """The ``-Q`` fields in use, as negotiated at :meth:`open`."""
        return self._fields

    @property
    def stream(self) -> LineStream | None:
        """The loop-mode child reader, while loop mode runs."""
        return self._stream

    def _find(self) -> str | None:
        if self._tool_path_override:
            path = self._tool_path_override
            return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
        return find_tool(EXECUTABLE, ENV_VAR, INSTALL_DIRS)

    def probe(self) -> ProbeResult:
        """hl-smi present or not; runs nothing."""
        try:
            path = self._find()
        except Exception as exc:  # noqa: BLE001 - probe never raises
            return ProbeResult(False, f"cannot look for {EXECUTABLE}: {exc}")
        if path is None:
            return ProbeResult(False, describe_missing(EXECUTABLE, ENV_VAR))
        return ProbeResult(True, details={"tool": path})

    def open(self) -> None:
        """Find hl-smi, negotiate the field set, read firmware, start loop mode."""
        self.close()  # a second open() must not leave the first loop child running
        self._read_options()
        self._tool = self._find()
        if self._tool is None:
            raise BackendUnavailable(describe_missing(EXECUTABLE, ENV_VAR))
        self._fields, result = self._negotiate_fields()
        rows, problems = csvfmt.parse_output(result.stdout, self._fields,
                                             last_line_complete=not result.truncated)
        if not rows and result.stdout.strip():
            raise BackendError(f"{EXECUTABLE} printed no usable rows: {problems[0] if problems else ''}")
        self._notes.extend(problems[:MAX_LINE_WARNINGS])
        if self._want_firmware and rows:
            self._read_firmware()
        self._seed = Frame(rows=tuple(rows), closed_at=self._clock(), complete=True)
        self._remember(self._seed)
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
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    # -- options and field negotiation --------------------------------------

    def _read_options(self) -> None:
        opts = dict(self.options)
        unknown = sorted(set(opts) - KNOWN_OPTIONS)
        if unknown:
            self._notes.append(f"unknown gaudi options ignored: {', '.join(unknown)}")
        mode = str(opts.get("mode", "loop")).strip().lower()
        if mode not in MODES:
            raise BackendError(f"gaudi option mode={opts.get('mode')!r}: expected one of {', '.join(MODES)}")
        interval = units.to_float(opts.get("interval_seconds", DEFAULT_INTERVAL))
        if interval is None or not 0 < interval <= 3600:
            raise BackendError(f"gaudi option interval_seconds={opts.get('interval_seconds')!r}: "
                               "expected a number of seconds above 0")
        self.mode = mode
        self.interval = interval
        self._want_firmware = bool(opts.get("firmware", True))
        self._want_processes = bool(opts.get("processes", False))

    def _query_argv(self, fields: Sequence[str]) -> list[str]:
        assert self._tool is not None
        return [self._tool, "-Q", ",".join(fields), "-f", FORMAT]

    def _run(self, argv: Sequence[str]) -> ToolResult:
        try:
            return run_tool(argv, timeout=self.timeout_seconds)
        except ToolTimeout as exc:
            raise BackendTimeout(f"{exc} (timed out; the child was killed)") from exc
        except ToolError as exc:
            raise BackendError(str(exc)) from exc

    def _negotiate_fields(self) -> tuple[tuple[str, ...], ToolResult]:
        """The widest field set this hl-smi accepts, and the output of that query.

        An unknown field fails the whole query, so: ask for everything; on a
        failure drop the optional fields the error names (or all optional
        fields if it names none) and ask again; fail if the core set fails.
        """
        fields = list(csvfmt.ALL_FIELDS)
        while True:
            result = self._run(self._query_argv(fields))
            if result.returncode == 0:
                return tuple(fields), result
            message = _tool_message(result)
            optional = [f for f in fields if f in csvfmt.OPTIONAL_FIELDS]
            if not optional:
                raise BackendError(f"{EXECUTABLE} -Q failed with status {result.returncode}: {message}")
            drop = csvfmt.named_fields(message, optional) or optional
            fields = [f for f in fields if f not in drop]

    def _read_firmware(self) -> None:
        """Firmware versions from ``hl-smi -L``; optional, so a failure is only a warning."""
        assert self._tool is not None
        try:
            result = self._run([self._tool, "-L"])
        except BackendError as exc:
            self._notes.append(f"firmware versions unavailable: {exc}")
            return
        listed: list[ListedDevice] = parse_listing(result.stdout) if result.returncode == 0 else []
        if not listed:
            self._notes.append(f"firmware versions unavailable: {EXECUTABLE} -L gave "
                               f"status {result.returncode} and no device blocks")
        for dev in listed:
            if dev.firmware_spi:
                self._firmware[f"bus:{dev.bus_id.lower()}"] = dev.firmware_spi
                if dev.uuid:
                    self._firmware[f"uuid:{dev.uuid}"] = dev.firmware_spi

    # -- loop mode -----------------------------------------------------------

    def _start_loop(self, expected: frozenset[str]) -> None:
        self._first_frame = threading.Event()
        self._loop_unusable = None
        self._assembler = FrameAssembler(idle_close=self.interval / 2, clock=self._clock,
                                         expected=expected)
        argv = self._query_argv(self._fields) + ["-l", f"{self.interval:g}"]
        stream = LineStream(
            argv, on_line=self._on_line, on_start=self._on_start, on_exit=self._on_exit,
            idle_timeout=STALE_INTERVALS * self.interval + self.timeout_seconds,
            backoff_initial=self._backoff[0], backoff_max=self._backoff[1],
            name="allsmi-gaudi-hl-smi")
        self._stream = stream
        stream.start()
        deadline = time.monotonic() + self.timeout_seconds + self.interval
        while not self._first_frame.wait(0.02):
            if self._loop_unusable is not None or time.monotonic() > deadline:
                break
        if not self._first_frame.is_set() and self._loop_unusable is None:
            self._loop_unusable = (f"{EXECUTABLE} -l printed no complete frame within "
                                   f"{self.timeout_seconds + self.interval:g} s")
        if self._loop_unusable is not None:
            self._fall_back_to_oneshot(self._loop_unusable)

    def _fall_back_to_oneshot(self, why: str) -> None:
        self.close()
        self.mode = "oneshot"
        self._loop_unusable = None
        self._notes.append(f"loop mode unusable ({why}); running {EXECUTABLE} once per sample")

    def _on_start(self, generation: int) -> None:
        with self._lock:
            assert self._assembler is not None
            self._assembler.discard_partial()
        self._generation = generation

    def _on_line(self, line: str) -> None:
        parsed = csvfmt.parse_line(line, self._fields)
        if isinstance(parsed, str):
            if parsed != "empty line":
                self._issues.append(f"{EXECUTABLE} -l: {parsed}: {csvfmt.shorten(line)!r}; skipped")
            return
        with self._lock:
            assert self._assembler is not None
            self._assembler.add(parsed, self._generation)
            if self._assembler.frames:
                self._first_frame.set()

    def _on_exit(self, info: StreamExit) -> bool:
        with self._lock:
            assert self._assembler is not None
            dropped = self._assembler.discard_partial()
        what = info.describe(f"{EXECUTABLE} -l")
        if info.generation == 1 and (not self._first_frame.is_set() or info.returncode == 0):
            # The very first child either never produced a frame (option
            # rejected, tool too old) or ended by itself (ignores -l): a loop
            # restarted forever would only hide that.
            self._loop_unusable = what
            return False
        if dropped:
            what += f"; dropped its unfinished frame of {dropped} row(s)"
        self._issues.append(what + "; restarting with back-off")
        return True

    def _loop_frame(self) -> tuple[Frame, float | None]:
        """The newest frame, and its age when that is past the staleness limit."""
        with self._lock:
            assert self._assembler is not None
            frame = self._assembler.poll() or self._seed
            issues = list(self._issues)
            self._issues.clear()
        assert frame is not None
        self._add_line_warnings(issues)
        age = self._clock() - frame.closed_at
        limit = STALE_INTERVALS * self.interval
        if age <= limit:
            return frame, None
        stream = self._stream
        state = ""
        if stream is not None and stream.next_start_at is not None:
            state = f"; next restart in {max(0.0, stream.next_start_at - time.monotonic()):.1f} s"
        self.warnings.append(f"no fresh {EXECUTABLE} data for {age:.1f} s (limit {limit:g} s); "
                             f"devices reported degraded without values{state}")
        return frame, age

    # -- one-shot mode ---------------------------------------------------------

    def _run_oneshot(self) -> Frame:
        result = self._run(self._query_argv(self._fields))
        if result.returncode != 0:
            raise BackendError(f"{EXECUTABLE} exited with status {result.returncode}: {_tool_message(result)}")
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

    def _add_line_warnings(self, problems: Sequence[str]) -> None:
        self.warnings.extend(problems[:MAX_LINE_WARNINGS])
        if len(problems) > MAX_LINE_WARNINGS:
            self.warnings.append(f"... and {len(problems) - MAX_LINE_WARNINGS} more bad lines")

    def _remember(self, frame: Frame) -> None:
        """Add devices seen for the first time; a known device keeps its id."""
        for row in frame.rows:
            if row.key in self._known:
                continue
            index = units.to_int(row.get("index"))
            uuid, bus_id = _text(row, "uuid"), _text(row, "bus_id")
            device_id = uuid or (f"gaudi:{bus_id}" if bus_id else f"gaudi:index{index}")
            self._known[row.key] = _Identity(
                key=row.key, id=device_id, index=index, uuid=uuid, bus_id=bus_id,
                name=_text(row, "name"), driver_version=_text(row, "driver_version"))

    def _firmware_for(self, ident: _Identity) -> str | None:
        if ident.uuid and f"uuid:{ident.uuid}" in self._firmware:
            return self._firmware[f"uuid:{ident.uuid}"]
        if ident.bus_id:
            return self._firmware.get(f"bus:{ident.bus_id.lower()}")
        return None

    def _build(self, frame: Frame, stale_for: float | None) -> list[DeviceSample]:
        rows = {row.key: row for row in frame.rows}
        ordered = sorted(self._known.values(),
                         key=lambda i: (i.index is None, i.index if i.index is not None else 0, i.key))
        devices = []
        for ident in ordered:
            row = None if stale_for is not None else rows.get(ident.key)
            if row is None:
                if stale_for is None:
                    self.warnings.append(f"{ident.id}: no row in the last {EXECUTABLE} output; "
                                         "reported degraded without values")
                devices.append(self._identity_sample(ident, health="degraded"))
            else:
                devices.append(self._row_sample(ident, row))
        return devices

    def _identity_sample(self, ident: _Identity, health: str) -> DeviceSample:
        return DeviceSample(
            id=ident.id, vendor=self.vendor, kind=self.kind, backend=self.name,
            index=ident.index, uuid=ident.uuid, name=ident.name, bus_id=ident.bus_id,
            driver_version=ident.driver_version, firmware_version=self._firmware_for(ident),
            health=health)

    def _number(self, ident: _Identity, row: Row, field: str,
                parse: Callable[[str], float | int | None]) -> Any:
        raw = row.get(field)
        if raw is None:
            return None
        value = parse(raw)
        if value is None:
            self.warnings.append(f"{ident.id}: unreadable {field} value {csvfmt.shorten(raw, 40)!r}")
        return value

    def _row_sample(self, ident: _Identity, row: Row) -> DeviceSample:
        num = self._number
        details: dict[str, Any] = {}
        clock_max = num(ident, row, "clocks.max.soc", units.parse_clock_mhz)
        if clock_max is not None:
            details["clock_max_soc_mhz"] = clock_max
        for field, key in (("module_id", "module_id"),
                           ("ecc.errors.uncorrected.aggregate.total", "ecc_uncorrected_total"),
                           ("ecc.errors.corrected.aggregate.total", "ecc_corrected_total")):
            value = num(ident, row, field, units.to_int)
            if value is not None:
                details[key] = value
        serial = _text(row, "serial")
        if serial:
            details["serial"] = serial
        base = self._identity_sample(ident, health="ok")
        return replace(
            base,
            name=_text(row, "name") or ident.name,
            driver_version=_text(row, "driver_version") or ident.driver_version,
            utilization_percent=num(ident, row, "utilization.aip", units.parse_percent),
            memory_used_bytes=num(ident, row, "memory.used",
                                  lambda v: units.parse_size_bytes(v, default_unit="mib")),
            memory_total_bytes=num(ident, row, "memory.total",
                                   lambda v: units.parse_size_bytes(v, default_unit="mib")),
            temperature_celsius=num(ident, row, "temperature.aip", units.parse_temperature_celsius),
            power_watts=num(ident, row, "power.draw", units.parse_power_watts),
            power_limit_watts=num(ident, row, "power.max", units.parse_power_watts),
            clock_mhz=num(ident, row, "clocks.current.soc", units.parse_clock_mhz),
            details=details)

    def _attach_processes(self, devices: list[DeviceSample]) -> list[DeviceSample]:
        """Processes from the table view; a failure there is a warning, not an error."""
        assert self._tool is not None
        try:
            result = self._run([self._tool])
        except BackendError as exc:
            self.warnings.append(f"processes unavailable: {exc}")
            return [replace(dev, processes=None) for dev in devices]
        if result.returncode != 0:
            self.warnings.append(f"processes unavailable: {EXECUTABLE} exited with status "
                                 f"{result.returncode}: {_tool_message(result)}")
            return [replace(dev, processes=None) for dev in devices]
        by_index: dict[int, list[ProcessSample]] = parse_processes(result.stdout)
        return [replace(dev, processes=tuple(by_index.get(dev.index, ())))
                if dev.index is not None and dev.health == "ok" else replace(dev, processes=None)
                for dev in devices]


def _tool_message(result: ToolResult) -> str:
    """The tool's own words (stderr, else stdout), on one line."""
    text = result.stderr.strip() or result.stdout.strip() or "no output"
    return " ".join(text.split())[:300]

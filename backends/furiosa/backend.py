"""FuriosaAI RNGD backend: the ``furiosa_smi`` SDK when importable, else ``furiosa-smi``.

Data sources, in order of preference (``options["method"]`` = ``auto``,
``sdk`` or ``cli`` narrows them):

1. The Python SDK, imported lazily: ``furiosa_smi`` (2026.4.0+) then
   ``furiosa_smi_py`` (up to 2026.1.x). See :mod:`.sdk`.
2. The CLI: ``furiosa-smi info|status --format json`` each sample, found
   through ``ALLSMI_FURIOSA_SMI``, ``PATH`` or the vendor's install dirs.

Processes always come from ``furiosa-smi ps --format json`` when the tool is
present (the SDK has no process list); users are looked up with psutil.

Device ids are the ``device_uuid`` (else ``furiosa:<serial>``, else
``furiosa:<bdf>``), never the ``npuN`` label, which moves across boots.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from allsmi.backend_api import BackendError, BackendUnavailable, ProbeResult
# Only what probe() needs is imported with the backend: the SDK check and the tool search.
# The parsers and the tool runner are imported by open() and sample(), once there is a tool
# or an SDK to read (tests/test_layers.py checks that a machine without either loads neither).
from allsmi.backends._common.activity import COUNTER_ONLY_FIELDS
from allsmi.backends._common.clibackend import CliToolBackend
from allsmi.backends._common.owners import process_user
from allsmi.backends.furiosa import DECLARATION, TOOL, look, method_of
from allsmi.schema import DeviceSample, ProcessSample

from . import sdk

if TYPE_CHECKING:
    from allsmi.backends._common.vanished import MissingDevices
    from . import parse
    from allsmi.backends._common.cells import SaidOnce
    from allsmi.backends._common.runner import ToolResult

#: JSON output flag: RNGD tools take ``--format``; Warboy-era tools took ``--output``.
JSON_FLAGS: tuple[str, ...] = ("--format", "--output")

#: What furiosa-smi prints when the host has no NPU (the whole output, one line).
_NO_DEVICE = r"^(error:\s*)?(no (npu )?devices?( found| available)?|device not found)\W*$"
#: How clap (the tool's argument parser) rejects a flag it does not know.
_FLAG_REJECTED = r"unexpected argument|unrecognized|unknown (option|argument)|Found argument"
_NPU_INDEX = r"^npu([0-9]+)\Z"  # not \d: it takes digits of other scripts too


def _rejected_flag(result: ToolResult, flag: str) -> bool:
    """True when the tool refused ``flag`` itself (an older or newer CLI), not when it crashed."""
    import re  # compiled patterns are cached by re: cheap after the first sample
    said = result.stderr + result.stdout
    return (result.returncode == 2 and bool(re.search(_FLAG_REJECTED, said, re.IGNORECASE))
            and flag.lstrip("-") in said)


class FuriosaBackend(CliToolBackend, declared=DECLARATION):
    """FuriosaAI RNGD NPUs."""

    tool_spec = TOOL
    #: No energy counter or fan; a power limit only if a tool version prints one (none does).
    unreported_fields = frozenset({"energy_joules", "fan_percent", "power_limit_watts"}) \
        | COUNTER_ONLY_FIELDS

    @classmethod
    def model_name(cls, raw: str | None) -> str | None:
        """furiosa-smi's product (``RNGD``, ``WARBOY``) with the vendor in front: ``Furiosa RNGD``."""
        product = (raw or "").strip()
        if not product:
            return None
        return product if product.lower().startswith("furiosa") else f"Furiosa {product}"

    def __init__(self, *, timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None,
                 user_lookup: Callable[[int], str | None] = process_user) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._method = method_of(self.options)
        self._want_processes = True  # the options, checked at open
        self._user_lookup = user_lookup
        self._sdk: sdk.SdkAdapter | None = None
        self._tool: str | None = None
        self._missing: MissingDevices | None = None  # made by open()
        self._json_flag: str | None = None
        self._driver_version: str | None = None
        self._source = ""
        #: Refused values of the CLI's output already warned about since open().
        self._said: SaidOnce | None = None

    # -- life cycle -------------------------------------------------------

    def probe(self) -> ProbeResult:
        """Available when an SDK is importable or furiosa-smi is found (as ``method`` allows);
        imports nothing of the SDK and runs nothing."""
        return look(self._method, self.locate_tool)

    def open(self) -> None:
        self._method, self._want_processes = self.option("method"), self.option("processes")
        self._tool = self.locate_tool()
        self._said = None  # a new open() warns again
        from allsmi.backends._common.vanished import MissingDevices
        self._missing = MissingDevices("furiosa-smi")
        sdk_problem = ""
        reasons: list[str] = []
        if self._method != "cli":
            try:
                adapter, reasons = sdk.load_sdk()
            except sdk.SdkInitError as exc:
                adapter, reasons = None, [str(exc)]
                sdk_problem = str(exc)
            if adapter is not None:
                self._sdk = adapter
                self._source = adapter.generation
                self._driver_version = adapter.driver_version([])
                return
            if self._method == "sdk":
                raise (BackendError if sdk_problem else BackendUnavailable)(
                    "Furiosa SDK unavailable: " + "; ".join(reasons))
        if self._tool is None:
            missing = self.missing_reason()
            if sdk_problem:
                raise BackendError(f"{sdk_problem}; and {missing}")
            # An SDK that is installed but will not import (missing native library) is worth saying.
            broken = [r for r in reasons if "ModuleNotFoundError" not in r] if self._method != "cli" else []
            raise BackendUnavailable("; ".join([missing] + broken))
        self._source = "furiosa-smi"

    def close(self) -> None:
        """Forget the data source; :meth:`sample` raises until :meth:`open` again."""
        self._sdk = None
        self._tool = None
        self._source = ""

    # -- sampling ---------------------------------------------------------

    def sample(self) -> Sequence[DeviceSample]:
        self.warnings = []
        deadline = time.monotonic() + self.timeout_seconds
        if self._sdk is not None:
            try:
                readings = self._sdk.read(self.warnings)
            except sdk.SdkInitError as exc:
                raise BackendError(str(exc)) from exc
            if self._driver_version is None and readings:
                self._driver_version = self._sdk.driver_version(self.warnings)
            processes = self._read_processes(deadline) if readings and self._lists_processes() else None
        elif self._tool is not None:
            readings, processes = self._read_cli(deadline)
        else:
            raise BackendError("furiosa backend used before open()")
        if processes:
            from allsmi.backends._common.orphans import note_unmatched
            note_unmatched(processes, {r.dev_name or "" for r in readings}, self.warnings, "furiosa-smi ps",
                           {label: len(rows) for label, rows in processes.items()})
        samples = [self._to_sample(r, None if processes is None else processes.get(r.dev_name or "", []))
                   for r in readings]
        # a device that dropped out of the list is degraded, not silently gone
        return self._missing.complete(samples, self.warnings) if self._missing else samples

    def _run_json(self, subcommand: str, deadline: float) -> Any:
        """Run ``furiosa-smi SUB --format json`` and decode it; ``None`` means "no devices".

        Any failure raises a :class:`ToolError` naming the exit status or signal
        and the tool's first stderr line. ``None`` only when the tool itself says
        there is no device (see :func:`says_no_devices`). The JSON flag is
        learned once: ``--format`` (RNGD tools), else ``--output`` (Warboy era),
        tried only when the tool rejects ``--format`` as an argument.
        """
        import re

        from . import parse
        from allsmi.backends._common.runner import ToolError, ToolFailed, says_no_devices
        assert self._tool is not None
        tool = self.tool(self._tool)
        flags = (self._json_flag,) if self._json_flag else JSON_FLAGS
        first: ToolError | None = None
        for flag in flags:
            args = (subcommand, flag, "json")
            try:
                result = tool.run(*args, timeout=deadline - time.monotonic(), ok_codes=(0, 1))
            except ToolFailed as exc:
                first = first or exc
                if _rejected_flag(exc.result, flag):
                    continue
                raise
            if says_no_devices(result, re.compile(_NO_DEVICE, re.IGNORECASE)):
                self._json_flag = flag
                return None
            if result.returncode != 0:
                failure: ToolError = ToolFailed(tool.command(args), result)
                if _rejected_flag(result, flag):
                    first = first or failure
                    continue
                raise failure
            data = tool.parse(result, lambda text: parse.load_json(text, tool.command(args),
                                                                  self.warnings))
            self._json_flag = flag
            return data
        assert first is not None
        raise first

    def _said_once(self) -> SaidOnce:
        """What this open() has warned about the tool's values (made on first use)."""
        if self._said is None:
            from allsmi.backends._common.cells import SaidOnce
            self._said = SaidOnce()
        return self._said

    def _lists_processes(self) -> bool:
        return self._want_processes and self._tool is not None

    def _read_cli(self, deadline: float
                  ) -> tuple[list[parse.FuriosaReading], dict[str, list[parse.ProcessRow]] | None]:
        """``info``, then ``status`` and ``ps`` at once: the readings and the processes per
        device label (``None``: not listed, so unknown)."""
        from . import parse
        from allsmi.backends._common.runner import ToolError, ToolTimeout, run_concurrently
        try:
            info = self._run_json("info", deadline)
        except ToolTimeout as exc:
            raise BackendError(f"{exc} (the tool was killed)") from exc
        except ToolError as exc:
            raise BackendError(str(exc)) from exc
        if info is None:
            return [], None
        try:
            readings, warnings = parse.parse_info(info)
        except ValueError as exc:
            raise BackendError(f"unusable furiosa-smi info output: {exc}") from exc
        self.warnings.extend(warnings)
        if not readings:
            if warnings:
                raise BackendError("furiosa-smi info: no usable device rows (" + "; ".join(warnings[:3]) + ")")
            return [], None
        calls = {"status": lambda: self._run_json("status", deadline)}
        if self._lists_processes():
            calls["ps"] = lambda: self._run_json("ps", deadline)
        answers = run_concurrently(calls)
        statuses: dict[str, parse.StatusRow] = {}
        status_data = _answer(answers["status"])
        if isinstance(status_data, Exception):
            self.warnings.append(f"furiosa-smi status unavailable, no utilization/memory this sample: "
                                 f"{status_data}")
        elif status_data is not None:
            try:
                statuses, warnings = parse.parse_status(status_data, self._said_once())
                self.warnings.extend(warnings)
            except ValueError as exc:
                self.warnings.append(f"furiosa-smi status unavailable, no utilization/memory this "
                                     f"sample: {exc}")
        for reading in readings:
            status = statuses.get(reading.dev_name or "")
            if status is None and statuses:
                # listed by info but missing from status: a device missing from this sample
                self.warnings.append(f"{reading.dev_name}: no furiosa-smi status row; degraded")
                reading.unread = True
            parse.apply_status(reading, status)
        return readings, self._processes_from(_answer(answers["ps"])) if "ps" in answers else None

    def _read_processes(self, deadline: float) -> dict[str, list[parse.ProcessRow]] | None:
        try:
            data = self._run_json("ps", deadline)
        except Exception as exc:  # noqa: BLE001 - sorted by _answer, as in _read_cli
            data = _answer(exc)
        return self._processes_from(data)

    def _processes_from(self, data: Any) -> dict[str, list[parse.ProcessRow]] | None:
        """``ps`` output (or why there is none) as rows per device label; ``None``: unknown."""
        from . import parse
        if isinstance(data, Exception):
            self.warnings.append(f"furiosa-smi ps unavailable, no processes this sample: {data}")
            return None
        if data is None:
            return None
        try:
            found, warnings = parse.parse_ps(data, self._said_once())
        except ValueError as exc:
            self.warnings.append(f"furiosa-smi ps unavailable, no processes this sample: {exc}")
            return None
        self.warnings.extend(warnings)
        return found

    # -- normalisation ----------------------------------------------------

    def _processes(self, rows: list[parse.ProcessRow]) -> tuple[ProcessSample, ...]:
        from . import parse
        merged: dict[int, parse.ProcessRow] = {}
        for row in rows:
            seen = merged.get(row.pid)
            if seen is None:
                merged[row.pid] = row
            else:
                # Warboy-era ps lists one row per core range: the process total is the sum, and
                # unknown where a row's memory is (a sum of the others would understate it).
                total = None if row.memory_bytes is None or seen.memory_bytes is None \
                    else row.memory_bytes + seen.memory_bytes
                merged[row.pid] = parse.ProcessRow(row.pid, seen.command or row.command, total)
        return tuple(ProcessSample(pid=r.pid, user=self._user_lookup(r.pid), command=r.command,
                                   memory_bytes=r.memory_bytes)
                     for r in sorted(merged.values(), key=lambda r: r.pid))

    def _to_sample(self, r: parse.FuriosaReading, procs: list[parse.ProcessRow] | None) -> DeviceSample:
        if r.uuid:
            dev_id = r.uuid
        elif r.serial:
            dev_id = f"furiosa:{r.serial}"
        else:
            dev_id = f"furiosa:{r.bus_id}"
        import re
        index = None
        match = re.match(_NPU_INDEX, r.dev_name or "")
        if match:
            index = int(match.group(1))
        cores = r.core_utilization
        # A mean over the PEs that reported is not the device's (the busy PE may be the silent
        # one): unknown unless every PE reported, as compute_active_percent.
        whole = bool(cores) and all(c is not None for c in cores)
        details: dict[str, Any] = {"source": self._source}
        for key, value in (("serial", r.serial), ("arch", r.arch), ("dev_name", r.dev_name),
                           ("pert_version", r.pert), ("governor", r.governor),
                           ("throttle_reason", r.throttle_reason),
                           ("ambient_temperature_celsius", r.ambient_celsius)):
            if value is not None:
                details[key] = value
        details.update(r.extra)
        if cores is not None:
            details["core_utilization_percent"] = cores
        arch = (r.arch or "").upper()
        product = r.product_name or arch or "NPU"
        name = self.model_name(product)
        common = dict(id=dev_id, vendor=self.vendor, kind=self.kind, backend=self.name, index=index,
                      uuid=r.uuid, name=name, bus_id=r.bus_id, driver_version=self._driver_version,
                      firmware_version=r.firmware, details=details)
        if r.alive is False:
            # A dead device's last numbers are not measurements: report none.
            for key in ("core_utilization_percent", "ambient_temperature_celsius", "throttle_reason"):
                details.pop(key, None)
            return DeviceSample(**common, health="lost", processes=None)  # unknown, not none
        from allsmi.backends._common.activity import mean_of_units
        from allsmi.backends._common.cells import CellReader
        cells = CellReader(dev_id, self.warnings)  # physically impossible values are garbage
        return DeviceSample(
            **common,
            # each PE's busy share, averaged over the PEs (all of them, or unknown)
            **mean_of_units(cores, "pe_busy"),
            health="degraded" if r.unread else "ok" if r.alive else "unknown",
            utilization_percent=sum(cores) / len(cores) if whole else None,
            memory_used_bytes=r.memory_used_bytes,
            memory_total_bytes=r.memory_total_bytes,
            temperature_celsius=cells.plausible(r.temperature_celsius, "temperature", "temperature_celsius"),
            power_watts=cells.plausible(r.power_watts, "power", "power_watts"),
            # 0 W is no limit at all
            power_limit_watts=cells.plausible(r.power_limit_watts, "power limit", "power_limit_watts",
                                              minimum=1.0),
            clock_mhz=cells.plausible(r.clock_mhz, "clock", "clock_mhz"),
            processes=None if procs is None else self._processes(procs),
        )


def _answer(outcome: Any) -> Any:
    """A tool call's outcome as :meth:`FuriosaBackend._read_cli` sorts it: an expected failure
    (the tool failed, its output unusable) is returned to become a warning; anything else is a
    bug and raised."""
    from allsmi.backends._common.runner import ToolError
    if isinstance(outcome, Exception) and not isinstance(outcome, (ToolError, ValueError)):
        raise outcome
    return outcome

"""Rebellions ATOM, ATOM+ and ATOM Max NPUs through ``rbln-smi -j`` (or ``rbln-stat -j``).

``rbln-smi`` replaced ``rbln-stat`` in the RBLN driver package (SDK 0.10);
older installs have only ``rbln-stat``, which prints the same JSON. The tool is
found through ``ALLSMI_RBLN_SMI`` (full path of either executable), then
``rbln-smi`` and ``rbln-stat`` on PATH or in the vendor's install
directories. One tool run per sample reads devices and processes together.
Parsing and the multi-die (ATOM Max) model live in
:mod:`allsmi.backends.rebellions.parse`; see ``docs/backends/rebellions.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

# probe() only looks for the tool: the parsers and the tool runner are imported by open() and
# sample(), once there is one (tests/test_layers.py checks that a machine without it loads neither).
from allsmi.backends._common.activity import COUNTER_ONLY_FIELDS
from allsmi.backends._common.clibackend import CliToolBackend
from allsmi.backends._common.owners import process_user
from allsmi.backends.rebellions import DECLARATION, ENV_VAR, TOOL
from allsmi.schema import DeviceSample

if TYPE_CHECKING:
    from allsmi.backends._common.vanished import MissingDevices
    from allsmi.backends._common.cells import SaidOnce
    from allsmi.backends.rebellions.processes import LookupNodes, LookupUser

#: ``-j`` is accepted by both executables (``--json`` is its long form).
JSON_ARGS: tuple[str, ...] = ("-j",)


def rbln_nodes_opened_by(pid: int) -> frozenset[str] | None:
    """:func:`allsmi.backends.rebellions.processes.rbln_nodes_opened_by`, imported on first use."""
    from allsmi.backends.rebellions.processes import rbln_nodes_opened_by as lookup
    return lookup(pid)


class RebellionsBackend(CliToolBackend, declared=DECLARATION):
    """Rebellions NPUs via the vendor's ``rbln-smi``/``rbln-stat`` JSON output."""

    tool_spec = TOOL
    #: Not in the JSON; a power limit only if a tool version prints one (none does).
    unreported_fields = frozenset({"clock_mhz", "energy_joules", "fan_percent",
                                   "power_limit_watts"}) | COUNTER_ONLY_FIELDS

    def __init__(self, *, timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None,
                 search_dirs: Sequence[str] = TOOL.install_dirs,
                 lookup_user: LookupUser = process_user,
                 lookup_nodes: LookupNodes = rbln_nodes_opened_by) -> None:
        """``search_dirs``, ``lookup_user`` and ``lookup_nodes`` exist for tests;
        the defaults read the real install directories and ``/proc``."""
        super().__init__(timeout_seconds=timeout_seconds, options=options, search_dirs=search_dirs)
        self._lookup_user = lookup_user
        self._lookup_nodes = lookup_nodes
        self._tool: str | None = None
        self._missing: MissingDevices | None = None  # made by open()
        #: Refused values of the tool's output already warned about since open().
        self._said: SaidOnce | None = None

    @property
    def tool_path(self) -> str | None:
        """The executable :meth:`open` settled on (``rbln-smi`` or ``rbln-stat``), or ``None``.

        Deliberately not part of :attr:`display_name`: devices and status keep
        one backend name whichever tool a host has.
        """
        return self._tool

    def probe_details(self, path: str) -> dict[str, str]:
        return {"env_var": ENV_VAR}

    def open(self) -> None:
        """Find the tool and check that it prints a usable report."""
        self._tool = self.require_tool()
        self._read_report([])
        from allsmi.backends._common.cells import SaidOnce
        from allsmi.backends._common.vanished import MissingDevices
        self._said = SaidOnce()
        self._missing = MissingDevices(self.tool_spec.executable)

    def sample(self) -> Sequence[DeviceSample]:
        """One tool run: every readable device row, cards before their dies."""
        from allsmi.backends.rebellions.parse import build_samples
        self.warnings = []
        if self._tool is None:
            self.open()
        report = self._read_report(self.warnings)
        samples = build_samples(report, backend=self.display_name, vendor=self.vendor, kind=self.kind,
                                lookup_user=self._lookup_user, lookup_nodes=self._lookup_nodes,
                                warnings=self.warnings, said=self._said)
        # a device that dropped out of the tool's output is degraded, not silently gone
        return self._missing.complete(samples, self.warnings) if self._missing else samples

    def close(self) -> None:
        """Nothing is held between runs; the tool is reaped after every call."""
        return None

    def _read_report(self, warnings: list[str]) -> dict[str, Any]:
        """The tool's report; any failure of the run (status, signal, timeout, cap, output) raises."""
        from allsmi.backends.rebellions.parse import load_report
        from allsmi.backends._common.runner import backend_errors
        assert self._tool is not None
        tool = self.tool(self._tool)
        with backend_errors():
            result = tool.run(*JSON_ARGS)
            report, notes = tool.parse(result, lambda text: load_report(text, tool.command(JSON_ARGS)))
        warnings.extend(notes)
        return report

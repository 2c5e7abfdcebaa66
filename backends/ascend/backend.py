"""Huawei Ascend NPUs through ``npu-smi info`` (one run per sample: every chip and its processes).

The table is read by its header's column names (:mod:`allsmi.backends.ascend.parse`), so the
Ascend 310/310P layout (a ``Device`` column, no HBM) and the 910 layout (``HBM-Usage``) are both
read, and a value printed as ``NA`` is unknown. See ``docs/backends/ascend.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from allsmi.backends._common.clibackend import CliToolBackend
from allsmi.backends._common.owners import process_user
from allsmi.backends.ascend import DECLARATION, TOOL
from allsmi.backends._common.declared import BEYOND_BUSY
from allsmi.schema import DeviceSample

if TYPE_CHECKING:
    from allsmi.backends._common.vanished import MissingDevices
    from allsmi.backends.ascend.samples import LookupUser

INFO_ARGS: tuple[str, ...] = ("info",)


class AscendBackend(CliToolBackend, declared=DECLARATION):
    """Ascend chips via the ``npu-smi info`` table."""

    tool_spec = TOOL
    #: The table has no clock, fan, energy counter or power limit.
    unreported_fields = frozenset({"clock_mhz", "fan_percent", "energy_joules", "power_limit_watts"}) | BEYOND_BUSY

    def __init__(self, *, timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None,
                 search_dirs: Sequence[str] | None = None,
                 lookup_user: LookupUser = process_user) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options, search_dirs=search_dirs)
        self._lookup_user = lookup_user
        self._tool: str | None = None
        self._missing: MissingDevices | None = None  # made by open()

    @classmethod
    def model_name(cls, raw: str | None) -> str | None:
        """``910B`` -> ``Ascend 910B`` (idempotent)."""
        text = " ".join((raw or "").split())
        if not text:
            return None
        if text.lower().startswith("ascend"):
            rest = text[len("ascend"):].strip()
            return f"Ascend {rest}" if rest else "Ascend"
        return f"Ascend {text}"

    def open(self) -> None:
        """Find ``npu-smi`` and check that it prints a table."""
        self._tool = self.require_tool()
        self._read([])
        from allsmi.backends._common.vanished import MissingDevices
        self._missing = MissingDevices(self.tool_spec.executable)

    def sample(self) -> Sequence[DeviceSample]:
        from allsmi.backends.ascend.samples import build_samples
        self.warnings = []
        if self._tool is None:
            self.open()
        table = self._read(self.warnings)
        if table.version:
            self.tool_version = table.version
        samples = build_samples(table, backend=self.display_name, vendor=self.vendor, kind=self.kind,
                                model_name=self.model_name, lookup_user=self._lookup_user,
                                warnings=self.warnings, source=self.compute_active_source)
        # a chip that dropped out of the table is degraded, not silently gone
        return self._missing.complete(samples, self.warnings) if self._missing else samples

    def close(self) -> None:
        """Nothing is held between runs."""
        self._tool = None

    def _read(self, warnings: list[str]) -> Any:
        from allsmi.backends._common.runner import backend_errors
        from allsmi.backends.ascend.parse import parse_info
        assert self._tool is not None
        tool = self.tool(self._tool)
        with backend_errors():
            result = tool.run(*INFO_ARGS)
            return tool.parse(result, lambda text: parse_info(text, tool.command(INFO_ARGS), warnings))

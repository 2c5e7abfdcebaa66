"""AWS Trainium and Inferentia through two tools of the aws-neuronx-tools package.

``neuron-ls --json-output`` runs once per sample (devices, their NeuronCores and memory, the
processes using each device); ``neuron-monitor`` runs as one long-running child (started by
``open()``, kept until ``close()``) printing a JSON report per period, of which the newest is
read (:class:`~allsmi.backends._common.reports.NewestReport`: restarted with back-off when it
dies; a hung, crashing or garbage-printing monitor is the backend's error, never 0 %).
Without ``neuron-monitor`` the devices are still listed, with utilization and memory in use
unknown and a warning. See ``docs/backends/neuron.md``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from allsmi.backend_api import BackendError
from allsmi.backends._common.clibackend import CliToolBackend
from allsmi.backends._common.owners import process_user
from allsmi.backends.neuron import DECLARATION, MONITOR, TOOL
from allsmi.backends._common.declared import BEYOND_BUSY
from allsmi.schema import DeviceSample

if TYPE_CHECKING:
    from allsmi.backends._common.vanished import MissingDevices
    from allsmi.backends._common.reports import NewestReport
    from allsmi.backends.neuron.parse import MonitorReport, NeuronDevice
    from allsmi.backends.neuron.samples import LookupUser

LS_ARGS: tuple[str, ...] = ("--json-output",)
#: A report older than this many periods (plus the timeout) is stale.
STALE_PERIODS = 3.0
#: The longest ``neuron-monitor`` report line read (a longer one is dropped and is the backend's
#: error, never a silent gap). Sized for the largest instances (trn2.48xlarge: 16 devices x 8
#: NeuronCores; trn1.32xlarge: 16 x 2): one application per core is 128 entries of about 0.7 KiB
#: each with their counters and per-core memory, and each entry's ``loaded_models`` adds about
#: 0.5 KiB per model; 16 models per core make about 1.1 MiB. 4 MiB leaves room for more than
#: three times that, and bounds what one line can hold in memory.
MAX_REPORT_BYTES = 4 * 1024 * 1024


class NeuronBackend(CliToolBackend, declared=DECLARATION):
    """Neuron devices via ``neuron-ls`` and a running ``neuron-monitor``."""

    tool_spec = TOOL
    extra_tools = (MONITOR,)
    #: Neither tool reports power, energy, temperature, clocks or fans.
    unreported_fields = frozenset({"temperature_celsius", "power_watts", "power_limit_watts",
                                   "energy_joules", "clock_mhz", "fan_percent"}) | BEYOND_BUSY

    def __init__(self, *, timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None,
                 search_dirs: Sequence[str] | None = None,
                 lookup_user: LookupUser = process_user) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options, search_dirs=search_dirs)
        self._lookup_user = lookup_user
        self._ls: str | None = None
        self._missing: MissingDevices | None = None  # made by open()
        self._monitor: NewestReport[MonitorReport] | None = None
        self._monitor_note: str | None = None
        self._config_dir: str | None = None
        self.period: float = DECLARATION.option("monitor_period_seconds").default  # type: ignore[assignment]

    @classmethod
    def model_name(cls, raw: str | None) -> str | None:
        """``trainium2`` -> ``AWS Trainium2`` (idempotent)."""
        text = (raw or "").strip()
        if not text:
            return None
        if text.lower().startswith("aws "):
            return text
        return f"AWS {text[:1].upper()}{text[1:]}"

    def open(self) -> None:
        """Find ``neuron-ls`` (required) and list the devices once; start ``neuron-monitor``."""
        self.period = self.option("monitor_period_seconds")
        self.close()
        self._ls = self.require_tool()
        self._list([])
        from allsmi.backends._common.vanished import MissingDevices
        self._missing = MissingDevices(self.tool_spec.executable)
        monitor = self.locate_extra(MONITOR)
        if monitor is None:
            self._monitor_note = (f"{MONITOR.missing(self.search_dirs)}: NeuronCore utilization "
                                  f"and memory in use not reported")
            return
        self._monitor_note = None
        self._monitor = self._start_monitor(monitor)

    def sample(self) -> Sequence[DeviceSample]:
        """``neuron-ls`` now, and the newest ``neuron-monitor`` report."""
        from allsmi.backends.neuron.samples import build_samples
        self.warnings = []
        if self._ls is None:
            self.open()
        devices = self._list(self.warnings)
        report = None
        if self._monitor is not None:
            report = self._monitor.newest(self.warnings)
            self.warnings.extend(report.errors)
        elif self._monitor_note:
            self.warnings.append(self._monitor_note)
        samples = build_samples(devices, report, backend=self.display_name, vendor=self.vendor,
                                kind=self.kind, model_name=self.model_name,
                                lookup_user=self._lookup_user, source=self.compute_active_source,
                                warnings=self.warnings)
        # a device that dropped out of neuron-ls is degraded, not silently gone
        return self._missing.complete(samples, self.warnings) if self._missing else samples

    def close(self) -> None:
        """Stop ``neuron-monitor`` (its process group killed and reaped) and remove its
        configuration file; idempotent."""
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.close()
        config, self._config_dir = self._config_dir, None
        if config is not None:
            import shutil
            shutil.rmtree(config, ignore_errors=True)
        self._ls = None

    def _list(self, warnings: list[str]) -> list[NeuronDevice]:
        from allsmi.backends._common.runner import backend_errors
        from allsmi.backends.neuron.parse import load_devices
        assert self._ls is not None
        tool = self.tool(self._ls)
        with backend_errors():
            result = tool.run(*LS_ARGS)
            return tool.parse(result, lambda text: load_devices(text, tool.command(LS_ARGS), warnings))

    def _start_monitor(self, path: str) -> NewestReport[MonitorReport]:
        """``neuron-monitor -c CONFIG`` with the two application groups and the hardware
        counters at ``self.period`` (an owner-only file in a private directory)."""
        import json
        import tempfile

        from allsmi.backends._common.reports import NewestReport
        from allsmi.backends.neuron.parse import parse_monitor
        self._config_dir = tempfile.mkdtemp(prefix="allsmi-neuron-")
        config = os.path.join(self._config_dir, "monitor.json")
        settings = {"period": f"{self.period:g}s",
                    "neuron_runtimes": [{"tag_filter": ".*", "metrics": [
                        {"type": "neuroncore_counters"}, {"type": "memory_used"}]}],
                    "system_metrics": [{"type": "neuron_hw_counters"}]}
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(settings, handle)
        monitor: NewestReport[MonitorReport] = NewestReport(
            [path, "-c", config], parse_monitor, label="neuron-monitor",
            first_report_timeout=self.timeout_seconds, max_line_bytes=MAX_REPORT_BYTES,
            stale_after=STALE_PERIODS * self.period + self.timeout_seconds)
        try:
            monitor.start()
        except Exception as exc:  # noqa: BLE001 - a thread that cannot start is the backend's error
            raise BackendError(f"cannot start neuron-monitor: {exc}") from exc
        return monitor

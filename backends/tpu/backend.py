"""Google Cloud TPUs: the chips from sysfs, their HBM and TensorCore duty cycle from libtpu's
runtime metrics gRPC service (``[backends.tpu] metrics_address``, ``localhost:8431``).

The service lives inside the TPU workload (libtpu serves it), so on an idle host the chips are
listed with unknown values and health, and a note saying no workload serves metrics; a service
that answers slowly is a timeout, one that fails an error, never 0 %. The duty cycle is the
share of time the TensorCores ran (``compute_active_source`` ``engine_time``). libtpu reports
no power, temperature or clocks. See ``docs/backends/tpu.md``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from allsmi.backend_api import Backend, ProbeResult
from allsmi.backends.tpu import DECLARATION, DEFAULT_ADDRESS, pci_root, quick_probe
from allsmi.backends._common.declared import BEYOND_BUSY
from allsmi.schema import DeviceSample

if TYPE_CHECKING:
    from allsmi.backends.tpu.chips import Chip
    from allsmi.backends.tpu.client import MetricsClient


class TpuBackend(Backend, declared=DECLARATION):
    """TPU chips via sysfs and libtpu's runtime metrics service."""

    unreported_fields = frozenset({"temperature_celsius", "power_watts", "power_limit_watts",
                                   "energy_joules", "clock_mhz", "fan_percent"}) | BEYOND_BUSY

    def __init__(self, *, timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self.pci = pci_root(self.options)
        self.address = str(self.options.get("metrics_address", DEFAULT_ADDRESS))  # checked at open
        self._client: MetricsClient | None = None

    @classmethod
    def model_name(cls, raw: str | None) -> str | None:
        """``v5e`` -> ``Google TPU v5e``, ``7x`` -> ``Google TPU7x`` (idempotent)."""
        text = (raw or "").strip()
        if not text or text.lower().startswith("google"):
            return text or None
        return f"Google TPU{'' if text[:1].isdigit() else ' '}{text}"

    def quick_probe(self) -> ProbeResult | None:
        return quick_probe(self.options)

    def probe(self) -> ProbeResult:
        absent = quick_probe(self.options)
        return absent if absent is not None else ProbeResult(
            True, "", {"pci": self.pci, "metrics_address": self.address})

    def open(self) -> None:
        from allsmi.backends.tpu.client import MetricsClient
        self.check_options()
        self.close()
        self._client = MetricsClient(self.address, self.timeout_seconds)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def sample(self) -> Sequence[DeviceSample]:
        from allsmi.backends.tpu.chips import find_chips
        self.warnings = []
        if self._client is None:
            self.open()
        assert self._client is not None
        chips = find_chips(self.pci)
        if not chips:
            return []
        metrics = self._metrics()
        return [self._chip(chip, len(chips), metrics) for chip in chips]

    def _metrics(self) -> dict[str, dict[int, Any]] | None:
        """Each metric asked once under one deadline for the whole sample. A metric the service
        refuses (or has no time left for) is unknown with a warning while the others are kept;
        when none answers, the first failure is the sample's (an idle host: ``None``)."""
        from allsmi.backend_api import BackendError
        from allsmi.backends.tpu.client import DUTY, TOTAL, USAGE, ServiceUnavailable
        assert self._client is not None
        deadline = time.monotonic() + self.timeout_seconds
        metrics: dict[str, dict[int, Any]] = {}
        failures: list[Exception] = []
        for name in (TOTAL, USAGE, DUTY):
            try:
                metrics[name] = self._client.metric(name, self.warnings, deadline)
            except ServiceUnavailable as exc:  # no workload (any more): asking on is pointless
                failures.append(exc)
                break
            except BackendError as exc:
                failures.append(exc)
        if not metrics:
            if isinstance(failures[0], ServiceUnavailable):
                self.warnings.append(str(failures[0]))
                return None
            raise failures[0]
        for exc in failures:
            self.warnings.append(f"{exc}; reported as unknown")
        for name in (TOTAL, USAGE, DUTY):
            metrics.setdefault(name, {})
        return metrics

    def _chip(self, chip: Chip, count: int, metrics: dict[str, dict[int, Any]] | None) -> DeviceSample:
        from allsmi.backends.tpu.client import DUTY, TOTAL, USAGE
        per = chip.generation.devices_per_chip
        devices = range(chip.index * per, chip.index * per + per)
        label = f"TPU chip {chip.index}"
        total = used = None
        duty = None
        if metrics is not None:
            total = self._bytes(metrics[TOTAL], devices, f"{label} HBM total")
            used = self._bytes(metrics[USAGE], devices, f"{label} HBM in use")
            if used is not None and total is not None and used > total:
                self.warnings.append(f"{label}: HBM in use {used} above its total {total}; reported as unknown")
                used = None
            duty = self._duty(metrics[DUTY], chip.index, devices, count, label)
        return DeviceSample(
            id=f"tpu:{chip.bus_id}", vendor=self.vendor, kind=self.kind, backend=self.display_name,
            index=chip.index, name=self.model_name(chip.generation.name), bus_id=chip.bus_id,
            health="ok" if metrics is not None else "unknown", utilization_percent=duty,
            compute_active_percent=duty, compute_active_source=self.compute_active_source if duty is not None else None,
            memory_used_bytes=used, memory_total_bytes=total if total else None,
            processes=None, details={"device_node": chip.node, "generation": chip.generation.name})

    def _bytes(self, values: dict[int, Any], devices: range, what: str) -> int | None:
        found = [values.get(d) for d in devices]
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in found):
            if any(v is not None for v in found):
                self.warnings.append(f"{what}: unusable values {found}; reported as unknown")
            return None
        return sum(found)  # type: ignore[arg-type]

    def _duty(self, values: dict[int, Any], chip: int, devices: range, chips: int, label: str) -> float | None:
        """The chip's duty cycle: per chip where the service gives one value per chip, else the
        mean of its devices'."""
        if len(devices) > 1 and len(values) == chips:
            found = [values.get(chip)]
        else:
            found = [values.get(d) for d in devices]
        if not found or any(not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 100
                            for v in found):
            if any(v is not None for v in found):
                self.warnings.append(f"{label}: unusable duty cycle {found}; reported as unknown")
            return None
        return float(sum(found)) / len(found)

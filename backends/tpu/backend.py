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
    from allsmi.backends._common.cells import SaidOnce
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
        self._refused: list[str] = []
        """This sample's refused values (said once: see :meth:`_say_refused`)."""
        self._said: SaidOnce | None = None  # made by open()
        self._known: dict[str, Chip] = {}
        """Each chip listed since open, by id: the number it had while every chip was listed."""

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
        from allsmi.backends._common.cells import SaidOnce
        self._said = SaidOnce()  # a reopened backend says each refused value again, once
        self._known = {}
        self._client = MetricsClient(self.address, self.timeout_seconds)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def sample(self) -> Sequence[DeviceSample]:
        from allsmi.backends.tpu.chips import find_chips
        self.warnings = []
        self._refused = []
        if self._client is None:
            self.open()
        assert self._client is not None
        layout = find_chips(self.pci)
        if layout.problem:  # said every sample, as long as it lasts: the status shows why
            self.warnings.append(layout.problem)
        chips, gone = self._stable(layout.chips)
        if not chips and not gone:
            return []
        metrics = self._metrics() if chips else None
        self._fit((*chips, *gone), metrics)  # a missing chip's libtpu ids are still its own
        devices = [self._chip(chip, metrics) for chip in chips] + [self._gone(chip, chips) for chip in gone]
        self._say_refused()
        return devices

    def _stable(self, listed: Sequence[Chip]) -> tuple[tuple[Chip, ...], list[Chip]]:
        """The chips to report, and those listed before that sysfs no longer lists (a chip that
        fell off the bus reads vendor ``0xffff`` or leaves sysfs): never silently gone. While
        only chips are missing, the others keep the index and libtpu devices they had (libtpu
        numbered them when the workload started; a renumbered chip would take another chip's
        ``google.com/tpu`` index and values); a metric whose ids then fit no chip is still
        refused by :meth:`_fit`. Chips that appear anew are numbered as sysfs lists them."""
        present = {f"tpu:{chip.bus_id}": chip for chip in listed}
        gone = [chip for key, chip in self._known.items() if key not in present]
        if gone and present.keys() <= self._known.keys():
            return tuple(chip for key, chip in self._known.items() if key in present), gone
        self._known = {f"tpu:{chip.bus_id}": chip for chip in gone} | present
        return tuple(listed), gone

    def _gone(self, chip: Chip, listed: Sequence[Chip]) -> DeviceSample:
        """A chip listed before and missing now: ``degraded`` without values, named in a warning."""
        self.warnings.append(f"tpu:{chip.bus_id}: listed in sysfs before but missing now (fallen off "
                             "the bus?); reported degraded without values")
        taken = {c.index for c in listed}
        return DeviceSample(
            id=f"tpu:{chip.bus_id}", vendor=self.vendor, kind=self.kind, backend=self.display_name,
            index=None if chip.index in taken else chip.index,
            name=self.model_name(chip.generation.name), bus_id=chip.bus_id, health="degraded",
            processes=None, details={"device_node": chip.node, "generation": chip.generation.name})

    def _say_refused(self) -> None:
        """Add this sample's refused values to the warnings, each said once while open (the
        same value refused again next sample is not repeated; a layout problem or a failing
        service is said every sample, as long as it lasts)."""
        for warning in self._refused:
            if self._said is None:
                self.warnings.append(warning)
            else:
                self._said.say(self.warnings, (warning,), warning)

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
                metrics[name] = self._client.metric(name, self._refused, deadline)
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

    def _fit(self, chips: Sequence[Chip], metrics: dict[str, dict[int, Any]] | None) -> None:
        """Drop, with a warning, a metric whose answer names a libtpu id that no chip has (a
        layout other than the one assumed): its values would land on the wrong chips, so it is
        unknown on every chip instead. HBM is per device; the duty cycle is per device too,
        except where the generation gives it per chip (v2, v3: keyed by chip position)."""
        from allsmi.backends.tpu.client import DUTY, TOTAL, USAGE
        if metrics is None:
            return
        for name in (TOTAL, USAGE, DUTY):
            expected = {key for chip in chips for key in self._keys(chip, name == DUTY)}
            stray = sorted(set(metrics[name]) - expected)
            if stray and expected:
                layout = "chip" if name == DUTY and chips[0].generation.duty_per_chip else "device"
                self.warnings.append(
                    f"{name}: libtpu id(s) {stray[:8]} that no chip has ({len(chips)} "
                    f"{chips[0].generation.name} chip(s), one value per {layout}: ids "
                    f"{min(expected)} to {max(expected)}); reported as unknown on every chip")
                metrics[name] = {}

    @staticmethod
    def _keys(chip: Chip, duty: bool) -> tuple[int, ...]:
        """The libtpu ids of ``chip``'s values: its devices, or its position for a duty cycle
        given per chip; none where the layout leaves them ambiguous."""
        if chip.devices is None:
            return ()
        return (chip.index,) if duty and chip.generation.duty_per_chip else chip.devices

    def _chip(self, chip: Chip, metrics: dict[str, dict[int, Any]] | None) -> DeviceSample:
        from allsmi.backends.tpu.client import DUTY, TOTAL, USAGE
        label = f"TPU chip {chip.index}"
        total = used = None
        duty = None
        if metrics is not None and chip.devices is not None:
            total = self._bytes(metrics[TOTAL], chip.devices, f"{label} HBM total")
            used = self._bytes(metrics[USAGE], chip.devices, f"{label} HBM in use")
            if used is not None and total is not None and used > total:
                self._refused.append(f"{label}: HBM in use {used} above its total {total}; reported as unknown")
                used = None
            duty = self._duty([metrics[DUTY].get(k) for k in self._keys(chip, True)], label)
        details: dict[str, Any] = {"device_node": chip.node, "generation": chip.generation.name}
        if len(chip.functions) > 1:
            details["pci_functions"] = tuple(f.address for f in chip.functions)
        return DeviceSample(
            id=f"tpu:{chip.bus_id}", vendor=self.vendor, kind=self.kind, backend=self.display_name,
            index=chip.index, name=self.model_name(chip.generation.name), bus_id=chip.bus_id,
            health="ok" if metrics is not None and chip.devices is not None else "unknown",
            utilization_percent=duty, compute_active_percent=duty,
            compute_active_source=self.compute_active_source if duty is not None else None,
            memory_used_bytes=used, memory_total_bytes=total if total else None,
            processes=None, details=details)

    def _bytes(self, values: dict[int, Any], devices: Sequence[int], what: str) -> int | None:
        found = [values.get(d) for d in devices]
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in found):
            if any(v is not None for v in found):
                self._refused.append(f"{what}: unusable values {found}; reported as unknown")
            return None
        return sum(found)  # type: ignore[arg-type]

    def _duty(self, found: list[Any], label: str) -> float | None:
        """The mean of the chip's duty cycle values (one where libtpu gives it per chip)."""
        if not found or any(not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 100
                            for v in found):
            if any(v is not None for v in found):
                self._refused.append(f"{label}: unusable duty cycle {found}; reported as unknown")
            return None
        return float(sum(found)) / len(found)

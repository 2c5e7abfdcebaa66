"""``compute_active_percent`` with the source that says what it measures (docs/activity.md),
for the backends whose tools report per-core busy figures or only an engine-time figure."""

from __future__ import annotations

from typing import Any, Sequence


def mean_of_units(busy: Sequence[float | None] | None, source: str) -> dict[str, Any]:
    """The mean busy percent over a device's cores or processing elements, named ``source``
    (``pe_busy``, ``core_busy``): only when every unit reported a percentage, since a mean over
    some of them is not the device's. Empty (unknown) otherwise."""
    if not busy or any(b is None or not 0.0 <= b <= 100.0 for b in busy):
        return {}
    values = [float(b) for b in busy if b is not None]
    return {"compute_active_percent": round(sum(values) / len(values), 3),
            "compute_active_source": source}


def engine_time(percent: float | None) -> dict[str, Any]:
    """The share of time the device's engine ran, where the tool reports nothing finer: the
    same kind of figure as the headline utilization, and named ``engine_time`` so that no one
    takes it for the share of the compute units busy. Empty (unknown) without a value."""
    if percent is None or not 0.0 <= percent <= 100.0:
        return {}
    return {"compute_active_percent": float(percent), "compute_active_source": "engine_time"}


#: The activity fields that only hardware performance counters give (NVIDIA GPM's occupancy,
#: tensor, DRAM bandwidth, NVLink and PCIe rates): what an NPU tool that reports busy figures
#: alone never fills (its backend's ``unreported_fields``).
COUNTER_ONLY_FIELDS = frozenset({
    "sm_occupancy_percent", "tensor_active_percent", "memory_bandwidth_percent",
    "interconnect_rx_bytes_per_second", "interconnect_tx_bytes_per_second",
    "pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second"})

"""Each measured field declared once: name, unit, help text, how it is exported.

The snapshot JSON, the CSV columns, the exporter's gauge families and the
metric reference in ``docs/`` are all derived from :data:`MEASUREMENTS` and
:data:`IDENTITY_FIELDS`. Adding a measured field is one edit here plus the
attribute on :class:`allsmi.schema.DeviceSample`.
"""

from __future__ import annotations

import math

from dataclasses import fields, replace

from allsmi.schema.numbers import FINITE
from allsmi.schema.records import Record, record
from allsmi.schema import DEVICE_RANGES, PROCESS_ACTIVITY, DeviceSample, ProcessSample


@record
class Measurement(Record):
    """A numeric device field and how it maps to Prometheus."""

    field: str
    """Attribute of :class:`DeviceSample` and JSON/CSV column name."""
    unit: str
    """Unit of the schema value (as in the field name)."""
    help: str
    """One sentence for HELP lines and docs."""
    metric: str
    """Exporter family name, in Prometheus base units."""
    scale: float = 1.0
    """Multiplier from the schema unit to the metric's base unit."""
    board_level: bool = False
    """Owned by the physical board: reported once, on the owning device."""
    minimum: float | None = 0.0
    maximum: float | None = None
    """The range a value is kept in (``None``: no upper end); a device field's is the schema's
    (:data:`allsmi.schema.DEVICE_RANGES`), which makes anything outside it ``None``. The
    contract tests check backends stay inside it."""
    source_field: str | None = None
    """A DeviceSample text field naming what the value measures, exported as a ``source``
    label (``compute_active_percent``'s ``compute_active_source``)."""


def to_base(value: float, scale: float) -> float:
    """``value`` in a field's schema unit, in its metric's base unit (times ``scale``, a power of
    ten): the float nearest the decimal the value's own shortest text gives with its point moved,
    so 57 % is exported as ``0.57`` and 75.15 % as ``0.7515``, where multiplying by ``0.01`` gave
    ``0.5700000000000001`` and ``0.7515000000000001``."""
    if scale == 1.0:
        return value
    text = repr(value)
    exponent = round(math.log10(scale))
    if "e" in text or "n" in text or 10.0 ** exponent != scale:  # (inf, nan; not a power of ten)
        return value * scale
    return float(f"{text}e{exponent}")


def _in_schema_ranges(*declared: Measurement) -> tuple[Measurement, ...]:
    """Each of ``declared`` with the range the schema keeps its field in, where it has one."""
    out = []
    for m in declared:
        if m.field in DEVICE_RANGES:
            low, high = DEVICE_RANGES[m.field]
            m = replace(m, minimum=low, maximum=None if high == FINITE else high)
        out.append(m)
    return tuple(out)


MEASUREMENTS: tuple[Measurement, ...] = _in_schema_ranges(
    Measurement("utilization_percent", "percent",
                "Share of time the device was busy, 0 to 1.",
                "allsmi_device_utilization_ratio", scale=0.01),
    Measurement("memory_used_bytes", "bytes", "Device memory in use, in bytes.",
                "allsmi_device_memory_used_bytes"),
    Measurement("memory_total_bytes", "bytes", "Device memory in total, in bytes.",
                "allsmi_device_memory_total_bytes"),
    Measurement("temperature_celsius", "celsius", "Device temperature, in degrees Celsius.",
                "allsmi_device_temperature_celsius"),
    Measurement("power_watts", "watts", "Board power draw, in watts.",
                "allsmi_device_power_watts", board_level=True),
    Measurement("power_limit_watts", "watts", "Enforced board power limit, in watts.",
                "allsmi_device_power_limit_watts", board_level=True),
    Measurement("clock_mhz", "MHz", "Core (SM) clock, in hertz.",
                "allsmi_device_clock_hertz", scale=1e6),
    Measurement("fan_percent", "percent", "Fan speed as a share of its maximum, 0 to 1.",
                "allsmi_device_fan_ratio", scale=0.01),
    Measurement("compute_active_percent", "percent",
                "Share of the device's compute units busy over the last interval, 0 to 1 "
                "(source: sm_active, gfx_busy, pe_busy, core_busy or engine_time).",
                "allsmi_device_compute_active_ratio", scale=0.01,
                source_field="compute_active_source"),
    Measurement("sm_occupancy_percent", "percent",
                "Resident warps over the maximum the SMs can hold, 0 to 1.",
                "allsmi_device_sm_occupancy_ratio", scale=0.01),
    Measurement("tensor_active_percent", "percent",
                "Share of cycles the tensor (matrix) pipes were active, 0 to 1.",
                "allsmi_device_tensor_active_ratio", scale=0.01),
    Measurement("memory_bandwidth_percent", "percent",
                "Device memory (DRAM/HBM) bandwidth in use over its peak, 0 to 1.",
                "allsmi_device_memory_bandwidth_ratio", scale=0.01),
)
"""Gauges. ``energy_joules`` is a counter and handled by the exporter's accounting."""

#: Traffic rates: bytes per second in the schema, byte counters (the rate integrated over each
#: interval, as energy is) in Prometheus.
TRAFFIC_MEASUREMENTS: tuple[Measurement, ...] = _in_schema_ranges(
    Measurement("interconnect_rx_bytes_per_second", "bytes per second",
                "Bytes the device received over its device-to-device links (NVLink, xGMI, "
                "scale-out ports).", "allsmi_device_interconnect_rx_bytes_total"),
    Measurement("interconnect_tx_bytes_per_second", "bytes per second",
                "Bytes the device sent over its device-to-device links (NVLink, xGMI, "
                "scale-out ports).", "allsmi_device_interconnect_tx_bytes_total"),
    Measurement("pcie_rx_bytes_per_second", "bytes per second",
                "Bytes the device received over its host link (PCIe).",
                "allsmi_device_pcie_rx_bytes_total"),
    Measurement("pcie_tx_bytes_per_second", "bytes per second",
                "Bytes the device sent over its host link (PCIe).",
                "allsmi_device_pcie_tx_bytes_total"),
)

(ENERGY_FIELD,) = _in_schema_ranges(Measurement(
    "energy_joules", "joules", "Energy the board used since its counter started, in joules.",
    "allsmi_device_energy_joules_total", board_level=True))

MEASURED_FIELDS: tuple[Measurement, ...] = MEASUREMENTS + TRAFFIC_MEASUREMENTS + (ENERGY_FIELD,)
BY_FIELD: dict[str, Measurement] = {m.field: m for m in MEASURED_FIELDS}

#: Device fields that are lists or objects of their own: in the snapshot JSON, not in CSV.
NESTED_FIELDS: tuple[str, ...] = ("processes", "workloads", "waiting", "details")

#: Device columns in schema order, minus the nested ones (processes, workloads, details).
DEVICE_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(DeviceSample) if f.name not in NESTED_FIELDS)

IDENTITY_FIELDS: tuple[str, ...] = tuple(c for c in DEVICE_COLUMNS if c not in BY_FIELD)


#: The device a process row of ``allsmi snapshot --format processes-csv`` belongs to: its
#: ``id``, ``index`` and ``uuid``, prefixed so they cannot be mistaken for the process's own.
PROCESS_DEVICE_COLUMNS: tuple[str, ...] = ("device_id", "device_index", "device_uuid")

#: Columns of ``allsmi snapshot --format processes-csv``: :data:`PROCESS_DEVICE_COLUMNS`, then
#: every :class:`ProcessSample` field in declaration order (per-process activity included), so
#: a field added to the schema appears without another edit.
PROCESS_COLUMNS: tuple[str, ...] = PROCESS_DEVICE_COLUMNS + tuple(
    f.name for f in fields(ProcessSample))


#: Per-process activity (``ProcessSample``), declared with their help text (worded, like
#: :data:`MEASUREMENTS`'s, for the exported ratio) and gauge name: the snapshot JSON, the
#: snapshot parser, the processes CSV, the dashboard's processes panel and the exporter's
#: per-process gauges (``allsmi serve --processes``) derive from it.
PROCESS_MEASUREMENTS: tuple[Measurement, ...] = tuple(
    Measurement(name, "percent", help_text, metric, scale=0.01, maximum=100.0)
    for name, (metric, help_text) in zip(PROCESS_ACTIVITY, (
        ("allsmi_process_utilization_ratio",
         "A process's share of the device's compute engine time (NVIDIA SM, AMD GFX) over the "
         "last sampling interval, 0 to 1."),
        ("allsmi_process_memory_utilization_ratio",
         "A process's share of the device's memory-controller time over the last sampling "
         "interval, 0 to 1."),
        ("allsmi_process_encoder_utilization_ratio",
         "A process's share of the device's video encoder time over the last sampling "
         "interval, 0 to 1."),
        ("allsmi_process_decoder_utilization_ratio",
         "A process's share of the device's video decoder time over the last sampling "
         "interval, 0 to 1."))))

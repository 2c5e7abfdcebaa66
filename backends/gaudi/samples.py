"""Building Gaudi :class:`DeviceSample` objects from hl-smi rows (the part of the backend
that neither runs the tool nor frames its output).

:class:`SampleBuilder` is mixed into :class:`allsmi.backends.gaudi.GaudiBackend`;
it keeps the identity of every device seen (so a device missing from a frame is
reported degraded under its id rather than dropped) and converts one row's cells
to schema units (memory MiB to bytes, ``N/A`` to ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from allsmi.schema import units
from allsmi.backends.gaudi import EXECUTABLE
from allsmi.schema import DeviceSample

if TYPE_CHECKING:  # the CSV module is imported by the backend's open(), not with its class
    from allsmi.backends.gaudi.csv_output import Frame, Row
    from allsmi.backends.gaudi.text_output import ListedDevice
    from allsmi.backends._common.cells import SaidOnce

#: Cap on per-line warnings in one sample, so a flood of garbage stays readable.
MAX_LINE_WARNINGS = 10

#: The integer-kind ``-Q`` cells (counts and ids) and the ``details`` key each fills. hl-smi
#: prints them as plain decimal digits (every fixture, ``nounits`` or not); anything else
#: (``-1``, ``3.7``, ``3.0``, ``1e3``) cannot be a count or an id.
COUNT_FIELDS: tuple[tuple[str, str], ...] = (
    ("module_id", "module_id"),
    ("ecc.errors.uncorrected.aggregate.total", "ecc_uncorrected_total"),
    ("ecc.errors.corrected.aggregate.total", "ecc_corrected_total"),
)


@dataclass(frozen=True)
class Identity:
    """The stable facts of one device, kept across frames."""

    key: str
    id: str
    index: int | None
    uuid: str | None
    bus_id: str | None
    name: str | None
    driver_version: str | None


#: Key prefix of a device known only from ``hl-smi -L`` (row keys are ``index:``, ``bus_id:``...).
LISTED_KEY = "listed:"


def _bus(bus_id: str | None) -> str | None:
    """A PCI address compared without case or the default ``0000:`` domain."""
    if not bus_id:
        return None
    bus = bus_id.strip().lower()
    return bus if bus.count(":") == 2 else f"0000:{bus}"


def _same_device(ident: Identity, index: int | None, uuid: str | None, bus_id: str | None) -> bool:
    """Whether ``ident`` and a listed device or row are one device: same uuid, else same bus
    id, else same index (hl-smi numbers devices the same way in ``-L`` and ``-Q``)."""
    if ident.uuid and uuid:
        return ident.uuid == uuid
    if ident.bus_id and bus_id:
        return _bus(ident.bus_id) == _bus(bus_id)
    return ident.index is not None and ident.index == index


def _text(row: Row, name: str) -> str | None:
    value = row.get(name)
    return value.strip() if value and value.strip() else None


def _mebibytes(cell: str) -> int | None:
    """Bytes from hl-smi's memory cells, which are MiB (``-f ...,nounits``)."""
    return units.parse_size_bytes(cell, default_unit="mib")


def _positive(value: Any) -> Any:
    """``value``, or ``None`` for 0: a memory size or a power limit of 0 is what a device
    that does not report one prints (as amdsmi's power cap of 0 and the i915/xe hwmon's
    ``power1_max`` of 0), not a reading; the used memory and power draw keep their 0."""
    return None if value == 0 else value


class SampleBuilder:
    """Rows to samples; expects ``warnings``, ``_known``, ``_firmware``, ``_said`` (warnings
    said once), ``vendor``, ``kind``, ``name``."""

    warnings: list[str]
    vendor: str
    kind: str
    name: str
    _known: dict[str, Identity]
    _firmware: dict[str, str]
    _said: SaidOnce | None

    def _add_line_warnings(self, problems: Sequence[str]) -> None:
        self.warnings.extend(problems[:MAX_LINE_WARNINGS])
        if len(problems) > MAX_LINE_WARNINGS:
            self.warnings.append(f"... and {len(problems) - MAX_LINE_WARNINGS} more bad lines")

    def _remember(self, frame: Frame) -> None:
        """Add devices seen for the first time; a known device keeps its id.

        A row for a device known only from ``hl-smi -L`` (:meth:`_remember_listed`) takes
        that placeholder's place: same device, now with the row's identity.
        """
        for row in frame.rows:
            if row.key in self._known:
                continue
            index = units.to_int(row.get("index"))  # parse_line let only digits through
            uuid, bus_id = _text(row, "uuid"), _text(row, "bus_id")
            for key, listed in list(self._known.items()):
                if key.startswith(LISTED_KEY) and _same_device(listed, index, uuid, bus_id):
                    del self._known[key]
            device_id = uuid or (f"gaudi:{bus_id}" if bus_id else f"gaudi:index{index}")
            self._known[row.key] = Identity(
                key=row.key, id=device_id, index=index, uuid=uuid, bus_id=bus_id,
                name=_text(row, "name"), driver_version=_text(row, "driver_version"))

    def _remember_listed(self, listed: Sequence[ListedDevice]) -> None:
        """Keep devices that ``hl-smi -L`` lists but no ``-Q`` row matches (by index, uuid or
        bus id): they are reported ``degraded`` without values (a device the driver knows
        but cannot read), never dropped, until a row for them arrives."""
        for dev in listed:
            if any(_same_device(ident, dev.index, dev.uuid, dev.bus_id)
                   for ident in self._known.values()):
                continue
            device_id = dev.uuid or f"gaudi:{dev.bus_id}"
            key = f"{LISTED_KEY}{dev.index}:{dev.bus_id}"
            self._known[key] = Identity(key=key, id=device_id, index=dev.index, uuid=dev.uuid,
                                        bus_id=dev.bus_id, name=None, driver_version=None)

    def _firmware_for(self, ident: Identity) -> str | None:
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
                if stale_for is None and ident.key.startswith(LISTED_KEY):
                    self.warnings.append(f"{ident.id}: listed by {EXECUTABLE} -L but has no -Q "
                                         "reading row; reported degraded without values")
                elif stale_for is None:
                    self.warnings.append(f"{ident.id}: no row in the last {EXECUTABLE} output; "
                                         "reported degraded without values")
                devices.append(self._identity_sample(ident, health="degraded"))
            else:
                devices.append(self._row_sample(ident, row))
        return devices

    def _identity_sample(self, ident: Identity, health: str) -> DeviceSample:
        return DeviceSample(
            id=ident.id, vendor=self.vendor, kind=self.kind, backend=self.name,
            index=ident.index, uuid=ident.uuid, name=ident.name, bus_id=ident.bus_id,
            driver_version=ident.driver_version, firmware_version=self._firmware_for(ident),
            health=health)

    def _number(self, ident: Identity, row: Row, field: str,
                parse: Callable[[str], float | int | None], schema_field: str | None = None) -> Any:
        """``field``'s cell through ``parse``; unreadable, or outside the range of the schema
        field it fills, it is ``None`` with a warning."""
        raw = row.get(field)
        if raw is None:
            return None
        from allsmi.backends._common.cells import CellReader  # with the parsers, not the class
        return CellReader(ident.id, self.warnings).number(raw, parse, f"{field} value", schema_field)

    def _count(self, ident: Identity, row: Row, field: str) -> int | None:
        """``field``'s cell as a count or id: a non-negative whole number, else ``None``,
        with a warning said once per device, field and printed value while open."""
        from allsmi.backends._common.cells import whole_cell
        return whole_cell(row.get(field), ident.id, field, self.warnings, self._said)

    def _row_sample(self, ident: Identity, row: Row) -> DeviceSample:
        num = self._number
        details: dict[str, Any] = {}
        clock_max = num(ident, row, "clocks.max.soc", units.parse_clock_mhz, "clock_mhz")
        if clock_max is not None:
            details["clock_max_soc_mhz"] = clock_max
        for field, key in COUNT_FIELDS:
            value = self._count(ident, row, field)
            if value is not None:
                details[key] = value
        serial = _text(row, "serial")
        if serial:
            details["serial"] = serial
        base = self._identity_sample(ident, health="ok")
        from allsmi.backends._common.activity import engine_time
        utilization = num(ident, row, "utilization.aip", units.parse_percent,
                          "utilization_percent")
        return replace(
            base,
            name=_text(row, "name") or ident.name,
            driver_version=_text(row, "driver_version") or ident.driver_version,
            utilization_percent=utilization,
            # hl-smi reports no per-TPC/MME figure: the AIP's busy time, named as such
            **engine_time(utilization),
            memory_used_bytes=num(ident, row, "memory.used",
                                  _mebibytes, "memory_used_bytes"),
            memory_total_bytes=_positive(num(ident, row, "memory.total",
                                             _mebibytes, "memory_total_bytes")),
            temperature_celsius=num(ident, row, "temperature.aip", units.parse_temperature_celsius,
                                    "temperature_celsius"),
            power_watts=num(ident, row, "power.draw", units.parse_power_watts, "power_watts"),
            power_limit_watts=_positive(num(ident, row, "power.max", units.parse_power_watts,
                                            "power_limit_watts")),
            clock_mhz=num(ident, row, "clocks.current.soc", units.parse_clock_mhz, "clock_mhz"),
            details=details)

"""Grafana units, derived from the exporter's declarations.

Every unit comes from the metric's declaration (``allsmi.exporter.families``, whose device
gauges come from ``allsmi.schema.fields.MEASUREMENTS``): a gauge in bytes is shown in bytes, the
rate of a joules counter in watts.
"""

from __future__ import annotations

from allsmi.exporter.families import FAMILIES

#: Grafana unit of each base unit of the exporter (``Family.unit``).
GRAFANA_UNITS = {"bytes": "bytes", "celsius": "celsius", "watts": "watt", "hertz": "hertz",
                 "ratio": "percentunit", "seconds": "s", "joules": "joule", "": "none"}
#: Grafana unit of the per-second rate of a counter in each base unit: joules per second
#: are watts; seconds per second are a number of devices.
RATE_UNITS = {"joules": "watt", "seconds": "none"}
#: Device-time summed over devices, in hours (a counter in seconds over 3600): a quantity, not
#: a duration, so never Grafana's "h", which shows 200 device-hours as "1.19 week".
DEVICE_HOURS = "suffix:device-h"
#: Energy in kilowatt-hours (a joules counter over 3.6e6), as price_per_kwh bills it.
KWH = "kwatth"
_FAMILY_UNITS = {f.name: f.unit for f in FAMILIES}
_BASE = ("bytes", "celsius", "watts", "hertz", "ratio", "seconds", "joules")


def base_unit(metric: str) -> str:
    """The declared base unit of ``metric``: an exporter family, or a recording rule
    ``level:allsmi_x:ops`` of one; a metric not (yet) declared takes its name's suffix,
    the exporter's naming rule."""
    name = metric.split(":")[1] if ":" in metric else metric
    for candidate in (name, name + "_total"):
        if candidate in _FAMILY_UNITS:
            return _FAMILY_UNITS[candidate]
    stem = name[:-len("_total")] if name.endswith("_total") else name
    last = stem.rsplit("_", 1)[-1]
    return last if last in _BASE else ""


def unit(metric: str) -> str:
    """Grafana unit of a gauge (or recorded aggregate) of ``metric``."""
    if ":" in metric and metric.rsplit(":", 1)[1].startswith("rate"):
        return rate_unit(metric)
    return GRAFANA_UNITS[base_unit(metric)]


def rate_unit(metric: str) -> str:
    """Grafana unit of the per-second rate of the counter ``metric``."""
    return RATE_UNITS.get(base_unit(metric), "none")

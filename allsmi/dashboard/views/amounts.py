"""Energy, power and labels as the views write them: the node view's summary and panels, and
the totals tables of the groups and cluster views (:mod:`.groups`, imported with those views:
a dashboard that never opens them does not hold their layout code; issue 36)."""

from __future__ import annotations

from typing import Any

from allsmi.schema.formatting import NA, na

from allsmi.dashboard.state.totals import Totals


def energy_text(joules: float | None) -> str:
    """Energy in the unit people read bills in: J, Wh or kWh."""
    if joules is None:
        return NA
    return energy_in(joules, energy_unit(joules))


#: Energy units: name and joules in one.
ENERGY_UNITS = (("J", 1.0), ("Wh", 3600.0), ("kWh", 3.6e6))


def energy_unit(largest: float | None) -> tuple[str, float]:
    """The unit :func:`energy_text` would choose for ``largest``: one column, one unit."""
    joules = largest or 0.0
    return ENERGY_UNITS[0] if joules < 3600.0 else ENERGY_UNITS[1] if joules < 3.6e6 else ENERGY_UNITS[2]


def energy_in(joules: float | None, unit: tuple[str, float]) -> str:
    """``joules`` in ``unit`` (:func:`energy_unit` of the column's largest value)."""
    if joules is None:
        return NA
    name, scale = unit
    value = joules / scale
    return f"{value:.0f} {name}" if name == "J" else f"{value:.2f} {name}" if name == "kWh" \
        else f"{value:.1f} {name}"


def labels_text(labels: dict[str, str] | Any) -> str:
    """``team=ml project=llm`` (sorted), or empty."""
    return " ".join(f"{k}={v}" for k, v in sorted(dict(labels).items()))


def power_totals(totals: Totals) -> str:
    """A set's power against its limits, like with like: the power and limits of the devices
    that report both; where some devices report power but no limit, ``(2 of 5)`` says how many
    devices the pair covers (the power of all of them: :attr:`Totals.power_watts`)."""
    if totals.power_limited_count == 0 or totals.power_limited_count == totals.power_count:
        return power_pair(totals.power_watts, totals.power_limit_watts)
    return (f"{power_pair(totals.power_limited_watts, totals.power_limit_watts)} "
            f"({totals.power_limited_count} of {totals.power_count})")


def power_pair(power: float | None, limit: float | None) -> str:
    """"9.9/20.2 kW" or "312/700 W": one unit for both, chosen by the larger."""
    if power is None and limit is None:
        return NA
    largest = max((v for v in (power, limit) if v is not None), default=0.0)
    if largest >= 10000:
        return f"{na(None if power is None else power / 1000, '{:.1f}')}/" \
               f"{na(None if limit is None else limit / 1000, '{:.1f}')} kW"
    return f"{na(power, '{:.0f}')}/{na(limit, '{:.0f}')} W"


__all__ = ["ENERGY_UNITS", "energy_in", "energy_text", "energy_unit", "labels_text", "power_pair",
           "power_totals"]

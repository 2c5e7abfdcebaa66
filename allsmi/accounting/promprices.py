"""The group prices the exporters published over a window, each hour at that hour's price.

Every ``allsmi serve`` publishes its configuration's prices
(``allsmi_resource_group_price_per_device_hour`` and ``_per_kwh``, labelled with the
currency), which the Grafana cost panel uses. ``allsmi export --prometheus`` uses them too for
every group its own configuration does not price, so the bill and the dashboards agree.

A price may change within the window: each hour is charged at that hour's price. The hour's
price (its mean over the hour) and the group's usage in that hour (allocated seconds, for the
price per device-hour; energy, for the price per kWh) are read hour by hour (subqueries with a
one-hour step, from the hourly roll-ups where they exist), and the group's price for the window
is the usage-weighted mean: ``sum(usage_h x price_h) / sum(usage_h)``. Applied to the rows'
billed hours and energy, this charges each hour at its price exactly when the group's rows use
it in proportion, as they do in practice (the prices are the group's, not a row's). Without
usage the plain mean over the hours is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from allsmi.accounting.periods import Window
from allsmi.accounting.promclient import PrometheusClient

PRICE_METRICS = {"per_device_hour": "allsmi_resource_group_price_per_device_hour",
                 "per_kwh": "allsmi_resource_group_price_per_kwh"}
#: What each price is weighted by, from the raw counters and from the hourly roll-ups.
USAGE_RAW = {"per_device_hour": "allsmi_device_allocated_seconds_total",
             "per_kwh": "allsmi_device_energy_joules_total"}
USAGE_ROLLUP = {"per_device_hour": "instance_uuid:allsmi_device_allocated_seconds:increase1h",
                "per_kwh": "instance_uuid:allsmi_device_energy_joules:increase1h"}


@dataclass(frozen=True)
class Published:
    """A group's published prices over the window (``None``: none published) and currency."""

    per_device_hour: float | None
    per_kwh: float | None
    currency: str | None


def _matrix(client: PrometheusClient, promql: str, at: float,
            key: str) -> dict[tuple[str, str], dict[int, float]]:
    out: dict[tuple[str, str], dict[int, float]] = {}
    for series in client.query_range_vector(promql, at):
        metric = series.get("metric", {})
        points = out.setdefault((metric.get("resource_group", ""), metric.get(key, "")), {})
        for stamp, value in series.get("values", []):
            try:
                t, v = int(round(float(stamp))), float(value)
            except (TypeError, ValueError):
                continue
            if math.isfinite(v):
                points[t] = v
    return out


def published_prices(client: PrometheusClient, window: Window,
                     rollups: bool) -> dict[str, Published]:
    """Per group, its published prices over ``window`` (each hour at its price)."""
    at, seconds = window.end_unix, max(window.seconds, 1)
    step = min(3600, seconds)
    rng, sub = f"{step}s", f"[{seconds}s:{step}s]"
    found: dict[str, dict[str, tuple[float, str]]] = {}
    for name, metric in PRICE_METRICS.items():
        mean = f"max by (resource_group, currency) (avg_over_time({metric}[{rng}]))"
        if seconds <= 3600:  # one hour at most: its mean price
            for sample in client.query(mean, at):
                labels = sample.get("metric", {})
                try:
                    value = float(sample["value"][1])
                except (KeyError, IndexError, TypeError, ValueError):
                    continue
                if math.isfinite(value):
                    group, currency = labels.get("resource_group", ""), labels.get("currency", "")
                    previous = found.setdefault(group, {}).get(name)
                    if previous is None or previous[1] > currency:
                        found[group][name] = (value, currency)
            continue
        prices = _matrix(client, f"({mean}){sub}", at, "currency")
        if not prices:
            continue
        usage_expr = (f"sum by (resource_group) (last_over_time({USAGE_ROLLUP[name]}[{rng}]))"
                      if rollups else
                      f"sum by (resource_group) (increase({USAGE_RAW[name]}[{rng}]))")
        usage = {g: pts for (g, _), pts in _matrix(client, f"({usage_expr}){sub}", at,
                                                   "resource_group").items()}
        for (group, currency), points in prices.items():
            weights = usage.get(group, {})
            total = sum(max(0.0, weights.get(t, 0.0)) for t in points)
            if total > 0:
                value = sum(p * max(0.0, weights.get(t, 0.0)) for t, p in points.items()) / total
            else:
                value = sum(points.values()) / len(points)
            previous = found.setdefault(group, {}).get(name)
            if previous is None or previous[1] > currency:  # two currencies: a stable choice
                found[group][name] = (value, currency)
    out: dict[str, Published] = {}
    for group, values in found.items():
        currencies = {c for _, c in values.values()}
        currency = sorted(currencies)[0] if currencies else None
        out[group] = Published(
            per_device_hour=values["per_device_hour"][0] if "per_device_hour" in values else None,
            per_kwh=values["per_kwh"][0] if "per_kwh" in values else None,
            currency=currency or None)
    return out


def describe(sources: dict[str, str]) -> str:
    """``"prices: config for a, b; published for c"`` (empty when nothing is priced)."""
    parts: list[str] = []
    for kind in ("config", "published"):
        groups = sorted(g for g, s in sources.items() if s == kind)
        if groups:
            parts.append(f"{'the local configuration' if kind == 'config' else 'published by the exporters'}"
                         f" for {', '.join(groups)}")
    return "; ".join(parts)


__all__ = ["Published", "describe", "published_prices"]

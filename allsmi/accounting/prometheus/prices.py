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
from typing import Any

from allsmi.accounting.periods import Window
from allsmi.accounting.prometheus.client import PrometheusClient, PrometheusError
from allsmi.accounting.prometheus.hours import sample_value
from allsmi.config import MAX_PRICE

PRICE_METRICS = {"per_device_hour": "allsmi_resource_group_price_per_device_hour",
                 "per_kwh": "allsmi_resource_group_price_per_kwh"}
#: What each price is weighted by, from the raw counters and from the hourly roll-ups.
USAGE_RAW = {"per_device_hour": "allsmi_device_allocated_seconds_total",
             "per_kwh": "allsmi_device_energy_joules_total"}
USAGE_ROLLUP = {"per_device_hour": "instance_uuid:allsmi_device_allocated_seconds:increase1h",
                "per_kwh": "instance_uuid:allsmi_device_energy_joules:increase1h"}
#: The prices a store may publish: the range ``[groups.NAME] price_per_device_hour`` and
#: ``price_per_kwh`` accept in the configuration (``allsmi.config``: at least 0, at most
#: ``MAX_PRICE``), since every published price is some node's configured one. A price outside
#: it (or not a finite number) fails the export naming the series, never billed nor dropped.
PRICE_RANGE = (0.0, MAX_PRICE)


@dataclass(frozen=True)
class Published:
    """A group's published prices over the window (``None``: none published) and currency."""

    per_device_hour: float | None
    per_kwh: float | None
    currency: str | None
    currencies: tuple[str, ...] = ()
    """Where the exporters published the group's prices in more than one currency (nodes
    configured apart, or a device-hour price in one and a kWh price in another): those
    currencies, and neither price (one currency's amount is never billed as another's)."""


def _labels(sample: dict[str, Any], name: str) -> dict[str, Any]:
    """The sample's labels, named ``name`` (an aggregation's answer drops ``__name__``)."""
    metric = sample.get("metric")
    return {**(metric if isinstance(metric, dict) else {}), "__name__": name}


def _matrix(client: PrometheusClient, promql: str, at: float, key: str, name: str,
            bounds: tuple[float, float] | None = None) -> dict[tuple[str, str], dict[int, float]]:
    """The hourly points of ``promql`` (series ``name``) per (group, ``key`` label); a point
    that is not a finite number (or outside ``bounds``) fails, naming the series."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for series in client.query_range_vector(promql, at):
        metric = _labels(series, name)
        values = series.get("values")
        if not isinstance(values, list):
            raise PrometheusError(f"{client.url}: the answer to {promql!r} holds a malformed "
                                  f"series {str(series)[:60]!r}")
        points = out.setdefault((metric.get("resource_group", ""), metric.get(key, "")), {})
        for pair in values:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise PrometheusError(f"{client.url}: the answer to {promql!r} holds a "
                                      f"malformed sample {str(pair)[:60]!r}")
            t = int(round(sample_value(pair[0], metric, promql, client.url)))
            points[t] = sample_value(pair[1], metric, promql, client.url, bounds, "a price")
    return out


def _weighted(points: dict[int, float], weights: dict[int, float]) -> float:
    """The mean of ``points`` weighted by ``weights`` (negative ones count 0), or their plain
    mean without weight. Weights whose sums overflow (finite ones near the float maximum) are
    scaled by the largest first."""
    used = {t: max(0.0, weights.get(t, 0.0)) for t in points}
    total = sum(used.values())
    if total <= 0:
        return sum(points.values()) / len(points)
    weighted = sum(p * used[t] for t, p in points.items())
    if not math.isfinite(total) or not math.isfinite(weighted):
        top = max(used.values())
        used = {t: w / top for t, w in used.items()}
        total, weighted = sum(used.values()), sum(p * used[t] for t, p in points.items())
    return weighted / total


def published_prices(client: PrometheusClient, window: Window,
                     rollups: bool) -> dict[str, Published]:
    """Per group, its published prices over ``window`` (each hour at its price). A price (or
    usage) that is not a finite number, or a price outside :data:`PRICE_RANGE`, raises
    :class:`PrometheusError` naming the series and the value."""
    at, seconds = window.end_unix, max(window.seconds, 1)
    step = min(3600, seconds)
    rng, sub = f"{step}s", f"[{seconds}s:{step}s]"
    found: dict[str, dict[str, tuple[float, str]]] = {}
    seen: dict[str, set[str]] = {}

    def keep(name: str, group: str, currency: str, value: float) -> None:
        seen.setdefault(group, set()).add(currency)
        previous = found.setdefault(group, {}).get(name)
        if previous is None or previous[1] > currency:
            found[group][name] = (value, currency)

    for name, metric in PRICE_METRICS.items():
        mean = f"max by (resource_group, currency) (avg_over_time({metric}[{rng}]))"
        if seconds <= 3600:  # one hour at most: its mean price
            for sample in client.query(mean, at):
                labels = _labels(sample, metric)
                raw = sample.get("value")
                if not isinstance(raw, (list, tuple)) or len(raw) != 2:
                    raise PrometheusError(f"{client.url}: the answer to {mean!r} holds a "
                                          f"malformed sample {str(raw)[:60]!r}")
                value = sample_value(raw[1], labels, mean, client.url, PRICE_RANGE, "a price")
                keep(name, labels.get("resource_group", ""), labels.get("currency", ""), value)
            continue
        prices = _matrix(client, f"({mean}){sub}", at, "currency", metric, PRICE_RANGE)
        if not prices:
            continue
        usage_metric = USAGE_ROLLUP[name] if rollups else USAGE_RAW[name]
        usage_expr = (f"sum by (resource_group) (last_over_time({usage_metric}[{rng}]))"
                      if rollups else
                      f"sum by (resource_group) (increase({usage_metric}[{rng}]))")
        usage = {g: pts for (g, _), pts in _matrix(client, f"({usage_expr}){sub}", at,
                                                   "resource_group", usage_metric).items()}
        for (group, currency), points in prices.items():
            if points:
                keep(name, group, currency, _weighted(points, usage.get(group, {})))
    out: dict[str, Published] = {}
    for group, values in found.items():
        currencies = seen.get(group, set())
        if len(currencies) > 1:  # which amount is in which currency is not the bill's to pick
            out[group] = Published(None, None, None, tuple(sorted(c or "(none)" for c in currencies)))
            continue
        currency = sorted(currencies)[0] if currencies else None
        out[group] = Published(
            per_device_hour=values["per_device_hour"][0] if "per_device_hour" in values else None,
            per_kwh=values["per_kwh"][0] if "per_kwh" in values else None,
            currency=currency or None)
    return out


def currency_conflicts(published: dict[str, Published], config: Any) -> list[str]:
    """A note for each group that this configuration does not price whose prices the exporters
    published in several currencies (it is billed without a price), or in another currency
    than its ``budget_per_month`` (its budget is not compared with its cost)."""
    out = []
    for group, given in sorted(published.items()):
        grp = config.group(group)
        if grp.price_per_device_hour is not None or grp.price_per_kwh is not None:
            continue
        if given.currencies:
            out.append(f"group {group or '(none)'}: the exporters publish its prices in more than "
                       f"one currency ({', '.join(given.currencies)}): not priced from them; "
                       f"price it in this configuration ([groups.{group or 'NAME'}] price_per_"
                       "device_hour, price_per_kwh and currency)")
        elif grp.budget_per_month is not None and given.currency != grp.currency \
                and (given.per_device_hour is not None or given.per_kwh is not None):
            out.append(f"group {group}: its budget_per_month is in {grp.currency}, the prices the "
                       f"exporters publish for it in {given.currency or 'no currency'}: its cost "
                       "is not compared with its budget (no exchange rate; the budget columns "
                       f"are empty); set [groups.{group}] currency to the prices' currency, or "
                       "price it in this configuration")
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


__all__ = ["PRICE_RANGE", "Published", "currency_conflicts", "describe", "published_prices"]

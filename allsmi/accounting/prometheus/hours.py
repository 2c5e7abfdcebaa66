"""Which hourly roll-ups bill a window: each hour once, whoever wrote it and however often.

An hour may be rolled up more than once: two ``vmalert`` (or Prometheus) instances of an HA
pair evaluating the same rules, a replay run twice, a replay that evaluated every
``-datasource.queryStep`` (5 minutes by default) instead of every hour, or a replay over hours
a live evaluator already covered. A store without ``-dedup.minScrapeInterval`` (or a pair whose
evaluators write at different moments or with different external labels) keeps every copy, so
summing the roll-ups (``sum_over_time``) bills such an hour twice or more.

The marker ``fleet:allsmi_billing_rollup_window_seconds:hourly`` says which span each evaluation
covers (a sample at ``t`` with value ``w`` covers ``(t - w, t]``). :func:`choose_hours` picks,
of all the markers' spans in the window, a largest set that do not overlap (earliest end first):
those evaluations bill the window, every other one is a copy. The roll-ups are then read as
raw samples (:func:`hourly_values`) and only the samples of chosen evaluations are summed,
once per device and hour however many series hold them (copies under other labels, an HA
pair's ``replica``); the copies of an hour are compared with it, and an hour whose copies
disagree is named (:class:`Hours` ``disagreements``).
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

from allsmi.accounting.prometheus.client import PrometheusClient, PrometheusError

MARKER = "fleet:allsmi_billing_rollup_window_seconds:hourly"
#: The longest span one raw-sample query asks for (a month is read in five pieces), so that
#: one answer stays well under the client's size cap on a large fleet.
MAX_PIECE_SECONDS = 7 * 86400
#: Two roll-ups of the same hour and device disagree when they differ by more than this
#: fraction of the larger (and by more than :data:`DISAGREE_FLOOR`).
DISAGREE_RATIO = 0.01
DISAGREE_FLOOR = 1e-6
#: The share of an evaluation's span that must overlap a chosen one for it to count as another
#: evaluation of the same hour (compared with it); less is a shifted span, neither billed nor
#: compared.
SAME_HOUR_OVERLAP = 0.9
#: The most disagreements named in a message; the rest are counted.
MAX_NAMED = 5


@dataclass
class Hours:
    """The evaluations that bill a window, in milliseconds."""

    #: end -> start of each chosen evaluation's span (``(start, end]``)
    chosen: dict[int, int]
    #: the end of another evaluation of a chosen hour -> that hour's end
    aliases: dict[int, int]
    #: marker samples that were not billed (copies of billed hours, or shifted spans)
    extra: int = 0
    disagreements: list[str] = field(default_factory=list)
    disagreeing: int = 0
    #: (device or holder, hour) values held by more than one series (copies under other labels)
    copied: int = 0

    def covered(self) -> list[tuple[int, int]]:
        """The chosen spans in whole seconds, sorted and merged."""
        merged: list[tuple[int, int]] = []
        for end in sorted(self.chosen):
            lo, hi = int(round(self.chosen[end] / 1000)), int(round(end / 1000))
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return merged


def _iso_ms(t_ms: int) -> str:
    return dt.datetime.fromtimestamp(t_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pieces(lo: int, hi: int) -> list[tuple[int, int]]:
    out, at = [], lo
    while at < hi:
        out.append((at, min(hi, at + MAX_PIECE_SECONDS)))
        at = out[-1][1]
    return out


def _series_name(metric: dict[str, Any]) -> str:
    name = metric.get("__name__", "")
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}"


def sample_value(raw: Any, metric: dict[str, Any], promql: str, url: str,
                 bounds: tuple[float, float] | None = None, what: str = "") -> float:
    """A sample's value as a finite float (within ``bounds``, inclusive, when given: the range
    the configuration accepts for ``what``); anything else fails the export, naming the
    series and the value."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise PrometheusError(f"{url}: the answer to {promql!r} holds a non-numeric value "
                              f"{str(raw)[:40]!r} for {_series_name(metric)[:300]}: "
                              "not billed") from None
    if not math.isfinite(value):
        raise PrometheusError(f"{url}: the answer to {promql!r} holds {raw!r} for "
                              f"{_series_name(metric)[:300]}: a bill cannot add it")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise PrometheusError(f"{url}: the answer to {promql!r} holds {str(raw)[:40]!r} for "
                              f"{_series_name(metric)[:300]}: "
                              + (f"{what} " if what else "")
                              + f"must be >= {bounds[0]:g} and at most {bounds[1]:g}, as in the "
                              "configuration: not billed")
    return value


def _raw_samples(client: PrometheusClient, metric: str, lo: int,
                 hi: int) -> list[tuple[dict[str, Any], int, float]]:
    """Every sample of ``metric`` in ``(lo, hi]`` (seconds): (labels, time in ms, value)."""
    out = []
    for a, b in _pieces(lo, hi):
        promql = f"{metric}[{b - a}s]"
        for series in client.query_range_vector(promql, b):
            labels = series.get("metric") or {}
            values = series.get("values")
            if not isinstance(values, list):
                continue
            for pair in values:
                if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                    raise PrometheusError(f"{client.url}: the answer to {promql!r} holds a "
                                          f"malformed sample {str(pair)[:60]!r}")
                t_ms = int(round(sample_value(pair[0], labels, promql, client.url) * 1000))
                if a * 1000 < t_ms <= b * 1000:
                    out.append((labels, t_ms, sample_value(pair[1], labels, promql, client.url)))
    return out


def choose_hours(client: PrometheusClient, start: int, end: int) -> Hours:
    """The marker's evaluations that bill ``(start, end]`` (seconds), each span once."""
    spans: set[tuple[int, int]] = set()  # (end, start) in ms
    total = 0
    for _, t_ms, w in _raw_samples(client, MARKER, start, end):
        if w <= 0:
            continue
        lo = t_ms - int(round(w * 1000))
        if lo >= start * 1000:
            total += 1
            spans.add((t_ms, lo))
    chosen: dict[int, int] = {}
    last = start * 1000
    for hi, lo in sorted(spans):  # earliest end first: the most spans that do not overlap
        if lo >= last:
            chosen[hi] = lo
            last = hi
    ends = sorted(chosen)
    aliases: dict[int, int] = {}
    for hi, lo in spans:
        if hi in chosen:
            continue
        i = bisect.bisect_left(ends, hi)
        for j in (i - 1, i):
            if 0 <= j < len(ends):
                c_hi, c_lo = ends[j], chosen[ends[j]]
                overlap = min(hi, c_hi) - max(lo, c_lo)
                if overlap >= SAME_HOUR_OVERLAP * (hi - lo):
                    aliases[hi] = c_hi
    return Hours(chosen, aliases, extra=total - len(chosen))


def hourly_values(client: PrometheusClient, metric: str, keys: tuple[str, ...], hours: Hours,
                  lo: int, hi: int, mean: bool = False) -> dict[tuple[str, ...], float]:
    """Per ``keys`` labels, ``metric`` summed (or with ``mean``, averaged) over the chosen
    hours in ``(lo, hi]``: one value per hour however many series hold it (the largest, where
    copies differ; the hour is then named in ``hours.disagreements``)."""
    billed: dict[tuple[str, ...], dict[int, list[float]]] = {}
    copies: dict[tuple[str, ...], dict[int, list[float]]] = {}
    for labels, t_ms, value in _raw_samples(client, metric, lo, hi):
        key = tuple(labels.get(k, "") for k in keys)
        if t_ms in hours.chosen:
            billed.setdefault(key, {}).setdefault(t_ms, []).append(value)
        elif t_ms in hours.aliases:
            copies.setdefault(key, {}).setdefault(hours.aliases[t_ms], []).append(value)
    out: dict[tuple[str, ...], float] = {}
    for key, per_hour in billed.items():
        values = []
        for t_ms, found in sorted(per_hour.items()):
            value = max(found)
            if len(found) > 1:
                hours.copied += 1
            values.append(value)
            every = found + copies.get(key, {}).get(t_ms, [])
            spread = max(every) - min(every)
            if spread > DISAGREE_FLOOR and spread > DISAGREE_RATIO * max(abs(v) for v in every):
                hours.disagreeing += 1
                if len(hours.disagreements) < MAX_NAMED:
                    who = ",".join(f"{k}={v}" for k, v in zip(keys, key) if v)
                    hours.disagreements.append(
                        f"{metric}{{{who}}} of the hour ending {_iso_ms(t_ms)}: "
                        f"{min(every):g} to {max(every):g} (billed {value:g})")
        out[key] = sum(values) / len(values) if mean else sum(values)
    return out


def hours_notes(hours: Hours) -> list[str]:
    """What the export says about the roll-ups it read: copies, and copies that disagree."""
    notes = []
    if hours.extra:
        notes.append(f"the roll-ups hold {hours.extra} evaluation(s) besides the "
                     f"{len(hours.chosen)} billed (an HA pair of evaluators, a replay run again "
                     "or one that evaluated more often than hourly): each hour was billed once")
    if hours.copied:
        notes.append(f"{hours.copied} roll-up value(s) of an hour are held by more than one "
                     "series (copies under another label, such as an HA pair's replica): each "
                     "counted once")
    if hours.disagreeing:
        more = hours.disagreeing - len(hours.disagreements)
        notes.append(f"{hours.disagreeing} roll-up(s) of an hour disagree with another of the "
                     f"same hour by more than {DISAGREE_RATIO:.0%}: "
                     + "; ".join(hours.disagreements) + (f"; and {more} more" if more > 0 else ""))
    return notes


__all__ = ["Hours", "MARKER", "choose_hours", "hourly_values", "hours_notes", "sample_value"]

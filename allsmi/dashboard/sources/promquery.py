"""Asking a Prometheus-compatible store (Prometheus, VictoriaMetrics, Thanos, Mimir) one
instant query: the HTTP call with its caps, the answer's shape checked, values read safely.

The fleet source (:mod:`allsmi.dashboard.sources.prometheus`) builds on these; they hold no state.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.parse
from concurrent.futures import Future
from typing import Any, Callable, Iterable

from allsmi.dashboard.sources.fetch import HttpError, split_credentials, tls_context
from allsmi.dashboard.sources.fetch import get as http_get
from allsmi.support.nethint import redact_url
from allsmi.schema.text import clean_text, unresolvable_host

#: Unix times outside (0, 2**33) (the year 2242) are not a scrape's or an evaluation's time.
_LATEST_TIME = float(2**33)
MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest query answer read: a device query of a fleet within the device budget is a few MiB
(about 2 KiB a device). A larger device answer leaves the devices out for that refresh (totals
only), a larger process answer leaves the processes out; the screen says which."""
Query = Callable[[str, float], tuple[float, list[dict[str, Any]]]]


class PrometheusError(Exception):
    """Prometheus could not be asked or answered with an error."""


#: Warnings kept from one answer, and the characters kept of each.
MAX_WARNINGS, WARNING_CHARS = 3, 200


class Samples(list):  # type: ignore[type-arg]
    """An answer's samples, with the ``warnings`` the store sent along (a partial answer: a
    Thanos store or a Mimir querier that did not answer, a limit reached); ``()`` when none."""

    warnings: tuple[str, ...] = ()


def instance_matcher(instances: Iterable[str] | None) -> str:
    """``instance=~"a|b"`` for these instances (RE2, escaped for a PromQL string); "" for all."""
    if instances is None:
        return ""
    # A space, a control character or anything not ASCII as RE2's \x{hex}: a label value with a
    # newline is matched as itself, and the PromQL string holds printable ASCII only (a raw
    # newline in it is a parse error, and the whole refresh failed).
    pattern = "|".join("".join(re.escape(c) if " " < c < "\x7f" else f"\\x{{{ord(c):x}}}" for c in i)
                       for i in sorted(instances))
    return 'instance=~"' + pattern.replace("\\", "\\\\").replace('"', '\\"') + '"'


def make_query(url: str, ca_file: str | None = None) -> Query:
    """An instant-query function for the Prometheus at ``url`` (direct, no proxy, no redirects,
    the whole answer within the timeout)."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError(f"invalid Prometheus URL {redact_url(url, keep_user=False)!r}: it contains a space or a "
                         "control character (percent-encode it, e.g. %20)")
    try:
        parts = urllib.parse.urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # a port that is not a number or out of range, a broken IPv6 address
        valid = False
    if valid and unresolvable_host(parts.hostname or ""):
        valid = False
    if not valid:
        raise ValueError(f"invalid Prometheus URL {redact_url(url, keep_user=False)!r} (expected http://host:port)")
    bare, authorization = split_credentials(url)
    base = bare.rstrip("/")
    headers = {"Accept": "application/json", "Accept-Encoding": "gzip", "User-Agent": "allsmi-view"}
    context = tls_context(ca_file) if ca_file is not None else None  # ValueError names a bad file
    if authorization:  # user:password@ in the URL: basic authentication, sent only there
        headers["Authorization"] = authorization

    def query(promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        try:
            answer = http_get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}",
                              headers=headers, timeout=timeout, max_bytes=MAX_BODY_BYTES,
                              context=context)
        except HttpError as exc:
            text = str(exc)
            if text.startswith("timed out") or "larger than" in text:  # reached, too slow or too big
                raise PrometheusError(f"Prometheus {text}") from None
            raise PrometheusError(f"cannot reach Prometheus: {text}") from None
        try:
            doc = json.loads(answer.body)
        except (ValueError, RecursionError):
            from allsmi.support.nethint import first_line
            line = first_line(answer.body)
            raise PrometheusError(f"not a Prometheus query API (HTTP {answer.status})"
                                  + (f": {line}" if line else "")) from None
        return answer_vector(doc, answer.status)

    return query


def answer_vector(doc: Any, status: int = 200) -> tuple[float, list[dict[str, Any]]]:
    """(evaluation time, samples) from an instant-query answer; :class:`PrometheusError` for any
    other shape (an error, a matrix, ``data`` that is not an object, samples that are not objects)."""
    if not isinstance(doc, dict):
        raise PrometheusError("Prometheus answer is not a JSON object")
    if doc.get("status") != "success":
        error = doc.get("error")
        reason = error if isinstance(error, str) and error else f"HTTP {status}"
        raise PrometheusError(f"query failed: {clean_text(reason, 200)}")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise PrometheusError(f"unexpected Prometheus answer: 'data' is a {type(data).__name__}, not an object")
    if data.get("resultType") != "vector":
        kind = data.get("resultType")
        raise PrometheusError(f"expected a vector, got {clean_text(str(kind), 40)!r}")
    result = data.get("result")
    if result is None:
        result = []
    if not isinstance(result, list):
        raise PrometheusError("unexpected Prometheus answer: 'result' is not a list")
    samples = [s for s in result if isinstance(s, dict) and isinstance(s.get("metric", {}), dict)]
    if len(samples) != len(result):
        raise PrometheusError("unexpected Prometheus answer: a sample is not an object with labels")
    for sample in samples:
        metric = sample.setdefault("metric", {})
        if not all(isinstance(v, str) for v in metric.values()):
            raise PrometheusError("unexpected Prometheus answer: a label value is not a string")
    evaluated = max((t for s in samples if plausible_time(t := sample_time(s))), default=time.time())
    out = Samples(samples)
    warned = doc.get("warnings")
    if warned:  # a partial answer: kept with the samples, for the screen to say so
        said = [str(w) for w in (warned if isinstance(warned, list) else [warned])]
        out.warnings = tuple(dict.fromkeys(clean_text(w, WARNING_CHARS) for w in said))[:MAX_WARNINGS]
    return evaluated, out


def plausible_time(when: float | None) -> bool:
    return when is not None and 0.0 < when < _LATEST_TIME


def sample_time(sample: dict[str, Any]) -> float:
    try:
        return float(sample["value"][0])
    except (KeyError, IndexError, TypeError, ValueError):
        return 0.0


def sample_value(sample: dict[str, Any]) -> float | None:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def spawn(fn: Callable[..., Any], *args: Any) -> "Future[Any]":
    """``fn(*args)`` in a daemon thread (never joined at exit, unlike an executor's threads, so
    a slow Prometheus cannot keep the process alive after the dashboard quit)."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="allsmi-promql").start()
    return future

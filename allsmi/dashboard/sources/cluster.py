"""The cluster source: other nodes' ``allsmi serve`` read over HTTP.

Each host is fetched with ``GET <url>/api/v1/snapshot`` (the whole answer
within the timeout, no redirects, at most 8 MiB and 500,000 JSON values) and
parsed with :func:`allsmi.output.snapshot_from_dict`, which checks every value
(wrong ones are nulled and listed as the host's problems). A refresh round starts the hosts
that are due, at most ``max_concurrency`` at a time, each in a daemon
thread with its own timeout, so one hung host delays nobody and quitting
never waits for the network. A host still in flight from an earlier round is
not asked again. A failing host is retried with exponential back-off
(one interval, then 2x, 4x... up to ``max_backoff`` seconds); its last good
snapshot stays on screen, marked stale, with its age.

Connections go direct (proxy variables are ignored: the nodes of a cluster
are on its own network). ``http://user:password@host:port`` sends basic
authentication, for servers started with ``--web-config``.
"""

from __future__ import annotations

import base64
import collections
import functools
import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, Union

from allsmi.output import SnapshotFormatError, snapshot_from_dict
from allsmi.schema import Snapshot
from allsmi.support.nethint import redact_url
from allsmi.schema.text import unresolvable_host

from allsmi.dashboard.sources.fetch import HttpError, tls_context
from allsmi.dashboard.sources.fetch import get as http_get
from allsmi.dashboard.sources import Clock, HostState, shared_devices

SNAPSHOT_PATH = "/api/v1/snapshot"
#: A snapshot of a thousand devices is about 1 MiB; anything far larger is not ours.
MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_CONCURRENCY = 16
DEFAULT_MAX_BACKOFF_SECONDS = 60.0
#: The largest hosts file read (about 100,000 hosts): a larger one is refused before it is parsed.
MAX_HOSTFILE_BYTES = 4 * 1024 * 1024
#: The longest host name DNS allows.
MAX_HOSTNAME_CHARS = 253
#: Polls remembered per host to tell a flapping host (some answered, some not) from a down one.
FLAP_WINDOW = 8

Fetch = Callable[["Endpoint", float], Union["Fetched", Snapshot]]


class FetchError(Exception):
    """A host could not be read; the message is what the screen shows."""


class HostfileError(ValueError):
    """A hosts file is unreadable or has a line that is not a URL."""


@dataclass(frozen=True)
class Endpoint:
    """Where one node's ``allsmi serve`` answers."""

    url: str
    """Base URL without credentials or trailing slash (``http://10.0.0.7:9477``)."""
    key: str
    """``host:port``: how the host is named on screen until it reports its hostname."""
    authorization: str | None = None
    """``Basic ...`` header value from credentials in the URL."""


def parse_endpoint(text: str) -> Endpoint:
    """An endpoint from ``http(s)://[user:pass@]host:port[/prefix]`` or bare ``host:port``."""
    raw = text.strip()
    shown = redact_url(raw, keep_user=False)
    if len(shown) > 120:
        shown = shown[:119] + "…"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in raw):
        raise ValueError(f"{shown!r} contains a space or a control character (percent-encode "
                         "it in a password: %20)")
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urllib.parse.urlsplit(raw)
    except ValueError as exc:  # ("Invalid IPv6 URL")
        raise ValueError(f"not an http(s) URL or host:port: {shown!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL or host:port: {shown!r}")
    if len(parts.hostname) > MAX_HOSTNAME_CHARS:
        raise ValueError(f"host name longer than {MAX_HOSTNAME_CHARS} characters in {shown!r}")
    problem = unresolvable_host(parts.hostname)
    if problem:
        raise ValueError(f"{problem} in {shown!r}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # (what follows the host is not shown: a password cut at a space may be it)
        typed = f"{parts.scheme}://{parts.hostname}" if "://" in text else parts.hostname
        raise ValueError(f"bad port after {typed!r} (a port from 1 to 65535)")
    path = parts.path.rstrip("/")
    if path.endswith(SNAPSHOT_PATH):
        path = path[:-len(SNAPSHOT_PATH)]
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host if port is None else f"{host}:{port}"
    auth = None
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    # The key includes the path: two nodes behind one reverse proxy are two hosts.
    return Endpoint(url=f"{parts.scheme}://{netloc}{path}", key=netloc + path, authorization=auth)


def read_hostfile(path: str | Path) -> list[str]:
    """Host URLs from a file: one per line; blank lines and ``#`` comments are ignored."""
    from allsmi.support.boundedread import Unreadable, read_text
    try:
        text = read_text(path, MAX_HOSTFILE_BYTES, "hosts file")
    except Unreadable as exc:
        raise HostfileError(exc.located(path)) from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            parse_endpoint(entry)
        except ValueError as exc:
            raise HostfileError(f"{path}, line {number}: {exc}") from None
        out.append(entry)
    if not out:
        raise HostfileError(f"{path}: no hosts listed")
    return out


#: JSON values (commas, colons and brackets counted, a cheap upper bound) one answer may hold:
#: about twelve times a 1000-device snapshot. Checked before parsing, so that a document of
#: millions of empty objects is refused instead of costing gigabytes of Python objects.
MAX_JSON_VALUES = 500_000
#: One parse at a time: the memory a parse needs (about 70 MiB at the bounds above) is not
#: multiplied by ``--max-concurrency``.
_PARSE_LOCK = threading.Lock()


@dataclass(frozen=True)
class Fetched:
    """What one fetch brought: the snapshot and what was wrong in it."""

    snapshot: Snapshot
    problems: tuple[str, ...] = ()
    """Values the parser nulled or left out (see :mod:`allsmi.snapshot_parse`)."""
    process_details: bool | None = None
    """``False`` when the host says it does not export process command lines and users."""


def fetch_host(endpoint: Endpoint, timeout: float, context: ssl.SSLContext | None = None) -> Fetched:
    """One snapshot from ``endpoint``, checked; :class:`FetchError` with a short reason otherwise.

    The whole answer must arrive within ``timeout`` seconds; redirects are not followed
    (credentials go only where they were given); the body is capped at :data:`MAX_BODY_BYTES`
    and :data:`MAX_JSON_VALUES`.
    """
    headers = {"Accept": "application/json", "Accept-Encoding": "gzip", "User-Agent": "allsmi-view"}
    if endpoint.authorization:
        headers["Authorization"] = endpoint.authorization
    try:
        answer = http_get(endpoint.url + SNAPSHOT_PATH, headers=headers, timeout=timeout,
                          max_bytes=MAX_BODY_BYTES, context=context)
    except HttpError as exc:
        raise FetchError(str(exc)) from None
    if answer.status == 503:
        raise FetchError("not ready yet (HTTP 503)")
    if answer.status == 401:
        if endpoint.authorization:
            raise FetchError("HTTP 401: the user and password in the URL were refused")
        raise FetchError("HTTP 401: needs user:password@ in the URL")
    if answer.status != 200:
        raise FetchError(f"HTTP {answer.status} {answer.reason}".strip())
    body = answer.body
    values = body.count(b",") + body.count(b":") + body.count(b"{") + body.count(b"[")
    if values > MAX_JSON_VALUES:
        raise FetchError(f"answer has more than {MAX_JSON_VALUES} JSON values")
    problems: list[str] = []
    with _PARSE_LOCK:
        try:
            data = json.loads(body)
        except RecursionError:
            raise FetchError("not JSON: nested too deeply") from None
        except ValueError as exc:
            raise FetchError(f"not JSON: {exc}") from None
        try:
            snapshot = snapshot_from_dict(data, problems)
        except SnapshotFormatError as exc:
            raise FetchError(f"not a snapshot: {exc}") from None
        details = data.get("process_details") if isinstance(data, dict) else None
        del data
    return Fetched(snapshot, tuple(problems), details if isinstance(details, bool) else None)


def fetch_snapshot(endpoint: Endpoint, timeout: float) -> Snapshot:
    """The snapshot of :func:`fetch_host` alone."""
    return fetch_host(endpoint, timeout).snapshot


class _Host:
    """Mutable per-host state; guarded by the source's lock."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.snapshot: Snapshot | None = None
        self.received: float | None = None
        self.error: str | None = None
        self.failures = 0
        self.retry_at: float | None = None
        self.last_attempt: float | None = None
        self.in_flight = False
        self.problems: tuple[str, ...] = ()
        self.process_details: bool | None = None
        self.outcomes: collections.deque[bool] = collections.deque(maxlen=FLAP_WINDOW)
        """Whether each of the last polls was answered."""

    @property
    def flapping(self) -> tuple[int, int] | None:
        """(answered, asked) over the last polls when the host came back after failing and
        failed again (a host that just went down after answering is down, not flapping)."""
        outcomes = list(self.outcomes)
        if False not in outcomes:
            return None
        came_back = True in outcomes[outcomes.index(False):]
        return (sum(outcomes), len(outcomes)) if came_back and not outcomes[-1] else None


class ClusterSource:
    """Many nodes' ``allsmi serve`` endpoints; see the module docstring."""

    cluster = True
    fetches = True

    def __init__(self, urls: Sequence[str], *, interval: float = 2.0, timeout: float = 5.0,
                 max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
                 max_backoff: float = DEFAULT_MAX_BACKOFF_SECONDS,
                 clock: Clock = time.monotonic, fetch: Fetch = fetch_host,
                 ca_file: str | None = None) -> None:
        if not urls:
            raise ValueError("no hosts given")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        endpoints = [parse_endpoint(u) for u in urls]
        seen: set[str] = set()
        self._hosts = []
        for endpoint in endpoints:
            if endpoint.key not in seen:  # the same host twice would be fetched twice
                seen.add(endpoint.key)
                self._hosts.append(_Host(endpoint))
        self.interval = interval
        self.timeout = timeout
        self.max_concurrency = max_concurrency
        self.max_backoff = max_backoff
        self.clock = clock
        if ca_file is not None:  # one context for every fetch; ValueError if the file is bad
            fetch = functools.partial(fetch, context=tls_context(ca_file))
        self._fetch = fetch
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self.in_flight_peak = 0
        """Most fetches seen running at once (tests check the bound)."""
        self._arrivals = 0
        self._shared_at = 0
        self._shared: dict[str, tuple[int, tuple[str, ...]]] = {}

    def hosts(self) -> Sequence[HostState]:
        with self._lock:
            if self._shared_at != self._arrivals:  # recomputed only when a snapshot arrived
                self._shared = shared_devices((h.endpoint.key, d.id) for h in self._hosts
                                              if h.snapshot is not None for d in h.snapshot.devices)
                self._shared_at = self._arrivals
            return [HostState(h.endpoint.key,
                              (h.snapshot.host.hostname if h.snapshot else "") or h.endpoint.key,
                              h.snapshot, h.received, address=h.endpoint.url, error=h.error,
                              retry_at=h.retry_at, problems=h.problems,
                              process_details=h.process_details, answered=h.flapping,
                              shared=self._shared.get(h.endpoint.key, (0, ()))[0],
                              shared_with=self._shared.get(h.endpoint.key, (0, ()))[1])
                    for h in self._hosts]

    def backoff(self, failures: int) -> float:
        """Seconds before the next attempt after ``failures`` failures in a row."""
        return min(self.max_backoff, self.interval * 2 ** max(0, failures - 1))

    def refresh(self, cancelled: Callable[[], bool]) -> None:
        """Start every due host (bounded), wait for them up to about one interval."""
        now = self.clock()
        with self._lock:
            due = [h for h in self._hosts if not h.in_flight and (h.retry_at is None or now >= h.retry_at)]
        # Least recently tried first, so a long host list is served round-robin.
        due.sort(key=lambda h: -1.0 if h.last_attempt is None else h.last_attempt)
        deadline = time.monotonic() + max(self.interval, self.timeout) + 0.5
        threads: list[threading.Thread] = []
        for host in due:
            while not self._slots.acquire(timeout=0.05):
                if cancelled() or time.monotonic() >= deadline:
                    return
            with self._lock:
                host.in_flight = True
                host.last_attempt = self.clock()
                running = sum(1 for h in self._hosts if h.in_flight)
                self.in_flight_peak = max(self.in_flight_peak, running)
            thread = threading.Thread(target=self._fetch_one, args=(host,), daemon=True,
                                      name=f"allsmi-view-{host.endpoint.key}")
            thread.start()
            threads.append(thread)
        for thread in threads:
            while thread.is_alive():
                if cancelled() or time.monotonic() >= deadline:
                    return
                thread.join(0.05)

    def _fetch_one(self, host: _Host) -> None:
        try:
            got = self._fetch(host.endpoint, self.timeout)
            fetched = got if isinstance(got, Fetched) else Fetched(got)
        except Exception as exc:  # any failure is this host's problem, shown on its row
            message = str(exc) if isinstance(exc, FetchError) else f"{type(exc).__name__}: {exc}"
            with self._lock:
                host.failures += 1
                host.error = message
                host.outcomes.append(False)
                # A flapping host is asked again after one interval: its answers are worth having.
                wait = self.interval if host.flapping else self.backoff(host.failures)
                host.retry_at = self.clock() + wait
        else:
            with self._lock:
                host.snapshot, host.received = fetched.snapshot, self.clock()
                self._arrivals += 1
                host.problems, host.process_details = fetched.problems, fetched.process_details
                host.error, host.failures, host.retry_at = None, 0, None
                host.outcomes.append(True)
        finally:
            with self._lock:
                host.in_flight = False
            self._slots.release()

    def history(self) -> Sequence[tuple[str, Snapshot]]:
        return []

    def close(self) -> None:
        """Fetch threads are daemons holding no resources beyond their socket."""

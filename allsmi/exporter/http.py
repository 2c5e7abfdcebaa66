"""The HTTP side of ``allsmi serve``: prepared bytes over a bounded connection loop.

Endpoints: ``/metrics`` (text 0.0.4, or OpenMetrics when the ``Accept``
header asks for it; gzip when ``Accept-Encoding`` does), ``/healthz`` (the
process is alive), ``/ready`` (200 while the exposition is fresh and the
ledger, if any, is written; 503 with the reason otherwise),
``/api/v1/snapshot`` (the latest snapshot JSON; users and command lines only
with ``--processes``) and ``/``.

Connections are handled by :class:`allsmi.exporter.connections.ConnectionLoop`
(deadlines, per-client bounds, eviction of the slowest head readers); this
module parses a complete request head (with h11: :mod:`allsmi.exporter.request`) and
routes it.
"""

from __future__ import annotations

import errno
import logging
import socket
from http import HTTPStatus
from typing import Any

from allsmi import __version__
from allsmi.exporter.exposition import (JSON_CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE,
                                        TEXT_CONTENT_TYPE, Exposition, NotRendered)
from allsmi.exporter.connections import SHARED, ConnectionLoop, Limits, Reply
from allsmi.exporter.request import BadRequest, Request, http_date, parse_head, response_head
from allsmi.exporter.webconfig import WebConfig
from allsmi.exporter.webreload import WebConfigWatcher

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 128
SERVER = f"allsmi/{__version__}"

_INDEX = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>allsmi exporter</title></head>
<body><h1>allsmi exporter {version}</h1>
<ul>
<li><a href="metrics">/metrics</a>: Prometheus metrics (text 0.0.4 or OpenMetrics)</li>
<li><a href="api/v1/snapshot">/api/v1/snapshot</a>: the latest snapshot as JSON</li>
<li><a href="healthz">/healthz</a>: liveness</li>
<li><a href="ready">/ready</a>: readiness (a fresh exposition; the ledger, if any, written)</li>
</ul></body></html>
"""


def _weights(header: str | None) -> list[tuple[str, float]]:
    """(lower-case media range or coding, q) of each element of an ``Accept`` or
    ``Accept-Encoding`` header; an element whose q is not a number is left out."""
    out = []
    for part in (header or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        q = 1.0
        for param in fields[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = -1.0
        if fields[0] and q >= 0.0:
            out.append((fields[0].lower(), q))
    return out


def _accepts(header: str | None, coding: str) -> bool:
    """Whether an ``Accept-Encoding`` header lists ``coding`` with a non-zero q."""
    return any(name == coding and q > 0.0 for name, q in _weights(header))


def _wants_openmetrics(header: str | None) -> bool:
    """Whether the ``Accept`` header prefers OpenMetrics to the text format: it names
    ``application/openmetrics-text`` with a non-zero q, no lower than the q the text format
    gets from its most specific range (``text/plain``, else ``text/*``, else ``*/*``; RFC 9110
    section 12.5.1). Prometheus lists its ``scrape_protocols`` with falling q: one that puts
    ``PrometheusText0.0.4`` first gets the text format. A tie goes to OpenMetrics."""
    weights = _weights(header)
    openmetrics = max((q for name, q in weights if name == "application/openmetrics-text"),
                      default=0.0)
    text = 0.0
    for media in ("*/*", "text/*", "text/plain"):  # the most specific range present wins
        text = max((q for name, q in weights if name == media), default=text)
    return openmetrics > 0.0 and openmetrics >= text


class _NeedsPool(Exception):
    """The request needs a bcrypt check: answer it on the thread pool, not the loop."""


class _NeedsRendering(Exception):
    """The request needs the cycle's rendering: answer it on the thread pool, in one turn with
    the others that need it (:data:`~allsmi.exporter.connections.SHARED`)."""


_TEXT = "text/plain; charset=utf-8"
#: The paths answered from the rendered exposition.
_RENDERED = frozenset({"/metrics", "/api/v1/snapshot"})


class _Answer:
    """One request, parsed from its complete head by h11; the reply is collected, not written."""

    def __init__(self, server: "MetricsServer", head: bytes, client_address: Any, fast: bool) -> None:
        self.server = server
        self.head_bytes = head
        self.client_address = client_address
        self.fast = fast

    def reply(self) -> Reply:
        try:
            request = parse_head(self.head_bytes)
        except BadRequest as exc:
            log.debug("%s: malformed request (%s): answered %d and closed",
                      self.client_address, exc, exc.status)
            reason = str(exc)[:200]  # h11's reason may quote the request: bounded
            return self._reply(exc.status, f"{HTTPStatus(exc.status).phrase}: {reason}\n".encode(
                "utf-8", "replace"), _TEXT, close=True, head=False)
        return self._route(request)

    def _route(self, request: Request) -> Reply:
        head = request.method == "HEAD"
        if request.method not in ("GET", "HEAD"):
            return self._reply(HTTPStatus.METHOD_NOT_ALLOWED, b"Method Not Allowed\n", _TEXT,
                               request=request, head=head, extra={"Allow": "GET, HEAD"})
        auth = self.server.web.auth
        if auth is not None:
            header = request.headers.get("authorization")
            if not auth.cached(header):
                if self.fast and header:
                    raise _NeedsPool()
                if not auth.check(header):
                    return self._reply(
                        HTTPStatus.UNAUTHORIZED, b"Unauthorized\n", _TEXT, request=request,
                        head=head, extra={"WWW-Authenticate": 'Basic realm="allsmi", charset="UTF-8"'})
        path = request.path
        exposition = self.server.exposition
        gzipped = _accepts(request.headers.get("accept-encoding"), "gzip")
        openmetrics = path == "/metrics" and _wants_openmetrics(request.headers.get("accept"))
        kind = "openmetrics" if openmetrics else "text" if path == "/metrics" else "json"
        # The cycle's first request renders it (once, however many ask), and a format or an
        # encoding not made yet is made, on the thread pool: never on the loop's thread,
        # which holds every other connection.
        try:
            rendered = exposition.latest(render=not self.fast) if path in _RENDERED else None
            if rendered is not None and self.fast and not rendered.prepared(kind, gzipped):
                raise _NeedsRendering()
            readiness = exposition.readiness(render=not self.fast) if path == "/ready" else None
        except NotRendered:
            raise _NeedsRendering() from None
        if path == "/metrics":
            if rendered is None:
                return self._unavailable(request, head)
            return self._reply(HTTPStatus.OK, rendered.body(openmetrics=openmetrics, gzipped=gzipped),
                               OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE,
                               request=request, head=head, gzipped=gzipped)
        if path == "/api/v1/snapshot":
            if rendered is None or not rendered.complete:
                return self._unavailable(request, head, rendered is not None)
            return self._reply(HTTPStatus.OK, rendered.snapshot_json(gzipped=gzipped),
                               JSON_CONTENT_TYPE, request=request, head=head, gzipped=gzipped)
        if path == "/healthz":
            return self._reply(HTTPStatus.OK, b"OK\n", _TEXT, request=request, head=head)
        if readiness is not None:
            ready, why = readiness
            return self._reply(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE,
                               why.encode("utf-8") + b"\n", _TEXT, request=request, head=head,
                               extra=None if ready else {"Retry-After": "1"})
        if path in ("/", "/index.html"):
            return self._reply(HTTPStatus.OK, _INDEX.format(version=__version__).encode("utf-8"),
                               "text/html; charset=utf-8", request=request, head=head)
        return self._reply(HTTPStatus.NOT_FOUND, b"Not Found\n", _TEXT, request=request, head=head)

    def _unavailable(self, request: Request, head: bool, unrenderable: bool = False) -> Reply:
        why = (b"the latest collection cycle could not be rendered (the log says why; "
               b"allsmi_exporter_render_errors_total counts them)\n") if unrenderable \
            else b"no collection cycle has completed yet\n"
        return self._reply(HTTPStatus.SERVICE_UNAVAILABLE, why, _TEXT, request=request, head=head,
                           extra={"Retry-After": "1"})

    def _reply(self, status: int, body: bytes, content_type: str, *, head: bool,
               request: Request | None = None, close: bool = False, gzipped: bool = False,
               extra: dict[str, str] | None = None) -> Reply:
        close = close or request is None or not request.keep_alive
        headers = [("Server", SERVER), ("Date", http_date()), ("Content-Type", content_type),
                   ("Content-Length", str(len(body)))]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Vary", "Accept, Accept-Encoding"))
        headers.extend({**self.server.web.headers, **(extra or {})}.items())
        if close:
            headers.append(("Connection", "close"))
        elif request is not None and request.say_keep_alive:
            headers.append(("Connection", "keep-alive"))
        # the prepared body is sent as is, not copied
        return Reply([response_head(status, headers), b"" if head else body], close, int(status))


#: Hosts that mean every interface of both families, IPv4 and IPv6 (``--listen :PORT`` gives
#: ``""``). ``0.0.0.0`` is IPv4's every interface only: an operator who wrote it (and firewalls
#: IPv4) is not made reachable over IPv6.
DUAL_STACK_HOSTS = frozenset({"", "::"})


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (raises ``OSError``).

    ``""`` (``--listen :PORT``) or ``::`` listens on every interface of both families with one
    dual-stack socket (``IPV6_V6ONLY`` off), as Go's ``net.Listen("tcp", ":9100")`` does for
    node_exporter and every other Go exporter: a Prometheus scraping the node's or the pod's
    IPv6 address (an IPv6 or dual-stack cluster) is answered. Where the kernel has no IPv6,
    ``""`` is the IPv4 wildcard. Any other host binds its first address only."""
    if host in DUAL_STACK_HOSTS and socket.has_ipv6:
        try:
            dual = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        except OSError:  # no IPv6 in this kernel: the IPv4 wildcard below
            if host == "::":
                raise
        else:
            try:
                return _bind(dual, ("::", port), dual_stack=True)
            except OSError as exc:
                # EADDRINUSE is an answer; IPv6 present but unusable here is not
                if host == "::" or exc.errno == errno.EADDRINUSE:
                    raise
    infos = socket.getaddrinfo(host or None, port,
                               family=socket.AF_INET if not host else 0,
                               type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    return _bind(socket.socket(family, socket.SOCK_STREAM), address)


def _bind(listener: socket.socket, address: Any, dual_stack: bool = False) -> socket.socket:
    """``listener`` bound to ``address`` and listening; closed if that fails."""
    try:
        if dual_stack:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        # rebinding over TIME_WAIT only; a live listener still conflicts
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(LISTEN_BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


class MetricsServer:
    """The exporter's HTTP server; binds in the constructor (raises ``OSError``)."""

    def __init__(self, host: str, port: int, exposition: Exposition, *,
                 web: WebConfig | None = None, limits: Limits | None = None) -> None:
        self.exposition = exposition
        self.web = web or WebConfig()
        self.limits = limits or Limits.for_this_process()
        listener = listening_socket(host, port)
        self.socket = listener
        self.server_address = listener.getsockname()
        self.loop = ConnectionLoop(listener, self.respond, ssl_context=self.web.ssl_context,
                                   limits=self.limits)
        #: Re-reads ``--web-config`` when it or a file it names changes (``None`` without
        #: one); ``allsmi serve`` publishes its outcome (``Exposition.web_config``).
        self.web_watcher = WebConfigWatcher(self.web, self._use) if self.web.path else None

    def _use(self, web: WebConfig) -> None:
        """Answer with ``web`` from now on: the next TLS handshake, the next request (one
        reference each: a request in progress finishes with what it started with)."""
        self.loop.ssl_context = web.ssl_context
        self.web = web

    @property
    def url(self) -> str:
        """Where the server listens, as a URL."""
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else str(host)
        scheme = "https" if self.web.ssl_context is not None else "http"
        return f"{scheme}://{host}:{port}/"

    def respond(self, head: bytes, client_address: Any, fast: bool) -> Reply | None:
        try:
            return _Answer(self, head, client_address, fast).reply()
        except _NeedsPool:
            return None
        except _NeedsRendering:
            return SHARED

    def serve_forever(self, poll_interval: float = 0.5) -> None:  # noqa: ARG002 - socketserver's signature
        """Serve until :meth:`shutdown`."""
        if self.web_watcher is not None:
            self.web_watcher.start()
        self.loop.serve_forever()

    def shutdown(self) -> None:
        """Stop serving; returns once :meth:`serve_forever` has returned."""
        self.loop.stop()

    def server_close(self) -> bool:
        """Close the listening socket and the loop's resources; whether every worker thread
        (password checks) ended."""
        if self.web_watcher is not None:
            self.web_watcher.stop()
        self.socket.close()
        return self.loop.close()

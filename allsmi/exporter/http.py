"""The HTTP side of ``allsmi serve``: prepared bytes over a bounded connection loop.

Endpoints: ``/metrics`` (text 0.0.4, or OpenMetrics when the ``Accept``
header asks for it; gzip when ``Accept-Encoding`` does), ``/healthz`` (the
process is alive), ``/ready`` (200 while the exposition is fresh and the
ledger, if any, is written; 503 with the reason otherwise),
``/api/v1/snapshot`` (the latest snapshot JSON; users and command lines only
with ``--processes``) and ``/``.

Connections are handled by :class:`allsmi.exporter.connections.ConnectionLoop`
(deadlines, per-client bounds, eviction of the slowest head readers); this
module parses a complete request head and routes it.
"""

from __future__ import annotations

import io
import logging
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from allsmi import __version__
from allsmi.exporter.exposition import (JSON_CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE,
                                        TEXT_CONTENT_TYPE, Exposition)
from allsmi.exporter.connections import ConnectionLoop, Limits, Reply
from allsmi.exporter.webconfig import WebConfig

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 128

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


def _accepts(header: str | None, media: str) -> bool:
    """Whether an ``Accept``/``Accept-Encoding`` header lists ``media`` with a non-zero q."""
    for part in (header or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        if fields[0].lower() != media:
            continue
        for param in fields[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    if float(value) <= 0.0:
                        break
                except ValueError:
                    break
        else:
            return True
    return False


class _NeedsPool(Exception):
    """The request needs a bcrypt check: answer it on the thread pool, not the loop."""


class _Handler(BaseHTTPRequestHandler):
    """One request, parsed from its complete head; the reply is collected, not written.

    :class:`~allsmi.exporter.connections.ConnectionLoop` has already read the
    request line and headers (within its deadline); this class only parses
    them (``http.server``'s parser and error replies) and routes.
    """

    protocol_version = "HTTP/1.1"
    # A garbled request line is answered with a status line and headers, never the bare
    # HTML body that http.server sends to "HTTP/0.9" clients.
    default_request_version = "HTTP/1.0"
    server_version = f"allsmi/{__version__}"
    server: "MetricsServer"

    def __init__(self, head: bytes, client_address: Any, server: "MetricsServer", fast: bool) -> None:
        # BaseHTTPRequestHandler.__init__ would read from a socket: set up by hand instead.
        self.rfile = io.BytesIO(head)
        self.wfile = io.BytesIO()
        self.client_address = client_address
        self.server = server
        self.request = None
        self.fast = fast
        self.body = b""
        self.close_connection = True

    def reply(self) -> Reply:
        self.handle_one_request()
        headers = getattr(self, "headers", None)
        if headers is not None and (headers.get("Content-Length", "0").strip() not in ("", "0")
                                    or headers.get("Transfer-Encoding")):
            self.close_connection = True  # request bodies are never read: do not misparse one
        return Reply([self.wfile.getvalue(), self.body], bool(self.close_connection))

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        self._route(head=True)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._route(head=False)

    def _route(self, *, head: bool) -> None:
        auth = self.server.web.auth
        if auth is not None:
            header = self.headers.get("Authorization")
            if not auth.cached(header):
                if self.fast and header:
                    raise _NeedsPool()
                if not auth.check(header):
                    self._send(HTTPStatus.UNAUTHORIZED, b"Unauthorized\n", "text/plain; charset=utf-8",
                               head=head,
                               extra={"WWW-Authenticate": 'Basic realm="allsmi", charset="UTF-8"'})
                    return
        path = self.path.split("?", 1)[0]
        exposition = self.server.exposition
        rendered = exposition.current
        gzipped = _accepts(self.headers.get("Accept-Encoding"), "gzip")
        if path == "/metrics":
            if rendered is None:
                self._unavailable(head)
                return
            openmetrics = _accepts(self.headers.get("Accept"), "application/openmetrics-text")
            self._send(HTTPStatus.OK, rendered.body(openmetrics=openmetrics, gzipped=gzipped),
                       OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE,
                       head=head, gzipped=gzipped)
        elif path == "/api/v1/snapshot":
            if rendered is None or not rendered.complete:
                self._unavailable(head)
                return
            self._send(HTTPStatus.OK, rendered.snapshot_json(gzipped=gzipped), JSON_CONTENT_TYPE,
                       head=head, gzipped=gzipped)
        elif path == "/healthz":
            self._send(HTTPStatus.OK, b"OK\n", "text/plain; charset=utf-8", head=head)
        elif path == "/ready":
            ready, why = exposition.readiness()
            self._send(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE,
                       why.encode("utf-8") + b"\n", "text/plain; charset=utf-8", head=head,
                       extra=None if ready else {"Retry-After": "1"})
        elif path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, _INDEX.format(version=__version__).encode("utf-8"),
                       "text/html; charset=utf-8", head=head)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"Not Found\n", "text/plain; charset=utf-8", head=head)

    def _unavailable(self, head: bool) -> None:
        self._send(HTTPStatus.SERVICE_UNAVAILABLE, b"no collection cycle has completed yet\n",
                   "text/plain; charset=utf-8", head=head, extra={"Retry-After": "1"})

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, *, head: bool,
              gzipped: bool = False, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Vary", "Accept, Accept-Encoding")
        for name, value in {**self.server.web.headers, **(extra or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.body = body  # sent as is: the prepared bytes are not copied


class MetricsServer:
    """The exporter's HTTP server; binds in the constructor (raises ``OSError``)."""

    def __init__(self, host: str, port: int, exposition: Exposition, *,
                 web: WebConfig | None = None, limits: Limits | None = None) -> None:
        self.exposition = exposition
        self.web = web or WebConfig()
        self.limits = limits or Limits.for_this_process()
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            # rebinding over TIME_WAIT only; a live listener still conflicts
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(address)
            listener.listen(LISTEN_BACKLOG)
        except OSError:
            listener.close()
            raise
        self.socket = listener
        self.server_address = listener.getsockname()
        self.loop = ConnectionLoop(listener, self.respond, ssl_context=self.web.ssl_context,
                                   limits=self.limits)

    @property
    def url(self) -> str:
        """Where the server listens, as a URL."""
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else str(host)
        scheme = "https" if self.web.ssl_context is not None else "http"
        return f"{scheme}://{host}:{port}/"

    def respond(self, head: bytes, client_address: Any, fast: bool) -> Reply | None:
        try:
            return _Handler(head, client_address, self, fast).reply()
        except _NeedsPool:
            return None

    def serve_forever(self, poll_interval: float = 0.5) -> None:  # noqa: ARG002 - socketserver's signature
        """Serve until :meth:`shutdown`."""
        self.loop.serve_forever()

    def shutdown(self) -> None:
        """Stop serving; returns once :meth:`serve_forever` has returned."""
        self.loop.stop()

    def server_close(self) -> None:
        """Close the listening socket and the loop's resources."""
        self.socket.close()
        self.loop.close()

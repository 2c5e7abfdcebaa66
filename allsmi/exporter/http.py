"""The HTTP side of ``allsmi serve``: a bounded, threaded server over prepared bytes.

Endpoints: ``/metrics`` (text 0.0.4, or OpenMetrics when the ``Accept``
header asks for it; gzip when ``Accept-Encoding`` does), ``/healthz`` (the
process is alive), ``/ready`` (503 until the first collection cycle has been
rendered), ``/api/v1/snapshot`` (the latest snapshot JSON) and ``/``.

Bounds: at most ``max_connections`` connections are served at once (more are
answered 503 and closed), an idle or slow connection is dropped after
``timeout`` seconds, request lines and headers are limited by
:mod:`http.server`. TLS handshakes happen in the connection's own thread, so
a slow client never blocks ``accept``.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from allsmi import __version__
from allsmi.exporter.exposition import (JSON_CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE,
                                        TEXT_CONTENT_TYPE, Exposition)
from allsmi.exporter.webconfig import WebConfig

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_TIMEOUT_SECONDS = 10.0

_INDEX = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>allsmi exporter</title></head>
<body><h1>allsmi exporter {version}</h1>
<ul>
<li><a href="metrics">/metrics</a>: Prometheus metrics (text 0.0.4 or OpenMetrics)</li>
<li><a href="api/v1/snapshot">/api/v1/snapshot</a>: the latest snapshot as JSON</li>
<li><a href="healthz">/healthz</a>: liveness</li>
<li><a href="ready">/ready</a>: readiness (first collection done)</li>
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in one write, without Nagle: a small response
    # otherwise waits ~40 ms for the client's delayed ACK on keep-alive connections.
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024
    server_version = f"allsmi/{__version__}"
    server: "MetricsServer"

    def setup(self) -> None:
        self.timeout = self.server.request_timeout
        super().setup()

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
        if auth is not None and not auth.check(self.headers.get("Authorization")):
            self._send(HTTPStatus.UNAUTHORIZED, b"Unauthorized\n", "text/plain; charset=utf-8",
                       head=head, extra={"WWW-Authenticate": 'Basic realm="allsmi", charset="UTF-8"'})
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
            if rendered is None:
                self._unavailable(head)
                return
            self._send(HTTPStatus.OK, rendered.snapshot_json(gzipped=gzipped), JSON_CONTENT_TYPE,
                       head=head, gzipped=gzipped)
        elif path == "/healthz":
            self._send(HTTPStatus.OK, b"OK\n", "text/plain; charset=utf-8", head=head)
        elif path == "/ready":
            if rendered is None:
                self._unavailable(head)
            else:
                self._send(HTTPStatus.OK, b"ready\n", "text/plain; charset=utf-8", head=head)
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
            self.wfile.write(body)


class MetricsServer(ThreadingHTTPServer):
    """The exporter's HTTP server; binds in the constructor (raises ``OSError``)."""

    daemon_threads = True
    allow_reuse_address = True  # rebinding over TIME_WAIT only; a live listener still conflicts
    request_queue_size = 128

    def __init__(self, host: str, port: int, exposition: Exposition, *,
                 web: WebConfig | None = None, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 request_timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.exposition = exposition
        self.web = web or WebConfig()
        self.request_timeout = request_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        self.address_family = infos[0][0]
        super().__init__(infos[0][4][:2], _Handler)

    @property
    def url(self) -> str:
        """Where the server listens, as a URL."""
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else str(host)
        scheme = "https" if self.web.ssl_context is not None else "http"
        return f"{scheme}://{host}:{port}/"

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.request_timeout)
        context = self.web.ssl_context
        if context is None:
            self.RequestHandlerClass(request, client_address, self)
            return
        try:
            secure = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            self.RequestHandlerClass(secure, client_address, self)
        finally:
            try:
                secure.close()
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("request from %s failed", client_address, exc_info=True)

    def _refuse(self, request: socket.socket) -> None:
        try:
            request.settimeout(1.0)
            if self.web.ssl_context is None:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Retry-After: 1\r\nConnection: close\r\n\r\n")
        except OSError:
            pass
        finally:
            self.shutdown_request(request)

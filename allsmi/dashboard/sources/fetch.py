"""One HTTP GET with a deadline on the whole answer: what the cluster and Prometheus sources use.

``urllib``'s timeout applies to each socket operation, so a server that
trickles one byte a second keeps a request alive for ever. Here a watchdog
shuts the socket down when the deadline for the *whole* answer (connect,
headers and body) has passed, wherever the reading thread is blocked.

Redirects are never followed (a 3xx is an error naming where it pointed): a
snapshot is read from the address the operator gave, and credentials given
for one address are never sent anywhere else. Proxy variables are ignored
(the nodes of a cluster are on its own network). The body is capped in bytes
(and again after gzip decompression).
"""

from __future__ import annotations

import base64
import gzip
import http.client
import io
import re
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from email.message import Message

CHUNK = 64 * 1024


_USERINFO = re.compile(r"""(^|//|[\s'"(<=])[^\s/'"<>()@]*@""")


def redact(text: str) -> str:
    """``text`` with the credentials of every URL or ``user:password@host`` in it replaced by
    ``***`` (``http://***@gpu1:9477``): what may reach the screen, a log or an error message."""
    return _USERINFO.sub(r"\1***@", text)


def split_credentials(url: str) -> tuple[str, str | None]:
    """(``url`` without its credentials, the ``Basic ...`` header they make, or ``None``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    netloc = parts.netloc.rsplit("@", 1)[1]
    header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), header


#: How a server that speaks only TLS answers a plain-HTTP request: it drops the connection.
_DROPPED = (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
            http.client.BadStatusLine)


class HttpError(Exception):
    """The request failed; the message is short and meant for the screen."""


@dataclass(frozen=True)
class Answer:
    """A complete response."""

    status: int
    reason: str
    headers: Message
    body: bytes


def _location(headers: Message) -> str:
    where = redact(headers.get("Location") or "?")
    return where if len(where) <= 80 else where[:79] + "\u2026"


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """The TLS context for ``https://`` hosts: the system's CAs, or only those in ``ca_file`` (PEM;
    ``--ca-file``). :class:`ValueError` naming the file when it cannot be loaded or is no regular
    file (a FIFO: :mod:`ssl` would wait for its writer forever)."""
    try:
        if ca_file:
            from allsmi.support.boundedread import regular_file
            regular_file(ca_file)
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise ValueError(f"cannot load the CA file {ca_file}: {reason}") from None


def get(url: str, *, headers: dict[str, str], timeout: float, max_bytes: int,
        context: ssl.SSLContext | None = None) -> Answer:
    """``GET url``: the whole answer within ``timeout`` seconds, at most ``max_bytes`` of body.

    Raises :class:`HttpError` for a connection failure, the deadline, a redirect or a
    body too large; any other status is returned for the caller to judge. ``context`` verifies
    ``https://`` servers (default: the system's CAs).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(f"not an http(s) URL: {redact(url)!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                           context=context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    expired = threading.Event()
    # The socket is kept here: http.client drops ``conn.sock`` once a response that closes the
    # connection has started, but the response still reads from it.
    held: list[socket.socket] = []

    def abort() -> None:
        expired.set()
        for sock in held:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    deadline = time.monotonic() + timeout
    watchdog = threading.Timer(timeout, abort)
    watchdog.daemon = True
    watchdog.start()
    late = HttpError(f"timed out after {timeout:g} s")
    try:
        conn.connect()
        if conn.sock is not None:
            held.append(conn.sock)
        if expired.is_set() or time.monotonic() >= deadline:
            raise late
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        if 300 <= response.status < 400:
            raise HttpError(f"HTTP {response.status} redirect to {_location(response.headers)} "
                            "not followed (give the final address)")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = response.read1(CHUNK)  # what has arrived: the deadline is checked between reads
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise HttpError(f"answer larger than {max_bytes / 2**20:g} MiB")
            chunks.append(chunk)
            if time.monotonic() >= deadline:
                raise late
        if expired.is_set():
            raise late
        body = b"".join(chunks)
        if (response.headers.get("Content-Encoding") or "").lower() == "gzip":
            try:
                with gzip.GzipFile(fileobj=io.BytesIO(body)) as unzip:
                    body = unzip.read(max_bytes + 1)
            except (OSError, EOFError) as exc:
                raise HttpError(f"bad gzip body: {exc}") from None
            if len(body) > max_bytes:
                raise HttpError(f"answer larger than {max_bytes / 2**20:g} MiB")
        return Answer(response.status, response.reason or "", response.headers, body)
    except HttpError:
        raise
    except (socket.timeout, TimeoutError):
        raise late from None
    except ConnectionRefusedError:
        raise HttpError("connection refused") from None
    except ssl.SSLError as exc:
        raise HttpError(f"TLS error: {exc.reason or exc}") from None
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set():
            raise late from None
        if isinstance(exc, socket.gaierror):
            raise HttpError(f"cannot resolve {parts.hostname}: {exc.strerror or exc}") from None
        if parts.scheme == "http" and isinstance(exc, _DROPPED):
            from allsmi.support.nethint import tls_hint
            hint = tls_hint(parts.hostname, parts.port or 80,
                            max(0.2, min(2.0, deadline - time.monotonic())))
            if hint:
                raise HttpError(hint) from None
        if isinstance(exc, OSError):
            raise HttpError(exc.strerror or str(exc) or type(exc).__name__) from None
        raise HttpError(f"bad HTTP answer ({type(exc).__name__}: {exc})") from None
    finally:
        watchdog.cancel()
        conn.close()

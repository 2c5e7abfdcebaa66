"""Request heads framed and parsed by h11; response heads written for the prepared bodies.

The connection loop (:mod:`allsmi.exporter.connections`) skips the empty lines
before a request line (:func:`request_start`: RFC 9112 section 2.2; h11 answers
them 400), finds where a head ends with :func:`head_end` (the blank line as h11
finds it) and hands the head to :func:`parse_head`, which runs it through a
fresh ``h11.Connection``: the request line, header syntax, ``Host`` (exactly one on HTTP/1.1) and
``Content-Length``/``Transfer-Encoding`` are h11's to judge. Anything it
refuses, and what it leaves to the server (two body framings at once, an HTTP
major version other than 1), raises :class:`BadRequest`: the connection is
answered with the status and closed, so that nothing after a malformed head
is ever read as a request.

Whether the connection stays open is decided here, not by h11 (which never
keeps HTTP/1.0 connections): HTTP/1.1 unless ``Connection: close``; HTTP/1.0
only with ``Connection: keep-alive``, and then the response says so; never
after a request that carries a body (bodies are not read).
"""

from __future__ import annotations

import email.utils
import re
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Iterable
from urllib.parse import unquote_to_bytes

import h11

_BLANK_LINE = re.compile(rb"\n\r?\n")  # as h11's own receive buffer finds the end of a head
#: Empty lines (CRLF or a bare LF) before a request line, which a server SHOULD ignore (RFC 9112
#: section 2.2: a client may send a CRLF after a request's body); h11 answers them 400.
_EMPTY_LINES = re.compile(rb"(?:\r?\n)*")
#: The scheme and authority of a request target in absolute form, which a server must accept.
_ABSOLUTE_FORM = re.compile(r"https?://[^/?#]*", re.IGNORECASE)
#: A ``%`` not followed by two hex digits: not a percent-encoding (answered 400, as Go's
#: net/http, which Prometheus' own exporters use, answers it).
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def request_start(buf: bytes | bytearray) -> int:
    """Index of the request line's first byte, past the empty lines before it (ignored), or -1
    while ``buf`` holds nothing else (maybe a CR whose LF is still to come)."""
    start = _EMPTY_LINES.match(buf).end()  # type: ignore[union-attr] - matches the empty string
    rest = len(buf) - start
    return -1 if rest == 0 or (rest == 1 and buf[start] == 0x0D) else start


def head_end(buf: bytes | bytearray, start: int = 0) -> int:
    """Index just past the blank line ending the request head that begins at ``start`` (see
    :func:`request_start`), or -1."""
    match = _BLANK_LINE.search(buf, start)
    return match.end() if match else -1


class BadRequest(Exception):
    """A request head that is not answered beyond its error status (the connection closes)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Request:
    """One parsed request head."""

    method: str
    path: str
    """The target without its query string (nor the scheme and authority of an absolute
    target: ``GET http://host:9477/metrics`` asks for ``/metrics``)."""
    http_version: str
    headers: dict[str, str]
    """Lower-case names; a repeated header's values joined with ``", "``."""
    keep_alive: bool
    """Whether the connection may stay open after the answer."""
    say_keep_alive: bool
    """Whether the answer must say ``Connection: keep-alive`` (HTTP/1.0 clients)."""


def parse_head(head: bytes) -> Request:
    """The request in ``head`` (one complete head, as :func:`head_end` delimits it).

    Raises :class:`BadRequest` for anything h11 refuses and for what it leaves to us."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=len(head) + 1)
    conn.receive_data(head)
    try:
        event = conn.next_event()
        after = conn.next_event() if isinstance(event, h11.Request) else None
    except h11.RemoteProtocolError as exc:
        raise BadRequest(exc.error_status_hint, str(exc)) from None
    if not isinstance(event, h11.Request):
        raise BadRequest(400, "incomplete request head")
    headers: dict[str, str] = {}
    for name, value in event.headers:
        key = name.decode("ascii")
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    if "transfer-encoding" in headers and "content-length" in headers:
        raise BadRequest(400, "both Transfer-Encoding and Content-Length")
    version = event.http_version.decode("ascii")
    if not version.startswith("1."):
        raise BadRequest(505, f"HTTP/{version} is not supported")
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    has_body = not isinstance(after, h11.EndOfMessage)
    if version == "1.0":
        keep_alive = "keep-alive" in tokens and "close" not in tokens
    else:
        keep_alive = "close" not in tokens
    keep_alive = keep_alive and not has_body  # a body is never read: do not misparse it
    target = event.target.decode("latin-1")
    absolute = _ABSOLUTE_FORM.match(target)  # http://host:port/metrics: RFC 9112 section 3.2.2
    path = target[absolute.end():] if absolute else target
    return Request(method=event.method.decode("ascii"), path=_decoded(path.split("?", 1)[0]) or "/",
                   http_version=version, headers=headers, keep_alive=keep_alive,
                   say_keep_alive=keep_alive and version == "1.0")


def _decoded(path: str) -> str:
    """``path`` with its percent-encodings decoded (``/%6detrics`` is ``/metrics``, as Go's
    net/http reads it), each one byte (latin-1, as the target was read: a name no route has
    stays unknown); an escape that is not two hex digits raises :class:`BadRequest`."""
    if "%" not in path:
        return path
    if _BAD_ESCAPE.search(path):
        raise BadRequest(400, "invalid percent-encoding in the request target")
    return unquote_to_bytes(path).decode("latin-1")


_date = ["", -1]


def http_date() -> str:
    """Now as an HTTP date (computed once a second)."""
    now = int(time.time())
    if _date[1] != now:
        _date[:] = [email.utils.formatdate(now, usegmt=True), now]
    return str(_date[0])


def response_head(status: int, headers: Iterable[tuple[str, str]]) -> bytes:
    """An HTTP/1.1 status line and headers (values free of line breaks: the callers' own).

    Written in UTF-8, as Go's net/http writes a header's string (exporter-toolkit's
    ``http_server_config.headers``): a value beyond Latin-1 (``Content-Security-Policy:
    default-src ‘self’`` pasted from a document) could not be encoded, and every request,
    ``/healthz`` included, was answered 500. Our own headers are ASCII, the same in either."""
    phrase = HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {phrase}"] + [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")

"""What to tell a user whose request went to the wrong kind of server.

Two mistakes are common and each surfaces as an error that points the wrong way: an
``http://`` address at a server that speaks only TLS (the server drops the connection: "connection
reset by peer"), and an address that is a web server but not a Prometheus query API (an HTML
404 page). :func:`speaks_tls` tells the first apart from a real network fault with one TLS
handshake, and :func:`first_line` keeps the second's message to one line. And one URL's
credentials, never printed: :func:`redact_url`.
"""

from __future__ import annotations

import socket
import ssl

#: The longest first line of an answer quoted in a message.
LINE_CHARS = 120


def first_line(body: bytes | str, limit: int = LINE_CHARS) -> str:
    """The first non-blank line of ``body`` (HTML tags and control characters removed), cut to
    ``limit`` characters with an ellipsis: what a message quotes of an answer."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    for raw in text.splitlines():
        line = "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in _untag(raw)).strip()
        if line:
            return line if len(line) <= limit else line[:limit - 1] + "\u2026"
    return ""


def _untag(line: str) -> str:
    out, inside = [], False
    for char in line:
        if char == "<":
            inside = True
        elif char == ">" and inside:
            inside = False
            out.append(" ")
        elif not inside:
            out.append(char)
    return " ".join("".join(out).split())


def speaks_tls(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether the server at ``host:port`` answers a TLS handshake (its certificate is not
    checked: this only tells which protocol it speaks)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                tls.do_handshake()
        return True
    except ssl.SSLError as exc:  # an alert is still TLS (a client certificate required, say)
        return "ALERT" in str(exc).upper()
    except (OSError, ValueError):
        return False


def tls_hint(host: str, port: int, timeout: float = 2.0) -> str | None:
    """The advice for a plain-HTTP request dropped by ``host:port``, or ``None`` when that server
    does not speak TLS either."""
    if not speaks_tls(host, port, timeout):
        return None
    where = f"[{host}]" if ":" in host else host
    return f"the server at {where}:{port} speaks TLS: use https://{where}:{port}"


def split_userinfo(url: str) -> tuple[str, str | None, str]:
    """``(scheme://, userinfo or None, rest)`` of one URL (``scheme://`` empty where it has
    none: ``user:password@host:port``); userinfo runs to the last ``@``.

    Splitting at the last ``@`` (not where a URL parser would stop, at the first ``/``) keeps
    a password with raw ``/``, ``@``, ``:`` or a space whole, so it is neither sent to the
    wrong host nor half printed.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return scheme + sep, None, rest
    return scheme + sep, userinfo, host


def redact_url(url: str, keep_user: bool = True) -> str:
    """One URL (a flag's, a line of a hosts file) with any password replaced by ``***``, safe to
    print: its user stays (``http://ops:***@prom:9090``), or with ``keep_user`` false goes too
    (``http://***@prom:9090``, what the dashboard shows)."""
    head, userinfo, rest = split_userinfo(url)
    if userinfo is None:
        return url
    if not keep_user:
        return f"{head}***@{rest}"
    user, colon, _ = userinfo.partition(":")
    return f"{head}{user}{':***' if colon else ''}@{rest}"

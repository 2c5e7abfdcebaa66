"""A minimal client for Prometheus' instant-query API, for ``allsmi export --prometheus``.

Basic or bearer auth (from the URL, options or ``[export]``), a CA file, no redirects (so
credentials never go to another host), size caps on every answer, and messages that never
contain a password or a token.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from allsmi.accounting.prometheus.access import MAX_SECRET_BYTES, Credentials, access_settings, read_secret
from allsmi.support.nethint import redact_url, split_userinfo
from allsmi.schema.text import unresolvable_host

__all__ = ["MAX_RESPONSE_BYTES", "MAX_SECRET_BYTES", "Credentials", "PartialAnswer",
           "PrometheusClient", "PrometheusError", "access_settings", "read_secret", "redact_url",
           "split_url"]

#: The most one answer of Prometheus may hold; a larger one is an error, not memory exhaustion.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class PrometheusError(Exception):
    """Prometheus could not be reached or answered with an error."""


class PartialAnswer(PrometheusError):
    """The server answered ``success`` but marked the answer partial (``warnings`` or
    ``isPartial``: a store, shard or replica did not answer), so data may be missing."""


def split_url(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and the (percent-decoded) user and password."""
    head, userinfo, rest = split_userinfo(url)
    bare = head + rest
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise PrometheusError(f"invalid Prometheus URL {redact_url(url)!r}: it contains a space "
                              "or a control character (percent-encode it, e.g. %20)")
    try:
        parsed = urllib.parse.urlsplit(bare)
    except ValueError:  # (a broken IPv6 address)
        parsed = urllib.parse.urlsplit("")
    if parsed.scheme not in ("http", "https") or not parsed.hostname \
            or unresolvable_host(parsed.hostname):
        raise PrometheusError(f"invalid Prometheus URL {redact_url(url)!r} "
                              "(expected http[s]://[user:password@]host:port[/path])")
    try:
        parsed.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise PrometheusError(f"invalid port in Prometheus URL {redact_url(url)!r}") from None
    if userinfo is None:
        return bare, None, None
    user, colon, password = userinfo.partition(":")
    return bare, urllib.parse.unquote(user), urllib.parse.unquote(password) if colon else None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are errors: credentials must never follow one to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


class PrometheusClient:
    """A minimal client for the instant-query API: basic or bearer auth, a CA file, size caps.

    Credentials come from the URL (``http://user:password@host:port``) or
    ``credentials``; no message this client raises contains a password or a token.
    """

    def __init__(self, url: str, timeout: float = 30.0, credentials: Credentials | None = None,
                 ca_file: str | None = None, max_bytes: int = MAX_RESPONSE_BYTES,
                 allow_partial: bool = False) -> None:
        base, user, password = split_url(url)
        if user is not None and credentials is not None and \
                (credentials.username is not None or credentials.bearer_token is not None):
            raise PrometheusError("give the Prometheus credentials once: in the URL or as "
                                  "options, not both")
        if user is not None:
            credentials = Credentials(username=user, password=password or "")
        self.credentials = credentials or Credentials()
        self.url = base.rstrip("/")
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.allow_partial = allow_partial
        #: Whether the export may bill from the hourly roll-ups (``--no-rollups``: never).
        self.use_rollups = True
        #: The servers' warnings about partial answers, when ``allow_partial`` accepted them.
        self.warnings: list[str] = []
        handlers: list[Any] = [_NoRedirect()]
        if self.url.startswith("https://") or ca_file:
            try:
                if ca_file:  # (never a FIFO: ssl would wait for its writer forever)
                    from allsmi.support.boundedread import regular_file
                    regular_file(ca_file)
                context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise PrometheusError(f"cannot load the CA file {ca_file}: "
                                      f"{getattr(exc, 'strerror', None) or exc}") from None
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def _safe(self, text: str) -> str:
        for secret in self.credentials.secrets():
            text = text.replace(secret, "***")
        return text

    def _read(self, response: Any) -> bytes:
        length = response.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > self.max_bytes:
            raise PrometheusError(f"{self.url}: the answer is {int(length)} bytes, more than the "
                                  f"limit of {self.max_bytes}")
        body = response.read(self.max_bytes + 1)
        if len(body) > self.max_bytes:
            raise PrometheusError(f"{self.url}: the answer is larger than the limit of "
                                  f"{self.max_bytes} bytes")
        return bytes(body)

    def _fetch(self, request: urllib.request.Request, promql: str, auth: str | None) -> bytes:
        """The body of the answer to ``request``, all of it within ``timeout`` seconds.

        The socket timeout alone bounds each read, so a server trickling a byte at a time
        could hold the export for ever: the request runs in a worker thread and is given up
        (its socket shut down) when the whole of it has not arrived by the deadline.
        """
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    box["response"] = response
                    box["body"] = self._read(response)
            except urllib.error.HTTPError as exc:
                box["error"] = exc
                try:
                    box["detail"] = exc.read(2000).decode("utf-8", "replace")[:500]
                except OSError:
                    box["detail"] = ""
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=work, name="allsmi-prometheus-query", daemon=True)
        started = time.monotonic()
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            _abort(box.get("response"))
            raise PrometheusError(f"{self.url}: no complete answer within {self.timeout:g} s "
                                  f"(--timeout) for {promql!r}")
        exc = box.get("error")
        if exc is None:
            return bytes(box["body"])
        if isinstance(exc, PrometheusError):
            raise exc
        if isinstance(exc, urllib.error.HTTPError):
            if exc.code in (401, 403):
                how = ("with the configured credentials" if auth else
                       "without credentials (see --prometheus-user, --prometheus-password-file "
                       "and --prometheus-bearer-token-file)")
                raise PrometheusError(f"{self.url}: HTTP {exc.code}: access denied {how}") from None
            if 300 <= exc.code < 400:
                raise PrometheusError(f"{self.url}: HTTP {exc.code} redirect to "
                                      f"{redact_url(exc.headers.get('Location', '?'))}: not "
                                      "followed (give the final URL)") from None
            detail = box.get("detail", "")
            if not _is_api_error(detail):  # an HTML page, a proxy's text: not the query API
                raise PrometheusError(self._safe(_not_an_api(self.url, exc.code, detail))) from None
            raise PrometheusError(self._safe(f"{self.url}: HTTP {exc.code} for {promql!r}: "
                                             f"{detail}")) from None
        if isinstance(exc, (urllib.error.URLError, OSError)):
            reason = getattr(exc, "reason", exc)
            if self.url.startswith("http://") and isinstance(reason, _DROPPED):
                from allsmi.support.nethint import tls_hint
                parts = urllib.parse.urlsplit(self.url)
                hint = tls_hint(parts.hostname or "", parts.port or 80, min(2.0, self.timeout))
                if hint:
                    raise PrometheusError(f"cannot query {self.url}: {hint}") from None
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                reason = f"timed out after {time.monotonic() - started:.1f} s (--timeout)"
            raise PrometheusError(self._safe(f"cannot reach Prometheus at {self.url}: "
                                             f"{reason}")) from None
        if isinstance(exc, (ValueError, http.client.HTTPException)):
            raise PrometheusError(self._safe(f"{self.url}: bad request or answer: "
                                             f"{type(exc).__name__}: {exc}")) from None
        raise exc

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        """The vector result of ``promql`` evaluated at unix time ``at``."""
        return self._query(promql, at, "vector")

    def query_range_vector(self, promql: str, at: float) -> list[dict[str, Any]]:
        """The raw samples (``values``) of the range vector ``promql`` (``metric[range]``) at
        unix time ``at``: a matrix."""
        return self._query(promql, at, "matrix")

    def _query(self, promql: str, at: float, kind: str) -> list[dict[str, Any]]:
        params = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        headers = {"Accept": "application/json"}
        auth = self.credentials.header()
        if auth:
            headers["Authorization"] = auth
        request = urllib.request.Request(f"{self.url}/api/v1/query?{params}", headers=headers)
        body = self._fetch(request, promql, auth)
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(self._safe(_not_an_api(self.url, 200, body))) from None
        if not isinstance(doc, dict):
            raise PrometheusError(f"{self.url}: the answer is not a Prometheus API response")
        if doc.get("status") != "success":
            raise PrometheusError(self._safe(f"{self.url}: query {promql!r} failed: "
                                             f"{doc.get('errorType', '')} "
                                             f"{doc.get('error', '')}".strip()))
        self._check_partial(doc, promql)
        data = doc.get("data") or {}
        if kind == "matrix" and isinstance(data, dict) and data.get("resultType") == "vector":
            return []  # a stand-in that answers every query with a vector: no samples to read
        if not isinstance(data, dict) or data.get("resultType") != kind:
            got = data.get("resultType") if isinstance(data, dict) else None
            raise PrometheusError(f"{self.url}: expected a {kind} for {promql!r}, got {got!r}")
        result = data.get("result") or []
        if not isinstance(result, list):
            raise PrometheusError(f"{self.url}: the result for {promql!r} is not a list")
        return [s for s in result if isinstance(s, dict)]

    def _check_partial(self, doc: dict[str, Any], promql: str) -> None:
        """Raise :class:`PartialAnswer` for an answer marked partial, or (with ``allow_partial``)
        note its warnings in :attr:`warnings`."""
        raw = doc.get("warnings")
        warnings = [self._safe(str(w))[:300] for w in raw] if isinstance(raw, list) else \
            ([self._safe(str(raw))[:300]] if raw else [])
        if doc.get("isPartial") is True or (isinstance(doc.get("data"), dict)
                                            and doc["data"].get("isPartial") is True):
            warnings.append("the server marked the answer partial (isPartial)")
        if not warnings:
            return
        if not self.allow_partial:
            raise PartialAnswer(f"{self.url}: the answer to {promql!r} is partial, data may be "
                                f"missing: {'; '.join(warnings)} (--allow-partial writes the "
                                "export anyway, with its coverage lowered to 0)")
        for warning in warnings:
            if warning not in self.warnings:
                self.warnings.append(warning)


def _abort(response: Any) -> None:
    """Shut down the socket under ``response`` (if any), so that a blocked read ends."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


#: How a server that speaks only TLS answers a plain-HTTP request: it drops the connection.
_DROPPED = (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
            http.client.BadStatusLine)


def _is_api_error(detail: str) -> bool:
    """Whether an error answer's body is the query API's own JSON error."""
    text = detail.lstrip()  # cut at 500 characters: a long JSON error may not parse whole
    return text.startswith("{") and '"status"' in text


def _not_an_api(url: str, status: int, body: bytes | str) -> str:
    """The message for an answer that is not the query API's: its status and first line only."""
    from allsmi.support.nethint import first_line
    line = first_line(body)
    return f"not a Prometheus query API at {url} (HTTP {status})" + (f": {line}" if line else "")

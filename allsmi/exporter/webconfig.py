"""TLS and basic authentication from a Prometheus exporter-toolkit web configuration file.

The file format is the one node_exporter and every Go exporter read with
``--web.config.file``::

    tls_server_config:
      cert_file: server.crt        # relative paths are relative to this file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional
      client_ca_file: clients.pem                    # optional
      min_version: TLS12                             # optional
    basic_auth_users:
      prometheus: $2y$10$...       # bcrypt hash, e.g. from `htpasswd -nBC 10 "" | tr -d ':\\n'`
    http_server_config:
      headers:
        X-Frame-Options: deny

Everything is validated before the server starts: a missing certificate, an
unreadable key, a hash that is not bcrypt or an unknown key is a
:class:`WebConfigError` (the CLI exits 2), never a silently open endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import ssl
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
             "max_version", "cipher_suites", "curve_preferences", "prefer_server_cipher_suites",
             "client_allowed_sans", "cert", "key", "client_ca")
_TLS_UNSUPPORTED = {
    "cipher_suites": "Go cipher suite names have no Python equivalent; the defaults of Python's "
                     "ssl module (OpenSSL's secure defaults) are used",
    "curve_preferences": "not supported by allsmi",
    "client_allowed_sans": "not supported by allsmi",
    "cert": "inline certificates are not supported: use cert_file",
    "key": "inline keys are not supported: use key_file",
    "client_ca": "inline CA certificates are not supported: use client_ca_file",
}
_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
             "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_HEADERS_ALLOWED = ("strict-transport-security", "x-frame-options", "x-content-type-options",
                    "x-xss-protection", "content-security-policy")
#: Successful credential checks remembered, so a scrape does not pay bcrypt's cost each time.
AUTH_CACHE_SIZE = 256


class WebConfigError(ValueError):
    """The web configuration file is missing, malformed or names unusable files."""


@dataclass
class WebConfig:
    """What the server needs: a TLS context, basic-auth users, extra response headers."""

    path: Path | None = None
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    auth: "BasicAuth | None" = None
    """The credential checker, or ``None`` when no users are configured."""


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WebConfigError(f"{path}: web configuration file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"{path}: cannot read: {exc}") from None
    # Always the strict subset reader: no dependency, errors with line numbers, and
    # the same behaviour on every machine (tests check it agrees with PyYAML).
    from allsmi.exporter.yamlsubset import YamlSubsetError, loads
    try:
        return loads(text)
    except YamlSubsetError as exc:
        raise WebConfigError(f"{path}: {exc}") from None


def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read and validate a web configuration file; raise :class:`WebConfigError` on any problem."""
    source = Path(path)
    data = _read_yaml(source)
    if data is None:
        return WebConfig(path=source)
    if not isinstance(data, dict):
        raise WebConfigError(f"{source}: must be a mapping with keys {', '.join(_TOP_KEYS)}")
    for key in data:
        if key not in _TOP_KEYS:
            raise WebConfigError(f"{source}: unknown key {key!r} (allowed: {', '.join(_TOP_KEYS)})")
    base = source.parent
    context = None
    if data.get("tls_server_config") is not None:
        context = _tls_context(source, base, data["tls_server_config"])
    users = _users(source, data.get("basic_auth_users"))
    headers = _headers(source, data.get("http_server_config"))
    return WebConfig(path=source, ssl_context=context, users=users, headers=headers,
                     auth=BasicAuth(users) if users else None)


def _file(source: Path, base: Path, key: str, value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise WebConfigError(f"{source}: tls_server_config.{key} must be a file path")
    file = Path(value)
    if not file.is_absolute():
        file = base / file  # as exporter-toolkit: relative to the web configuration file
    if not file.is_file():
        raise WebConfigError(f"{source}: tls_server_config.{key}: {file} does not exist")
    if not os.access(file, os.R_OK):
        raise WebConfigError(f"{source}: tls_server_config.{key}: {file} is not readable")
    return file


def _tls_context(source: Path, base: Path, tls: Any) -> ssl.SSLContext:
    if not isinstance(tls, dict):
        raise WebConfigError(f"{source}: tls_server_config must be a mapping")
    for key in tls:
        if key not in _TLS_KEYS:
            raise WebConfigError(f"{source}: unknown key tls_server_config.{key} "
                                 f"(allowed: {', '.join(_TLS_KEYS[:5])}, max_version)")
        if key in _TLS_UNSUPPORTED and tls[key] not in (None, [], ""):
            raise WebConfigError(f"{source}: tls_server_config.{key}: {_TLS_UNSUPPORTED[key]}")
    for key in ("cert_file", "key_file"):
        if not tls.get(key):
            raise WebConfigError(f"{source}: tls_server_config needs {key}")
    cert = _file(source, base, "cert_file", tls["cert_file"])
    key_file = _file(source, base, "key_file", tls["key_file"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(cert), str(key_file))
    except (ssl.SSLError, OSError) as exc:
        raise WebConfigError(f"{source}: cannot load {cert} with {key_file}: {exc}") from None
    context.minimum_version = _version(source, tls, "min_version", "TLS12")
    if tls.get("max_version"):
        context.maximum_version = _version(source, tls, "max_version", "TLS13")

    auth_type = tls.get("client_auth_type") or "NoClientCert"
    if auth_type in ("RequestClientCert", "RequireAnyClientCert"):
        raise WebConfigError(
            f"{source}: tls_server_config.client_auth_type {auth_type} is not supported: Python's "
            "ssl module verifies every client certificate it asks for; use VerifyClientCertIfGiven "
            "or RequireAndVerifyClientCert with client_ca_file")
    if auth_type not in _CLIENT_AUTH:
        raise WebConfigError(f"{source}: tls_server_config.client_auth_type must be one of "
                             f"{', '.join(_CLIENT_AUTH)}, got {auth_type!r}")
    if tls.get("client_ca_file"):
        ca = _file(source, base, "client_ca_file", tls["client_ca_file"])
        try:
            context.load_verify_locations(cafile=str(ca))
        except (ssl.SSLError, OSError) as exc:
            raise WebConfigError(f"{source}: cannot load client_ca_file {ca}: {exc}") from None
    elif _CLIENT_AUTH[auth_type] != ssl.CERT_NONE:
        raise WebConfigError(f"{source}: client_auth_type {auth_type} needs client_ca_file")
    context.verify_mode = _CLIENT_AUTH[auth_type]
    return context


def _version(source: Path, tls: Mapping[str, Any], key: str, default: str) -> ssl.TLSVersion:
    value = tls.get(key) or default
    if value not in _VERSIONS:
        raise WebConfigError(f"{source}: tls_server_config.{key} must be one of "
                             f"{', '.join(_VERSIONS)}, got {value!r}")
    return _VERSIONS[value]


def _users(source: Path, raw: Any) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise WebConfigError(f"{source}: basic_auth_users must map user names to bcrypt hashes")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")) \
                or len(hashed) != 60:
            raise WebConfigError(f"{source}: basic_auth_users.{user}: not a bcrypt hash "
                                 "(expected 60 characters starting with $2a$, $2b$ or $2y$)")
        if ":" in str(user):
            raise WebConfigError(f"{source}: basic_auth_users: user name {user!r} contains ':'")
        users[str(user)] = hashed.encode("ascii")
    if users:
        try:
            import bcrypt  # noqa: F401
        except ImportError:
            raise WebConfigError(f"{source}: basic_auth_users needs the 'bcrypt' package "
                                 "(pip install 'allsmi[web]')") from None
    return users


def _headers(source: Path, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise WebConfigError(f"{source}: http_server_config must be a mapping")
    for key in raw:
        if key not in ("headers", "http2"):
            raise WebConfigError(f"{source}: unknown key http_server_config.{key} "
                                 "(allowed: headers, http2)")
    headers = raw.get("headers") or {}
    if not isinstance(headers, dict):
        raise WebConfigError(f"{source}: http_server_config.headers must be a mapping")
    out = {}
    for name, value in headers.items():
        if str(name).lower() not in _HEADERS_ALLOWED:
            raise WebConfigError(f"{source}: http_server_config.headers.{name}: only "
                                 f"{', '.join(_HEADERS_ALLOWED)} may be set")
        text = str(value)
        if "\r" in text or "\n" in text:
            raise WebConfigError(f"{source}: http_server_config.headers.{name}: line breaks "
                                 "are not allowed")
        out[str(name)] = text
    return out


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes, caching successes.

    A cache entry is an HMAC of the header under a per-process random key, so
    passwords are not kept in memory in clear. Failures are never cached:
    each wrong guess pays bcrypt's full cost. An unknown user is checked
    against a dummy hash so that timing does not reveal which users exist.
    """

    def __init__(self, users: Mapping[str, bytes], *,
                 checkpw: Callable[[bytes, bytes], bool] | None = None) -> None:
        import bcrypt
        self.users = dict(users)
        self._checkpw = checkpw or bcrypt.checkpw
        self._dummy = bcrypt.hashpw(b"allsmi-dummy", bcrypt.gensalt(rounds=10))
        self._key = os.urandom(32)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> bool:
        """True when ``header`` carries valid credentials."""
        if not header or not header[:6].lower() == "basic ":
            return False
        token = header[6:].strip().encode("ascii", "replace")
        digest = hmac.new(self._key, token, hashlib.sha256).digest()
        with self._lock:
            if digest in self._ok:
                self._ok.move_to_end(digest)
                return True
        try:
            user, _, password = base64.b64decode(token, validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        try:
            ok = self._checkpw(password.encode("utf-8"), hashed or self._dummy) and hashed is not None
        except ValueError:  # a malformed stored hash: refuse, never open
            ok = False
        if ok:
            with self._lock:
                self._ok[digest] = None
                while len(self._ok) > AUTH_CACHE_SIZE:
                    self._ok.popitem(last=False)
        return ok

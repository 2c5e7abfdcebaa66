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

The file is parsed with PyYAML's ``safe_load`` machinery (no tags, no code),
so any valid YAML exporter-toolkit accepts loads here, flow mappings such as
``headers: {X-Frame-Options: deny}`` included; duplicate keys are refused, as
Go's strict YAML decoding refuses them. Everything is validated before the
server starts: malformed YAML, a missing certificate, an unreadable key, a
hash that is not bcrypt or an unknown key is a :class:`WebConfigError` naming
the file, the line and the key (the CLI exits 2), never a silently open
endpoint. :class:`WebConfigWatcher` reads it again when it or a file it names changes (a
rotated certificate, a changed password), keeping the one in use when the change does not load.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import ssl
import sys
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
#: The most bytes of a password that bcrypt uses (its key schedule reads no more).
BCRYPT_MAX_PASSWORD_BYTES = 72


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
    files: tuple[Path, ...] = ()
    """The files it was read from: the web configuration and the certificates and keys it
    names (watched by :class:`WebConfigWatcher`)."""


class _Lines:
    """Where each key of the file is, for error messages naming the line and the key."""

    def __init__(self, source: Path, lines: dict[tuple[str, ...], int]) -> None:
        self.source = source
        self.lines = lines

    def error(self, message: str, *path: str) -> WebConfigError:
        """A :class:`WebConfigError` located at the key ``path`` (e.g. ``"tls_server_config", "key_file"``)."""
        where = str(self.source)
        line = self.lines.get(tuple(path))
        if line is not None:
            where += f", line {line}"
        if path:
            where += f", key '{'.'.join(path)}'"
        return WebConfigError(f"{where}: {message}")


def _key_lines(node: Any, path: tuple[str, ...], lines: dict[tuple[str, ...], int],
               source: Path, seen_nodes: set[int] | None = None) -> None:
    """Record the line of every mapping key under ``node``; refuse duplicate keys (as Go's yaml
    does). A node reached again through an alias is not walked twice (no alias bombs, no
    recursion through a recursive anchor)."""
    import yaml

    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            if key in seen:
                raise WebConfigError(f"{source}, line {line}, key '{'.'.join(path + (key,))}': "
                                     "duplicate key")
            seen.add(key)
            lines[path + (key,)] = line
            _key_lines(value_node, path + (key,), lines, source, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _key_lines(item, path, lines, source, seen_nodes)


def _read_yaml(path: Path) -> tuple[Any, _Lines]:
    """The file parsed with PyYAML's safe loader (no tags, no code), and where its keys are."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WebConfigError(f"{path}: web configuration file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"{path}: cannot read: {exc}") from None
    loader = yaml.SafeLoader(text)
    lines: dict[tuple[str, ...], int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            return None, _Lines(path, lines)
        _key_lines(node, (), lines, path)
        return loader.construct_document(node), _Lines(path, lines)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise WebConfigError(f"{path}{where}: malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{path}: malformed YAML: {exc}") from None
    finally:
        loader.dispose()


def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read and validate a web configuration file; raise :class:`WebConfigError` on any problem."""
    source = Path(path)
    data, at = _read_yaml(source)
    if data is None:
        return WebConfig(path=source, files=(source,))
    if not isinstance(data, dict):
        raise at.error(f"must be a mapping with keys {', '.join(_TOP_KEYS)}")
    for key in data:
        if key not in _TOP_KEYS:
            raise at.error(f"unknown key {str(key)!r} (allowed: {', '.join(_TOP_KEYS)})", str(key))
    base = source.parent
    context = None
    files = [source]
    if data.get("tls_server_config") is not None:
        context = _tls_context(at, base, data["tls_server_config"], files)
    users = _users(at, data.get("basic_auth_users"))
    headers = _headers(at, data.get("http_server_config"))
    return WebConfig(path=source, ssl_context=context, users=users, headers=headers,
                     auth=BasicAuth(users) if users else None, files=tuple(files))


_TLS = "tls_server_config"


def _file(at: _Lines, base: Path, key: str, value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise at.error("must be a file path", _TLS, key)
    file = Path(value)
    if not file.is_absolute():
        file = base / file  # as exporter-toolkit: relative to the web configuration file
    if not file.is_file():
        raise at.error(f"{file} does not exist", _TLS, key)
    if not os.access(file, os.R_OK):
        raise at.error(f"{file} is not readable", _TLS, key)
    return file


def _tls_context(at: _Lines, base: Path, tls: Any, files: list[Path]) -> ssl.SSLContext:
    if not isinstance(tls, dict):
        raise at.error("must be a mapping", _TLS)
    for key in tls:
        if key not in _TLS_KEYS:
            raise at.error(f"unknown key {str(key)!r} (allowed: {', '.join(_TLS_KEYS[:5])}, "
                           "max_version)", _TLS, str(key))
        if key in _TLS_UNSUPPORTED and tls[key] not in (None, [], ""):
            raise at.error(_TLS_UNSUPPORTED[key], _TLS, key)
    for key in ("cert_file", "key_file"):
        if not tls.get(key):
            raise at.error(f"{_TLS} needs {key}", _TLS)
    cert = _file(at, base, "cert_file", tls["cert_file"])
    key_file = _file(at, base, "key_file", tls["key_file"])
    files += [cert, key_file]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    asked: list[bool] = []

    def no_passphrase() -> str:
        # Without a callback OpenSSL prompts "Enter PEM pass phrase:" on the terminal: start-up
        # hung on a console, and under systemd failed with "[Errno 22] Invalid argument".
        asked.append(True)
        raise ValueError("passphrase-protected")

    try:
        context.load_cert_chain(str(cert), str(key_file), password=no_passphrase)
    except (ssl.SSLError, OSError, ValueError) as exc:
        if asked:
            raise at.error(f"{key_file} is encrypted with a passphrase, which is not supported "
                           f"(as with exporter-toolkit): store it decrypted, readable only by the "
                           f"exporter's user (openssl pkey -in ENCRYPTED -out PLAIN)",
                           _TLS, "key_file") from None
        raise at.error(f"cannot load {cert} with {key_file}: {exc}", _TLS, "key_file") from None
    context.minimum_version = _version(at, tls, "min_version", "TLS12")
    if tls.get("max_version"):
        context.maximum_version = _version(at, tls, "max_version", "TLS13")

    auth_type = tls.get("client_auth_type") or "NoClientCert"
    if auth_type in ("RequestClientCert", "RequireAnyClientCert"):
        raise at.error(
            f"{auth_type} is not supported: Python's ssl module verifies every client certificate "
            "it asks for; use VerifyClientCertIfGiven or RequireAndVerifyClientCert with "
            "client_ca_file", _TLS, "client_auth_type")
    if auth_type not in _CLIENT_AUTH:
        raise at.error(f"must be one of {', '.join(_CLIENT_AUTH)}, got {auth_type!r}",
                       _TLS, "client_auth_type")
    if tls.get("client_ca_file"):
        ca = _file(at, base, "client_ca_file", tls["client_ca_file"])
        files.append(ca)
        try:
            context.load_verify_locations(cafile=str(ca))
        except (ssl.SSLError, OSError) as exc:
            raise at.error(f"cannot load client_ca_file {ca}: {exc}", _TLS, "client_ca_file") from None
    elif _CLIENT_AUTH[auth_type] != ssl.CERT_NONE:
        raise at.error(f"client_auth_type {auth_type} needs client_ca_file", _TLS, "client_auth_type")
    context.verify_mode = _CLIENT_AUTH[auth_type]
    return context


def _version(at: _Lines, tls: Mapping[str, Any], key: str, default: str) -> ssl.TLSVersion:
    value = tls.get(key) or default
    if value not in _VERSIONS:
        raise at.error(f"{key} must be one of {', '.join(_VERSIONS)}, got {value!r}", _TLS, key)
    return _VERSIONS[value]


def _users(at: _Lines, raw: Any) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise at.error("must map user names to bcrypt hashes", "basic_auth_users")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        name = str(user)
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")) \
                or len(hashed) != 60 or not hashed[4:6].isdigit() or not 4 <= int(hashed[4:6]) <= 31:
            raise at.error("not a bcrypt hash (expected 60 characters starting with $2a$, $2b$ "
                           "or $2y$ and a cost from 04 to 31)", "basic_auth_users", name)
        if ":" in name:
            raise at.error(f"user name {name!r} contains ':'", "basic_auth_users", name)
        users[name] = hashed.encode("ascii")
    if users:
        try:
            import bcrypt  # noqa: F401
        except ImportError:
            raise at.error(f"needs the 'bcrypt' package: {sys.executable} -m pip install 'allsmi[web]'",
                           "basic_auth_users") from None
    return users


def _headers(at: _Lines, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise at.error("must be a mapping", "http_server_config")
    for key in raw:
        if key not in ("headers", "http2"):
            raise at.error(f"unknown key {str(key)!r} (allowed: headers, http2)",
                           "http_server_config", str(key))
    headers = raw.get("headers") or {}
    if not isinstance(headers, dict):
        raise at.error("must be a mapping", "http_server_config", "headers")
    out = {}
    for name, value in headers.items():
        where = ("http_server_config", "headers", str(name))
        if str(name).lower() not in _HEADERS_ALLOWED:
            raise at.error(f"only {', '.join(_HEADERS_ALLOWED)} may be set", *where)
        if isinstance(value, (dict, list)) or value is None:
            raise at.error("must be a text value", *where)
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if any(ch in text for ch in "\r\n\0"):
            raise at.error("line breaks are not allowed", *where)
        out[str(name)] = text
    return out


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes, caching successes.

    A cache entry is an HMAC of the header under a per-process random key, so
    passwords are not kept in memory in clear. Failures are never cached:
    each wrong guess pays bcrypt's full cost. An unknown user is checked
    against a dummy hash of the highest cost among the configured hashes, so
    that timing does not reveal which users exist.
    """

    def __init__(self, users: Mapping[str, bytes], *,
                 checkpw: Callable[[bytes, bytes], bool] | None = None) -> None:
        import bcrypt
        self.users = dict(users)
        self._checkpw = checkpw or bcrypt.checkpw
        self.cost = max((_cost(h) for h in self.users.values()), default=10)
        self._dummy = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(rounds=self.cost))
        self._key = os.urandom(32)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def _digest(self, header: str) -> bytes:
        return hmac.new(self._key, header[6:].strip().encode("ascii", "replace"), hashlib.sha256).digest()

    def cached(self, header: str | None) -> bool:
        """True when ``header`` is a credential that passed recently (no bcrypt needed)."""
        if not header or header[:6].lower() != "basic ":
            return False
        digest = self._digest(header)
        with self._lock:
            if digest in self._ok:
                self._ok.move_to_end(digest)
                return True
        return False

    def check(self, header: str | None) -> bool:
        """True when ``header`` carries valid credentials (bcrypt's cost unless cached)."""
        if not header or header[:6].lower() != "basic ":
            return False
        if self.cached(header):
            return True
        token = header[6:].strip().encode("ascii", "replace")
        try:
            raw_user, _, password = base64.b64decode(token, validate=True).partition(b":")
            user = raw_user.decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            user, password = "", b""  # malformed: pays the same cost as a wrong password
        hashed = self.users.get(user)
        try:
            # bcrypt reads at most BCRYPT_MAX_PASSWORD_BYTES of a password: the bytes beyond
            # take no part in the hash, as exporter-toolkit (Go's bcrypt) and htpasswd compare
            # them. bcrypt 5 raises on a longer one instead, which refused every password longer
            # than that (an `openssl rand -base64 64` secret) with 401.
            ok = self._checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], hashed or self._dummy) \
                and hashed is not None
        except ValueError:  # a malformed stored hash: refuse, never open
            ok = False
        if ok:
            with self._lock:
                self._ok[self._digest(header)] = None
                while len(self._ok) > AUTH_CACHE_SIZE:
                    self._ok.popitem(last=False)
        return ok


def _cost(hashed: bytes) -> int:
    """The cost (log2 rounds) of a bcrypt hash: ``$2b$12$...`` is 12."""
    return int(hashed[4:6])

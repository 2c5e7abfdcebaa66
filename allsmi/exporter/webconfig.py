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

import os
import re
import ssl
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from allsmi.exporter.basicauth import AUTH_CACHE_SIZE, BCRYPT_MAX_PASSWORD_BYTES, BasicAuth

__all__ = ["AUTH_CACHE_SIZE", "BCRYPT_MAX_PASSWORD_BYTES", "MAX_WEB_CONFIG_BYTES", "BasicAuth",
           "WebConfig", "WebConfigError", "load_web_config"]


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
#: The largest web configuration file read (a real one is well under a kilobyte): a larger one
#: is refused before it is parsed.
MAX_WEB_CONFIG_BYTES = 1024 * 1024
#: A bcrypt hash as htpasswd and Go's bcrypt write it: ``$2a$``/``$2b$``/``$2y$``, a two-digit
#: cost, ``$``, then 53 characters of bcrypt's base-64 alphabet.
_BCRYPT = re.compile(r"\$2[aby]\$([0-9][0-9])\$[./A-Za-z0-9]{53}")
#: Control characters (tab aside): never part of a path, a header value or a user name.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_HEADERS_ALLOWED = ("strict-transport-security", "x-frame-options", "x-content-type-options",
                    "x-xss-protection", "content-security-policy")


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


#: Mappings whose keys (and, for headers, values) are text as written, as exporter-toolkit reads
#: them: Go's yaml.v2 decodes a plain scalar into a ``string`` as its text, where PyYAML resolves
#: it first (user ``00123`` became ``83``, ``yes`` and ``true`` became ``True``, ``1_000``
#: ``1000``), so a file node_exporter accepts refused the right password with 401.
_TEXT_MAPPINGS = ((("basic_auth_users",), False), (("http_server_config", "headers"), True))


def _as_written(loader: Any, root: Any, data: Any) -> None:
    """Replace, in ``data`` (constructed from ``root`` by ``loader``), each mapping of
    :data:`_TEXT_MAPPINGS` by one whose keys (and header values) are the scalars' text as
    written; a null or a collection is constructed as usual (and refused by the checks that
    follow)."""
    import yaml

    for path, values_too in _TEXT_MAPPINGS:
        node, parent = root, data
        for key in path:
            found = [v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key] \
                if isinstance(node, yaml.MappingNode) and isinstance(parent, dict) else []
            if len(found) != 1 or key not in parent:
                break
            owner, node, parent = (parent, key), found[0], parent[key]
        else:
            if isinstance(node, yaml.MappingNode) and isinstance(parent, dict):
                owner[0][owner[1]] = {
                    _written(loader, k): _written(loader, v) if values_too
                    else loader.construct_object(v, deep=True)
                    for k, v in node.value}


def _written(loader: Any, node: Any) -> Any:
    """A scalar's text as written, unless it is null; anything else as constructed."""
    import yaml

    value = loader.construct_object(node, deep=True)
    return node.value if isinstance(node, yaml.ScalarNode) and value is not None else value


def _read_yaml(path: Path) -> tuple[Any, _Lines]:
    """The file parsed with PyYAML's safe loader (no tags, no code), and where its keys are."""
    import yaml

    from allsmi.support.boundedread import Unreadable, read_text
    try:
        text = read_text(path, MAX_WEB_CONFIG_BYTES, "web configuration file")
    except Unreadable as exc:
        raise WebConfigError(f"{path}: web configuration file not found" if exc.missing
                             else exc.located(path)) from None
    loader = yaml.SafeLoader(text)
    lines: dict[tuple[str, ...], int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            return None, _Lines(path, lines)
        _key_lines(node, (), lines, path)
        data = loader.construct_document(node)
        _as_written(loader, node, data)
        return data, _Lines(path, lines)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise WebConfigError(f"{path}{where}: malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{path}: malformed YAML: {exc}") from None
    except RecursionError:  # (PyYAML composes and constructs by recursion)
        raise WebConfigError(f"{path}: malformed YAML: nested too deeply") from None
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


def _cut(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters (a path of thousands is not echoed whole)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _shown(value: Any) -> str:
    """``value``'s ``repr``, cut (:func:`_cut`)."""
    return _cut(repr(value))


def _file(at: _Lines, base: Path, key: str, value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise at.error(f"must be a file path, got {_shown(value)}", _TLS, key)
    if _CONTROL.search(value):
        raise at.error(f"must be a file path without control characters, got {_shown(value)}",
                       _TLS, key)
    file = Path(value)
    if not file.is_absolute():
        file = base / file  # as exporter-toolkit: relative to the web configuration file
    try:
        if file.is_dir():
            raise at.error(f"{_cut(str(file))} is a directory, not a file", _TLS, key)
        if not file.exists():
            raise at.error(f"{_cut(str(file))} does not exist", _TLS, key)
        if not file.is_file():  # (a FIFO: ssl would wait for its writer forever)
            raise at.error(f"{_cut(str(file))} is not a regular file", _TLS, key)
    except OSError as exc:  # a name too long, a loop of links
        raise at.error(f"cannot use {_cut(str(file))}: {exc.strerror or exc}",
                       _TLS, key) from None
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
    if tls.get("prefer_server_cipher_suites") not in (None, True, False):
        raise at.error(f"must be true or false, got {_shown(tls['prefer_server_cipher_suites'])}",
                       _TLS, "prefer_server_cipher_suites")
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
        if context.maximum_version < context.minimum_version:
            raise at.error(f"{tls['max_version']} is below min_version "
                           f"{tls.get('min_version') or 'TLS12'}: no TLS version is left",
                           _TLS, "max_version")

    auth_type = tls.get("client_auth_type") or "NoClientCert"
    if not isinstance(auth_type, str):
        raise at.error(f"must be one of {', '.join(_CLIENT_AUTH)}, got {_shown(auth_type)}",
                       _TLS, "client_auth_type")
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
    if not isinstance(value, str) or value not in _VERSIONS:
        raise at.error(f"{key} must be one of {', '.join(_VERSIONS)}, got {_shown(value)}",
                       _TLS, key)
    return _VERSIONS[value]


def _users(at: _Lines, raw: Any) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise at.error("must map user names to bcrypt hashes", "basic_auth_users")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        name = str(user)
        if ":" in name or _CONTROL.search(name) or not name.strip():
            raise at.error(f"user name {_shown(name)} is empty or contains ':' or a control "
                           "character", "basic_auth_users")
        match = _BCRYPT.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None or not 4 <= int(match.group(1)) <= 31:
            raise at.error("not a bcrypt hash (expected 60 characters starting with $2a$, $2b$ "
                           "or $2y$ and a cost from 04 to 31)", "basic_auth_users", name)
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
    if raw.get("http2") not in (None, True, False):
        raise at.error(f"must be true or false, got {_shown(raw['http2'])}",
                       "http_server_config", "http2")
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
        if _CONTROL.search(text):
            raise at.error("line breaks and control characters are not allowed", *where)
        out[str(name)] = text
    return out

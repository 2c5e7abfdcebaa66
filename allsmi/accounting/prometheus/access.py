"""How ``allsmi export`` authenticates to Prometheus: the user, password and bearer-token files
and the CA file, from the flags or ``[export]`` (:func:`access_settings`), read with messages that
name the file (and the config file's line and key where it gave the path), never the secret."""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass

from allsmi.config import Config

#: The most a password or token file may hold.
MAX_SECRET_BYTES = 64 * 1024


@dataclass(frozen=True, repr=False)
class Credentials:
    """How to authenticate to Prometheus: basic auth or a bearer token (never both)."""

    username: str | None = None
    password: str | None = None
    bearer_token: str | None = None

    def header(self) -> str | None:
        """The ``Authorization`` header value, or ``None``."""
        if self.bearer_token is not None:
            return f"Bearer {self.bearer_token}"
        if self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode("utf-8")
            return "Basic " + base64.b64encode(pair).decode("ascii")
        return None

    def secrets(self) -> tuple[str, ...]:
        """The strings that must never be shown."""
        return tuple(x for x in (self.password, self.bearer_token) if x)

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=***, bearer_token=***)"


def read_secret(path: str, what: str) -> str:
    """The content of a password or token file without its trailing newline.

    Raises ValueError naming the file (never its content) when it cannot be
    read, is empty, too large or holds more than one line.
    """
    from allsmi.support.boundedread import TooLarge, read_bounded
    try:
        data = read_bounded(path, MAX_SECRET_BYTES)
    except OSError as exc:
        raise ValueError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    except TooLarge:
        raise ValueError(f"the {what} file {path} is larger than {MAX_SECRET_BYTES} bytes") \
            from None
    try:
        text = data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ValueError(f"the {what} file {path} is not UTF-8 text") from None
    if not text.strip() or "\n" in text or "\r" in text:
        raise ValueError(f"the {what} file {path} must hold one non-empty line")
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
        raise ValueError(f"the {what} file {path} holds a control character")
    if what == "bearer token" and not text.isascii():  # (sent as it is in an HTTP header)
        raise ValueError(f"the {what} file {path} holds a character that is not ASCII")
    return text


def access_settings(config: Config, user: str | None = None, password_file: str | None = None,
                    token_file: str | None = None,
                    ca_file: str | None = None) -> tuple[Credentials | None, str | None]:
    """Credentials and CA file from the flags, else from ``[export]`` (paths relative to the file).

    ConfigError for a bad ``[export]`` value, naming the file, the line and the key (an
    unreadable file it names, a combination it makes); ValueError for a bad combination or an
    unreadable file the flags gave (the message names the file, never its content). So
    ``allsmi doctor`` judges the file's keys as ``allsmi export`` does
    (:mod:`allsmi.cli.configcheck`).
    """
    table = config.section("export")
    values: dict[str, str | None] = {}
    from_file: set[str] = set()  # the keys whose values the config file gave
    for key, flag in (("prometheus_user", user), ("prometheus_password_file", password_file),
                      ("prometheus_bearer_token_file", token_file),
                      ("prometheus_ca_file", ca_file)):
        value = flag
        if value is None and key in table:
            raw = table[key]
            if not isinstance(raw, str) or not raw.strip():
                raise config.error(f"must be a non-empty string, got {raw!r}", "export", key)
            value = raw.strip()
            from_file.add(key)
            if key.endswith("_file") and config.path is not None:
                value = str(config.path.parent / os.path.expanduser(value))
        values[key] = value
    user, pw_file = values["prometheus_user"], values["prometheus_password_file"]
    tok_file = values["prometheus_bearer_token_file"]

    def located(key: str, exc: ValueError) -> Exception:
        """``exc`` naming the config file, line and key where the file gave the value."""
        return config.error(str(exc), "export", key) if key in from_file else exc

    if pw_file and not user:
        raise located("prometheus_password_file", ValueError(
            "a Prometheus password file needs a user (--prometheus-user)"))
    if user and not pw_file:
        raise located("prometheus_user", ValueError(
            "--prometheus-user needs --prometheus-password-file (or put the password in the URL)"))
    if user and tok_file:
        raise located("prometheus_bearer_token_file", ValueError(
            "give either basic auth (--prometheus-user) or a bearer token "
            "(--prometheus-bearer-token-file), not both"))

    credentials = None
    try:
        key = "prometheus_user"
        if user:
            if ":" in user or any(ord(c) < 32 or ord(c) == 127 for c in user):
                raise ValueError("the Prometheus user may not contain ':' or control characters")
            key = "prometheus_password_file"
            credentials = Credentials(username=user,
                                      password=read_secret(pw_file or "", "password"))
        elif tok_file:
            key = "prometheus_bearer_token_file"
            credentials = Credentials(bearer_token=read_secret(tok_file, "bearer token"))
        ca = values["prometheus_ca_file"]
        key = "prometheus_ca_file"
        if ca is not None and key in from_file:  # loaded here to name the key (the client loads it)
            try:
                if ca:  # (never a FIFO: ssl would wait for its writer forever)
                    from allsmi.support.boundedread import regular_file
                    regular_file(ca)
                ssl.create_default_context(cafile=ca)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"cannot load the CA file {ca}: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None
    except ValueError as exc:
        raise located(key, exc) from None
    return credentials, ca

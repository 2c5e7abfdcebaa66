"""``Authorization: Basic`` checked against the bcrypt hashes of a web configuration file's
``basic_auth_users`` (:mod:`allsmi.exporter.webconfig` reads the file)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from typing import Callable, Mapping

#: Successful credential checks remembered, so a scrape does not pay bcrypt's cost each time.
AUTH_CACHE_SIZE = 256
#: The most bytes of a password that bcrypt uses (its key schedule reads no more).
BCRYPT_MAX_PASSWORD_BYTES = 72


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

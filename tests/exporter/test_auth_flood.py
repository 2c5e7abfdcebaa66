"""A wrong-password flood from 64 addresses against a valid scraper (issue 32, item 11).

Each flooding address got its fair turn, so an uncached valid scraper from another address
waited one bcrypt check per flooding address: ~9.5 s in the report (one timeout, then eight
503s). An address whose check failed is now served after the others: the scraper waits for
the checks under way only.
"""

from __future__ import annotations

import time
from pathlib import Path

import base64

import bcrypt

from .server import run_serve
from .test_hostile_clients import SIMULATE, PasswordFlood, get_from, wait_for


def basic(user: str, password: str) -> str:
    return "Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() + "\r\n"


class Flood(PasswordFlood):
    """One keep-alive connection from an address sending wrong passwords; ``failed`` once a
    check of it failed (401)."""

    def __init__(self, address: str) -> None:
        super().__init__(0, address, 1)
        self.failed = False

    @property  # type: ignore[override]
    def answers(self) -> list[int]:
        return self._answers

    @answers.setter
    def answers(self, value: list[int]) -> None:
        self._answers = _Noting(self, value)


class _Noting(list):  # type: ignore[type-arg]
    def __init__(self, flood: Flood, items: list[int]) -> None:
        super().__init__(items)
        self.flood = flood

    def append(self, status: int) -> None:
        if status == 401:
            self.flood.failed = True
        if len(self) < 1000:
            super().append(status)

USERS = {f"scraper{i}": f"right password {i}" for i in range(4)}
ADDRESSES = [f"127.0.0.{i}" for i in range(2, 66)]  # 64 flooding addresses


def test_uncached_valid_scrapers_are_answered_at_once_during_a_64_address_flood(
        tmp_path: Path) -> None:
    lines = ["basic_auth_users:"]
    for user, password in USERS.items():  # cost 10: the default of htpasswd -B
        lines.append(f"  {user}: {bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()}")
    (tmp_path / "web.yml").write_text("\n".join(lines) + "\n")
    server = run_serve([*SIMULATE, "--web-config", str(tmp_path / "web.yml")], tmp=tmp_path)
    floods = [Flood(address) for address in ADDRESSES]
    try:
        server.wait_listening()
        wait_for(lambda: get_from("127.0.0.200", server.port, "/healthz") == 401)
        for flood in floods:
            flood.port = server.port
            flood.__enter__()
        # every flooding address has failed a check: the flood is at full strength
        deadline = time.monotonic() + 120
        while not all(f.failed for f in floods):
            assert time.monotonic() < deadline, sum(bool(f.failed) for f in floods)
            time.sleep(0.2)
        for user, password in USERS.items():  # none cached: each needs its bcrypt check
            started = time.monotonic()
            status = get_from("127.0.0.1", server.port, "/metrics", basic(user, password),
                              timeout=15)
            took = time.monotonic() - started
            # the checks under way, then its own (tens of ms each on an idle machine; seconds
            # on a loaded CI runner); before the fix: 503 at once, or a wait for every address
            assert status == 200 and took < 5.0, (user, status, took)
        assert all(set(f.answers) <= {401, 503} for f in floods)
    finally:
        for flood in floods:
            flood._stop.set()
        code = server.stop()  # its connections close: the flood's threads end at once
        for flood in floods:
            flood.__exit__()
    assert code == 0, server.output()[-3000:]

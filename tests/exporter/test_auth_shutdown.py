"""``allsmi serve`` stopped by SIGTERM while a wrong-password flood keeps bcrypt busy (issue 32,
item 4).

Before the fix, the bcrypt workers were daemon threads still inside ``bcrypt.checkpw`` when
the interpreter finalized: each run ended in ``FATAL: exception not rethrown`` and SIGABRT
(exit 134), which systemd records as a crash. The workers are now stopped and joined before
the process exits: exit 0 (as documented), the ledger closed with what it held.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import bcrypt
import pytest

from .server import run_serve
from .test_hostile_clients import SIMULATE, PasswordFlood, get_from, wait_for

ADDRESSES = [f"127.0.0.{i}" for i in range(2, 18)]  # 16 flooding addresses


@pytest.mark.parametrize("attempt", range(3))
def test_sigterm_during_a_password_flood_exits_0_and_loses_nothing(tmp_path: Path, attempt: int) -> None:
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10)).decode()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  scraper0: {hashed}\n")
    ledger = tmp_path / "usage.db"
    server = run_serve([*SIMULATE, "--web-config", str(tmp_path / "web.yml"), "--ledger", str(ledger)],
                       tmp=tmp_path)
    floods = [PasswordFlood(0, address, 4) for address in ADDRESSES]
    try:
        server.wait_listening()
        wait_for(lambda: get_from("127.0.0.1", server.port, "/healthz") == 401)
        for flood in floods:
            flood.port = server.port
            flood.__enter__()
        wait_for(lambda: sum(len(f.answers) for f in floods) >= 40)  # bcrypt is busy
        started = time.monotonic()
        code = server.stop()
        took = time.monotonic() - started
    finally:
        for flood in floods:
            flood.__exit__()
        server.stop()
    output = server.output()
    assert code == 0, output[-3000:]
    assert "FATAL" not in output and "Traceback" not in output, output[-3000:]
    assert "shutting down" in output
    assert took < 10, took
    with sqlite3.connect(ledger) as db:  # closed cleanly: readable, with the recorded time
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # the interval in progress was written at shutdown: every device has its time
        assert db.execute("SELECT COUNT(DISTINCT dev) FROM intervals").fetchone()[0] == 41  # the mixed node
    assert not Path(f"{ledger}-wal").exists() or Path(f"{ledger}-wal").stat().st_size == 0

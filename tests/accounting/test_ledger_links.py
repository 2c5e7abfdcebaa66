"""One recorder per ledger file, whatever name reaches it (issue 32, item 8).

Two ``allsmi record`` processes on two hard links to one database used to run side by side,
each with its own WAL (``NAME-wal`` follows the name), which SQLite documents as a corruption
risk; a container bind-mounting the single file meets the same case. The second recorder is
now refused with a message saying why, however the file is reached.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from allsmi.accounting.ledger.store import Ledger, LedgerError


def start_recorder(db: Path, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "ALLSMI_CONFIG": os.devnull, "ALLSMI_SIMULATE_SPEED": "60",
           "XDG_CONFIG_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "allsmi", "record", "--simulate", "mixed",
                             "--interval", "0.25", "--ledger", str(db)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_recorder_on_a_hard_link_is_refused(tmp_path: Path) -> None:
    first_db = tmp_path / "host" / "ledger.db"
    second_db = tmp_path / "container" / "ledger.db"  # another directory: its own PATH.lock
    first = start_recorder(first_db, tmp_path)
    try:
        assert first.stderr is not None
        line = first.stderr.readline()
        assert "recording" in line, line
        second_db.parent.mkdir()
        os.link(first_db, second_db)
        second = start_recorder(second_db, tmp_path)
        try:
            _, err = second.communicate(timeout=30)
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
        assert second.returncode == 1, err
        assert "already being recorded" in err and "hard link" in err, err
        assert not Path(f"{second_db}-wal").exists(), "the second recorder opened its own WAL"
        assert first.poll() is None, "the first recorder must keep recording"
    finally:
        first.terminate()
        first.communicate(timeout=30)
    assert first.returncode == 0


def test_the_lock_follows_the_inode_both_ways(tmp_path: Path) -> None:
    db = tmp_path / "a" / "l.db"
    link = tmp_path / "b" / "l.db"
    with Ledger(db):
        link.parent.mkdir()
        os.link(db, link)
        with pytest.raises(LedgerError, match="hard link"):
            Ledger(link)
    with Ledger(link):  # the link's writer shuts out the first name
        with pytest.raises(LedgerError, match="already being recorded"):
            Ledger(db)
    with Ledger(db):  # closed: free again, and readers are never refused
        reader = Ledger(link, readonly=True)
        assert reader.integrity_check() == "ok"
        reader.close()

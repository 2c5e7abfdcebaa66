"""The owners and command lines of device processes are read only where ``/proc`` shows the
host's pids, those the drivers report (``backends/_common/owners.py``, ``allsmi/support/pidns.py``):
in a container without the host's PID namespace, a driver's pid names another process there,
whose user would be shown as the device's."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psutil
import pytest

from allsmi.backends._common.owners import ProcessOwners
from allsmi.support.pidns import PROC_PID_INIT_INO, pid_view


def _proc(tmp_path: Path, inode: int) -> str:
    """A /proc whose init is in the PID namespace of ``inode``."""
    (tmp_path / "1" / "ns").mkdir(parents=True)
    os.symlink(f"pid:[{inode}]", tmp_path / "1" / "ns" / "pid")
    return str(tmp_path)


def test_another_namespaces_pids_have_no_owner_said_once(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    owners = ProcessOwners(proc_root=_proc(tmp_path, 4026532999))
    with caplog.at_level(logging.WARNING):
        assert owners(os.getpid()) == (None, None)
        assert owners.user(os.getpid()) is None
        assert owners(1) == (None, None)
    said = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
    assert len(said) == 1 and "hostPID" in said[0], said


def test_the_hosts_pids_have_their_owners(tmp_path: Path) -> None:
    if not pid_view("/proc").host:
        pytest.skip("this suite runs outside the host's PID namespace: psutil reads its own /proc")
    owners = ProcessOwners(proc_root=_proc(tmp_path, PROC_PID_INIT_INO))
    user, command = owners(os.getpid())
    assert user == psutil.Process().username() and command

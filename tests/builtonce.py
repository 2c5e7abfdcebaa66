"""Test data built once per run, however many pytest-xdist workers need it.

A module-scoped fixture is built once per worker that runs a test of its module; with six
workers stealing work, an expensive one (a ledger of fifteen days of minutes: 35 s on two
loaded cores) was built up to three times a run. :func:`built_once` builds it in the directory
the run's workers share (the parent of each worker's base temporary directory), under a lock:
the first worker builds, the others wait for it and read the result.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Callable

import pytest


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The directory ``name`` holding what ``build(directory)`` wrote, built by the first
    worker of the run that asks; the result must be read, never changed, by its users."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, shared by its workers
    target = root / f"built-once-{name}"
    with open(root / f"built-once-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (target / ".built").exists():
                target.mkdir(exist_ok=True)
                build(target)
                (target / ".built").touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target

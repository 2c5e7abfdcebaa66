"""What a test needs that ``.ci/run`` makes in the background while the tests' own environment
installs (focus-validator's environment, the wheelhouse): the test waits for that install to
end. ``.ci/run`` writes the install's process id into ``NAME.installing`` and removes the file
when the install ends (a stale file from an interrupted run names no live process)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

#: The longest a test waits for a background install (within a test's own 300 s).
WAIT_SECONDS = 240.0


def installing(pidfile: Path) -> bool:
    """Whether the background install that ``pidfile`` names still runs."""
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):  # no file, no such process (or not a number)
        return False
    try:  # an ended process its parent has not reaped yet (a zombie) runs no more
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def wait_for_install(pidfile: Path, ready: Callable[[], bool],
                     seconds: float = WAIT_SECONDS) -> None:
    """Return once ``ready()``, or once the install ``pidfile`` names has ended (or never ran),
    or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not ready() and installing(pidfile) and time.monotonic() < deadline:
        time.sleep(0.5)  # (pip's own pace: a condition polled, half a second apart)

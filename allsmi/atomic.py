"""Writing files so that a reader never sees half of one.

The data goes to a temporary file in the same directory, is flushed and
fsynced, then renamed over the target; files are owner-only (0600) unless a
mode is given. A target that exists and is not a regular file (``/dev/null``,
``/dev/stdout``, a FIFO) is written to as it is: renaming over it would replace
the device node with a file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically; the file gets ``mode`` permissions."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        special = not stat.S_ISREG(os.stat(target).st_mode)
    except FileNotFoundError:
        special = False
    if special:  # a device or a pipe: write through it, never rename over it
        with open(target, "wb") as handle:
            handle.write(payload)
            handle.flush()
        return
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)

"""Writing files so that a reader never sees half of one.

The data goes to a temporary file in the same directory, is flushed and
fsynced, then renamed over the target; files are owner-only (0600) unless a
mode is given. A target that exists and is not a regular file (``/dev/null``,
``/dev/stdout``, a FIFO) is written to as it is: renaming over it would replace
the device node with a file. :func:`holds_database` tells an output that would replace a
database (a ledger): the commands refuse it before any work. :func:`make_private_dirs` creates
the directories allsmi writes its own files into: owner-only (0700), each of them.
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


def make_private_dirs(directory: str | os.PathLike[str]) -> None:
    """Create ``directory`` and every missing directory above it owner-only (0700, whatever the
    umask: ``Path.mkdir(parents=True, mode=...)`` gives the parents the umask's mode); the
    directories that exist are left as they are."""
    path = Path(directory)
    missing = []
    while not os.path.lexists(path) and path.parent != path:
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # (made meanwhile by another process, or ``a/..``)
            continue
        os.chmod(path, 0o700)  # (a umask such as 0o277 would take the owner's bits)


#: The first bytes of an SQLite database and of its write-ahead log (both byte orders).
SQLITE_MAGIC = (b"SQLite format 3\x00", b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")


def holds_database(target: str | os.PathLike[str], ledger: str | os.PathLike[str] | None = None
                   ) -> bool:
    """Whether writing ``target`` would destroy a ledger: it is ``ledger`` or one of its files
    (``-wal``, ``-shm``, ``.lock``; through any link), or it holds an SQLite database or
    write-ahead log (any ledger)."""
    if ledger:
        real = os.path.realpath(ledger)
        if os.path.realpath(target) in {real + s for s in ("", "-wal", "-shm", ".lock")}:
            return True
        try:
            if os.path.samefile(target, ledger):  # (a hard link, a bind mount)
                return True
        except OSError:
            pass
    try:
        if not stat.S_ISREG(os.stat(target).st_mode):  # (never read a pipe, /dev/stdout)
            return False
        with open(target, "rb") as handle:
            head = handle.read(16)
    except OSError:
        return False
    return head.startswith(SQLITE_MAGIC)

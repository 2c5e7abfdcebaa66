"""A user's input file read whole, but never more than a bound: a configuration, scenario, web
configuration, hosts or secret file that is a log file of gigabytes is refused as too large after
the bound's bytes, not read until the memory runs out; one that is no regular file (a FIFO, which
would wait for a writer forever, a socket, a directory, ``/dev/zero``) is refused at once."""

from __future__ import annotations

import os
import stat


class TooLarge(ValueError):
    """The file holds more than the bound allows."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"too large: at most {limit} bytes")
        self.limit = limit


class NotAFile(OSError):
    """The path names no regular file: a FIFO (read, it would wait for a writer forever), a
    socket, a directory or a device (``/dev/null`` excepted: it reads as an empty file)."""

    def __init__(self, mode: int) -> None:
        """``mode``: the file's ``st_mode``, which says what it is."""
        kind = next((k for test, k in _KINDS if test(mode)), "no regular file")
        super().__init__(f"not a regular file (it is {kind})")
        self.strerror = f"not a regular file (it is {kind})"


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISCHR, "a character device"))


def _is_dev_null(info: os.stat_result) -> bool:
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(null.st_mode) and info.st_rdev == null.st_rdev


def regular_file(path: str | os.PathLike[str]) -> None:
    """Raise :class:`NotAFile` where ``path`` names no regular file (``/dev/null`` included), for
    a file a library opens itself (a CA file: :mod:`ssl` would wait on a FIFO forever); and
    ``OSError`` as ``os.stat`` does."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise NotAFile(info.st_mode)


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the file at ``path``, at most ``limit`` of them; raises :class:`TooLarge`
    when it holds more, :class:`NotAFile` (an ``OSError``) when ``path`` is no regular file (at
    once: a FIFO is opened without waiting for a writer), and ``OSError`` as ``open`` and
    ``read`` do."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        regular_file(path)  # (a socket cannot be opened: say what it is)
        raise
    try:
        info = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISCHR(info.st_mode) and _is_dev_null(info):
            return b""  # (the usual way to say "no file": ALLSMI_CONFIG=/dev/null)
        raise NotAFile(info.st_mode)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(limit)
    return data


def undecodable_line(data: bytes, exc: UnicodeDecodeError) -> int:
    """The line (from 1) of ``data`` where its first byte that is not UTF-8 stands."""
    return data[:exc.start].count(b"\n") + 1


class Unreadable(ValueError):
    """Why a text file could not be read (:func:`read_text`): its reason, the line where that
    is known, and whether the file is missing."""

    def __init__(self, reason: str, line: int | None = None, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.line, self.missing = reason, line, missing

    def located(self, path: str | os.PathLike[str]) -> str:
        """``PATH[, line N]: reason``, as a message says it."""
        where = f"{path}, line {self.line}" if self.line is not None else f"{path}"
        return f"{where}: {self.reason}"


def read_text(path: str | os.PathLike[str], limit: int, what: str) -> str:
    """The UTF-8 text of the file at ``path`` (``what`` it is, for the message), at most
    ``limit`` bytes; raises :class:`Unreadable` when it cannot be read, is larger or is not
    UTF-8 (with the line of its first such byte)."""
    try:
        data = read_bounded(path, limit)
    except FileNotFoundError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or exc}", missing=True) from None
    except OSError as exc:
        raise Unreadable(f"cannot read: {exc.strerror or exc}") from None
    except TooLarge:
        raise Unreadable(f"too large: a {what} may be from 0 to {limit} bytes") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 text (byte {exc.start + 1})",
                         undecodable_line(data, exc)) from None

"""A user's input file read whole, but never more than a bound: a configuration, scenario, web
configuration, hosts or secret file given as ``/dev/zero`` or a log file of gigabytes is refused
as too large after the bound's bytes, not read until the memory runs out."""

from __future__ import annotations

import os


class TooLarge(ValueError):
    """The file holds more than the bound allows."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"too large: at most {limit} bytes")
        self.limit = limit


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the file at ``path``, at most ``limit`` of them; raises :class:`TooLarge`
    when it holds more, and ``OSError`` as ``open`` and ``read`` do."""
    with open(path, "rb") as handle:
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

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

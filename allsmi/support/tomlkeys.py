"""Where a key stands in a TOML text, for error messages that name the line.

``tomllib`` reports a line only for syntax errors; a value of the wrong type or out of
range is found later, by the validator, which then asks :class:`KeyLocator` for the
line of the key path. Shared by the configuration and the simulation's scenario files
(which sit in different layers), so it belongs to the schema layer and imports nothing.
"""

from __future__ import annotations

import re
from typing import Any


class KeyLocator:
    """The line of each key path of a TOML text (first occurrence).

    Key paths are tuples of strings; the n-th table of an array of tables ``[[x]]`` is
    ``("x", "n")`` counting from 0, so ``("devices", "2", "count")`` is the ``count`` of the
    third ``[[devices]]``. Keys of inline tables are not located (their line is the one of the
    key that holds them, the longest known prefix).
    """

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    _KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_\-.]+)\s*=""")

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[str, ...], int] = {}
        self.shown: dict[int, str] = {}
        """The key each line writes, as error messages show it (``rules[3].vendor``): a TOML
        syntax error (a key written twice, a bad value) names it, as the validator's do."""
        table: tuple[str, ...] = ()
        table_shown = ""
        arrays: dict[tuple[str, ...], int] = {}
        """Each array of tables (its path, with the indexes of the arrays it is in) and the index
        of its last table: ``[[partitions.instances]]`` belongs to the last ``[[partitions]]``."""
        for number, raw in enumerate(text.splitlines(), start=1):
            header = self._HEADER.match(raw)
            if header:
                name = tuple(self._clean(p) for p in header.group(2).split("."))
                table, shown = (), []
                for i, part in enumerate(name):
                    table += (part,)
                    shown.append(part)
                    if i < len(name) - 1 and table in arrays:  # inside that array's last table
                        shown[-1] += f"[{arrays[table] + 1}]"
                        table += (str(arrays[table]),)
                if header.group(1) == "[[":
                    arrays[table] = arrays.get(table, -1) + 1
                    shown[-1] += f"[{arrays[table] + 1}]"
                    table += (str(arrays[table]),)
                table_shown = ".".join(shown)
                self.lines.setdefault(table, number)
                self.shown[number] = table_shown
                continue
            key = self._KEY.match(raw)
            if key:
                parts = tuple(self._clean(p) for p in key.group(1).split("."))
                self.lines.setdefault(table + parts, number)
                self.shown[number] = ".".join((table_shown,) + parts if table_shown else parts)

    @staticmethod
    def _clean(part: str) -> str:
        return part.strip().strip('"').strip("'")

    def find(self, key_path: tuple[str, ...]) -> int | None:
        """The line of the longest known prefix of ``key_path``."""
        for end in range(len(key_path), 0, -1):
            line = self.lines.get(tuple(key_path[:end]))
            if line:
                return line
        return None


def toml_syntax_line(exc: Exception) -> tuple[str, int | None]:
    """``(reason, line)`` of a ``tomllib.TOMLDecodeError``."""
    match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
    return re.sub(r" \(at line.*", "", str(exc)), int(match.group(1)) if match else None


def too_long_integer(text: str) -> tuple[str, int | None, str | None]:
    """``(reason, line, key)`` of a TOML text ``tomllib`` fails on with a ``ValueError`` rather
    than a ``TOMLDecodeError``: an integer of more digits than Python converts
    (``sys.get_int_max_str_digits()``, 4300), found as the first line holding one outside its
    quoted text."""
    import sys
    limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300
    run = re.compile(r"[0-9A-Fa-f_]{%d,}" % (limit + 1))
    quoted = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'")
    reason = f"an integer of more than {limit} digits (out of every range)"
    for number, raw in enumerate(text.splitlines(), start=1):
        if run.search(quoted.sub('""', raw).split("#", 1)[0]):  # (not in text, nor a comment)
            return reason, number, KeyLocator(text).shown.get(number)
    return reason, None, None


def undecodable(data: bytes, exc: UnicodeDecodeError) -> tuple[str, int, str | None]:
    """``(reason, line, key)`` of bytes of a TOML file that are not UTF-8 (TOML's encoding)."""
    before = data[:exc.start]
    line = before.count(b"\n") + 1
    column = exc.start - (before.rfind(b"\n") + 1) + 1
    key = KeyLocator(data.decode("utf-8", "replace")).shown.get(line)
    return (f"not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}); a TOML file is "
            "UTF-8", line, key)


def drop_key(data: Any, key_path: tuple[str, ...]) -> bool:
    """Remove ``key_path`` from nested tables and arrays; whether it was there."""
    if not key_path:
        return False
    *parents, last = key_path
    node = data
    for key in parents:
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return False
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        del node[int(last)]
        return True
    return False

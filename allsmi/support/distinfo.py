"""Installed distributions' entry points and versions, without importing ``importlib.metadata``.

Importing ``importlib.metadata`` (email, zipfile, csv, pathlib ...) costs more than
everything else ``allsmi snapshot`` does to find its backends. The plain layout,
``*.dist-info`` and ``*.egg-info`` folders in the directories on ``sys.path``, is
read here with the same rules ``importlib.metadata`` (Python 3.10 to 3.13) applies:
``sys.path`` order, one distribution per normalized name (the first one found wins),
``entry_points.txt`` sections and ``name = value`` pairs, ``Version:`` from the
``METADATA``/``PKG-INFO`` header. Whatever this module is not sure about (a zip file
or an ``.egg`` on ``sys.path``, another meta-path finder that lists distributions,
a line ``importlib.metadata`` would parse differently or reject, a value with
extras) makes it answer ``None``, and the caller asks ``importlib.metadata``
itself; ``tests/test_distinfo.py`` checks that both give the same answers.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Iterator

_INFO_SUFFIXES = (".dist-info", ".egg-info")
#: An entry point's value, ``module[:attr]``, as ``importlib.metadata.EntryPoint.pattern``
#: accepts it without extras.
_VALUE = re.compile(r"^(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?\Z")


class _Unsure(Exception):
    """A layout or text this module does not read exactly as importlib.metadata does."""


class EntryPoint:
    """``name = module:attr`` of one group: what :mod:`allsmi.collection.registry` needs of an entry point."""

    __slots__ = ("name", "value", "group")

    def __init__(self, name: str, value: str, group: str) -> None:
        self.name = name
        self.value = value
        self.group = group

    def load(self) -> Any:
        """Import the module and return the attribute, as ``importlib.metadata.EntryPoint.load``."""
        import importlib
        match = _VALUE.match(self.value)
        if match is None:  # pragma: no cover - filtered when read
            raise ValueError(f"entry point value {self.value!r}")
        obj: Any = importlib.import_module(match.group("module"))
        for part in filter(None, (match.group("attr") or "").split(".")):
            obj = getattr(obj, part)
        return obj

    def __repr__(self) -> str:
        return f"EntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r})"


def _normalize(name: str) -> str:
    """``importlib.metadata.Prepared.normalize``."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _plain_finders() -> bool:
    """Whether the only meta-path finder listing distributions is the standard PathFinder."""
    from importlib.machinery import PathFinder
    return all(finder is PathFinder or not hasattr(finder, "find_distributions")
               for finder in sys.meta_path)


#: The last scan: ``(stamp, distributions, why it stopped unsure or None)``. ``stamp`` is
#: ``sys.path`` with each directory's modification time, so a process that asks again (the
#: registry and two vendors' probes in one ``allsmi snapshot``) lists each directory once, and
#: a distribution installed or removed since (its folder's parent changes) is seen.
_SCAN: tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...], _Unsure | None] | None = None
#: ``(folder, filename) -> text`` read under the current scan (dropped with it).
_TEXTS: dict[tuple[str, str], str | None] = {}
_UNREAD: Any = object()


def _distributions() -> Iterator[tuple[str, str]]:
    """``(normalized name, info folder)`` of each distribution in ``importlib.metadata``'s order,
    duplicates (later ones of the same name) left out."""
    global _SCAN
    if not _plain_finders():
        raise _Unsure("a meta-path finder lists distributions")
    stamp = _stamp()
    if _SCAN is None or _SCAN[0] != stamp:
        found: list[tuple[str, str]] = []
        unsure: _Unsure | None = None
        try:
            found.extend(_scan())
        except _Unsure as exc:
            unsure = exc
        _SCAN = (stamp, tuple(found), unsure)
        _TEXTS.clear()
    yield from _SCAN[1]
    if _SCAN[2] is not None:
        raise _SCAN[2]


def forget() -> None:
    """Drop the last scan and the texts read under it (a long-running process whose
    registry has loaded: the next question scans again)."""
    global _SCAN
    _SCAN = None
    _TEXTS.clear()


def _stamp() -> tuple[tuple[str, int], ...]:
    stamp = []
    for entry in sys.path:
        if not isinstance(entry, str):
            raise _Unsure(f"{entry!r} on sys.path is not a str")
        try:
            stamp.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            stamp.append((entry, -1))
    return tuple(stamp)


def _scan() -> Iterator[tuple[str, str]]:
    seen: set[str] = set()
    for entry in sys.path:
        root = entry or "."
        try:
            children = os.listdir(root)
        except OSError:
            if os.path.isfile(root):
                raise _Unsure(f"{root} is a file (zip) on sys.path") from None
            continue
        if os.path.basename(root).lower().endswith(".egg"):
            raise _Unsure(f"{root} is an egg")
        by_name: dict[str, list[str]] = {}
        for child in children:
            low = child.lower()
            if not low.endswith(_INFO_SUFFIXES):
                continue
            if not child.endswith(_INFO_SUFFIXES):
                raise _Unsure(f"{child}: upper-case suffix")
            by_name.setdefault(_normalize(low.rpartition(".")[0].partition("-")[0]), []).append(child)
        for name, folders in by_name.items():
            for folder in folders:
                if name not in seen:
                    seen.add(name)
                    yield name, os.path.join(root, folder)


def _read(folder: str, filename: str) -> str | None:
    """``PathDistribution.read_text``: ``None`` when the file is not there or not readable
    (read once under a scan)."""
    key = (folder, filename)
    text = _TEXTS.get(key, _UNREAD)  # one lookup: another thread may clear the dict meanwhile
    if text is _UNREAD:
        text = _TEXTS[key] = _read_file(folder, filename)
    return text  # type: ignore[return-value]


def _read_file(folder: str, filename: str) -> str | None:
    try:
        with open(os.path.join(folder, filename), encoding="utf-8") as handle:
            return handle.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise _Unsure(f"{folder}/{filename}: {exc}") from None


def _pairs(text: str, group: str) -> Iterator[tuple[str, str]]:
    """``importlib.metadata.Sectioned.section_pairs`` restricted to ``group``."""
    section: str | None = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        if "=" not in line:
            raise _Unsure(f"entry point line without '=': {line!r}")  # importlib.metadata raises
        name, value = (part.strip() for part in line.split("=", 1))
        if section == group:
            if _VALUE.match(value) is None:
                raise _Unsure(f"entry point value {value!r}")
            yield name, value


def entry_points(group: str) -> list[EntryPoint] | None:
    """The entry points of ``group`` in ``importlib.metadata.entry_points(group=...)``'s order,
    or ``None`` when only ``importlib.metadata`` can tell."""
    try:
        found: list[EntryPoint] = []
        for _, folder in _distributions():
            text = _read(folder, "entry_points.txt")
            if text:
                found.extend(EntryPoint(name, value, group) for name, value in _pairs(text, group))
        return found
    except _Unsure:
        return None


def version(distribution: str) -> str | None:
    """``importlib.metadata.version(distribution)``, ``None`` when it is not installed."""
    try:
        wanted = _normalize(distribution)
        for name, folder in _distributions():
            if name != wanted:
                continue
            text = _read(folder, "METADATA") if folder.endswith(".dist-info") else None
            if text is None:
                text = _read(folder, "PKG-INFO")
            if text is None:
                raise _Unsure(f"{folder}: no METADATA")
            for line in text.splitlines():
                if not line.strip():
                    break
                key, sep, value = line.partition(":")
                if sep and key == "Version" and not line[0].isspace():
                    return value.strip()
            raise _Unsure(f"{folder}: no Version header")
    except _Unsure:
        pass
    else:
        return None
    from importlib import metadata
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None

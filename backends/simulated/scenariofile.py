"""One scenario file: finding it (a built-in name or a path), reading it (UTF-8, at most
:data:`MAX_BYTES`), and its typed values, each checked for its type and range; every problem
a :class:`ScenarioError` naming the file, the line and the key."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from allsmi.support.boundedread import TooLarge, read_bounded
from allsmi.schema.numbers import setting_number
from allsmi.schema.text import MAX_NAME, clipped, escaped
from allsmi.support.tomlkeys import KeyLocator, too_long_integer, toml_syntax_line, undecodable

from .checks import text_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCENARIO_DIR = Path(__file__).with_name("scenarios")
MAX_BYTES = 1 << 20
"""Longest scenario file read (1 MiB; the built-in ``mixed`` is under 16 KiB)."""

#: The kinds of value a rule names: (kind, minimum, maximum).
INT, NUM, STR, BOOL = "integer", "number", "string", "boolean"
Rule = tuple[str, "float | None", "float | None"]
#: Keys whose minimum is exclusive (more than 0); the other minimums are inclusive.
POSITIVE = ("seconds", "every_seconds", "duration_seconds", "duty_cycle")


class ScenarioError(ValueError):
    """A scenario file is missing or malformed; the message names the file, line and key."""

    def __init__(self, message: str, path: Path | str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        where = str(path) if path else "<scenario>"
        if line:
            where += f", line {line}"
        if key:
            where += f", key '{key}'"
        self.path, self.line, self.key, self.reason = path, line, key, message
        # A path or a key may hold anything: shown escaped, never reaching a terminal raw.
        super().__init__(clipped(escaped(f"{where}: {message}")))


def builtin_scenarios() -> list[str]:
    """Names accepted by ``--simulate NAME``."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) <= 2**63 else f"{value:g}"


def _shown(raw: Any) -> str:
    """``raw`` as a message shows it: an integer of more than 24 digits by its length."""
    if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) >= 10**24:
        return f"an integer of {len(str(abs(raw)))} digits"
    return repr(raw)


class ScenarioFile:
    """One scenario file: its data and where each key stands in it."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        try:
            self.data: dict[str, Any] = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            reason, line = toml_syntax_line(exc)  # and the key written there (one written twice)
            key = KeyLocator(text).shown.get(line) if line else None
            raise ScenarioError(f"invalid TOML: {reason}", path, line, key) from None
        except ValueError:  # (tomllib's int() of more than 4300 digits)
            reason, line, key = too_long_integer(text)
            raise ScenarioError(f"invalid TOML: {reason}", path, line, key) from None
        self.locator = KeyLocator(text)

    def error(self, message: str, *key_path: str | int) -> ScenarioError:
        keys = tuple(str(k) for k in key_path)
        shown = ".".join(k if not k.isdigit() else f"[{int(k) + 1}]" for k in keys).replace(".[", "[")
        return ScenarioError(message, self.path, self.locator.find(keys), shown or None)

    # -- typed values ------------------------------------------------------
    def value(self, raw: Any, rule: Rule, *key: str | int, longest: int = MAX_NAME,
              as_processes_say: bool = False) -> Any:
        """``raw`` checked against ``rule``: a string (non-empty, no control or format
        character unless ``as_processes_say``: :func:`text_problem`, at most ``longest``
        characters), a boolean, or a number within the rule's range (both ends named when it
        is out of it)."""
        kind, low, high = rule
        name = str(key[-1])
        if kind == STR:
            if not isinstance(raw, str) or not raw.strip():
                raise self.error(f"must be a non-empty string, got {raw!r}", *key)
            problem = text_problem(raw, longest, as_processes_say)
            if problem:
                raise self.error(problem, *key)
            return raw
        if kind == BOOL:
            if not isinstance(raw, bool):
                raise self.error(f"must be true or false, got {raw!r}", *key)
            return raw
        positive = name in POSITIVE
        lowest = (f"more than {_bound(low)}" if positive else f"at least {_bound(low)}"
                  ) if low is not None else ""
        highest = f"at most {_bound(high)}" if high is not None else ""
        bounds = " and ".join(filter(None, (lowest, highest)))
        if kind == INT and (isinstance(raw, bool) or not isinstance(raw, int)):
            raise self.error(f"must be a whole number {bounds}".rstrip() + f", got {_shown(raw)}",
                             *key)
        # (a bool, text, NaN, an infinity; an integer too large for a float is a number, out
        # of range below: compared as an int, exactly, never converted)
        if setting_number(raw) is None:
            raise self.error(f"must be a finite number {bounds}".rstrip() + f", got {_shown(raw)}",
                             *key)
        if (low is not None and (raw < low or (positive and raw <= low))) or (
                high is not None and raw > high):
            raise self.error(f"must be {bounds}, got {_shown(raw)}", *key)
        return raw if kind == INT else float(raw)

    def table(self, raw: Any, rules: dict[str, Rule], required: tuple[str, ...], *key: str | int,
              extra: tuple[str, ...] = (), longest: dict[str, int] | None = None
              ) -> dict[str, Any]:
        """A table's values, each by its rule; an unknown key or a missing required one is
        an error (``extra`` keys are allowed, left to the caller)."""
        if not isinstance(raw, dict):
            raise self.error("must be a table", *key)
        for name in raw:
            if name not in rules and name not in extra:
                allowed = ", ".join(sorted((*rules, *extra)))
                raise self.error(f"unknown key (allowed: {allowed})", *key, name)
        for name in required:
            if name not in raw:
                raise self.error(f"missing required key {name!r}", *key)
        return {name: self.value(v, rules[name], *key, name,
                                 longest=(longest or {}).get(name, MAX_NAME))
                for name, v in raw.items() if name in rules}

    def strings(self, raw: Any, *key: str, longest: int = MAX_NAME,
                as_processes_say: bool = False) -> tuple[str, ...]:
        if not isinstance(raw, list) or not raw:
            raise self.error("must be a non-empty list of strings", *key)
        if len(raw) > 4096:
            raise self.error(f"must hold at most 4096 strings, got {len(raw)}", *key)
        return tuple(self.value(v, (STR, None, None), *key, i, longest=longest,
                                as_processes_say=as_processes_say) for i, v in enumerate(raw))

    def array(self, name: str) -> list[Any]:
        raw = self.data.get(name, [])
        if not isinstance(raw, list):
            raise self.error("must be an array of tables ([[" + name + "]])", name)
        return raw


def read_file(path: Path) -> ScenarioFile:
    """The scenario file at ``path``, parsed (a UTF-8 byte-order mark left out)."""
    data = b""
    try:
        if os.path.isdir(path):
            raise ScenarioError("is a directory, not a scenario file", path)
        data = read_bounded(path, MAX_BYTES)
        return ScenarioFile(path, data.decode("utf-8").removeprefix("\ufeff"))
    except TooLarge:
        raise ScenarioError(f"too large: a scenario file is at most {MAX_BYTES} bytes",
                            path) from None
    except FileNotFoundError:
        raise ScenarioError("scenario file not found", path) from None
    except UnicodeDecodeError as exc:
        reason, line, key = undecodable(data, exc)
        raise ScenarioError(reason, path, line, key) from None
    except OSError as exc:
        raise ScenarioError(f"cannot read: {exc.strerror or exc}", path) from None


def find_file(ref: str | Path, builtin: bool = False) -> Path:
    """The file ``--simulate REF`` names: a path, or the built-in scenario of that name (only
    that, whatever the working directory holds, with ``builtin``: an ``include``)."""
    path = Path(ref)
    # (os.path: a name the system refuses, such as one too long, is no file; Path.is_file
    # raises for it)
    if builtin or (not path.suffix and not os.path.isfile(path)):
        path = SCENARIO_DIR / f"{ref}.toml"
        if not os.path.isfile(path):
            raise ScenarioError(f"unknown scenario {str(ref)!r}: built-in scenarios are "
                                f"{', '.join(builtin_scenarios())}, or give a path to a .toml file")
    return path

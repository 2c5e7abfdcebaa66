"""Text from tools, libraries, processes and remote hosts, made safe once.

Every string that enters the schema from outside (a command line, a user
name, a device name, a backend's message, a label) passes through
:func:`clean_text` when a schema object is built, so that every consumer
downstream (JSON, CSV, the Prometheus exposition, the SQLite ledger, the
terminal) can rely on three properties:

* it is valid Unicode that encodes to UTF-8: lone surrogates (what Python
  makes of undecodable bytes with ``surrogateescape``, as psutil does for a
  non-UTF-8 command line) become U+FFFD;
* it holds no control characters (C0, DEL, C1, which includes ESC and the
  terminal's CSI/OSC introducers): each becomes a space, except tab which
  also becomes a space, so that nothing can move a cursor, set a title or
  draw a hyperlink on an operator's screen;
* it holds no bidirectional or invisible format characters (U+202A to
  U+202E, U+2066 to U+2069, the marks U+200E, U+200F and U+061C, the zero-width
  space U+200B, U+2060 to U+206F, U+FEFF, line and paragraph separators): each
  becomes a visible U+FFFD, so that text can never be shown reordered
  (``python <U+202E>evil<U+202C>.py``). The zero-width joiner and non-joiner
  (U+200D, U+200C) are kept: they reorder nothing, take no cell, and emoji
  sequences (a woman technologist is woman, ZWJ, laptop) and scripts such as
  Persian and the Indic ones need them;
* it is at most ``max_length`` characters long (an ellipsis marks a cut).

Markup (``[bold]``) is *not* removed here: it is data. The dashboard shows
text through ``rich.text.Text`` objects, never through markup parsing.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

#: Longest text kept for a command line; other fields are shorter.
MAX_COMMAND = 4096
#: Longest text kept for names, users, ids, labels and detail strings.
MAX_NAME = 256
#: Longest backend status message.
MAX_MESSAGE = 1024

_BAD = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff"
                  # bidirectional and invisible format characters, line and paragraph separators
                  # (not the zero-width non-joiner and joiner, U+200C and U+200D: text needs them)
                  "\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]")


def _replace(match: re.Match[str]) -> str:
    ch = match.group(0)
    # Controls become spaces; surrogates and format characters a visible U+FFFD, so that
    # "python \u202eevil\u202c.py" can never render as "python yp.live".
    return " " if ch <= "\x9f" else "\ufffd"


def clean_text(value: str, max_length: int = MAX_NAME) -> str:
    """``value`` with surrogates replaced, control characters turned into spaces, capped.

    The common case (printable and short) returns ``value`` itself without
    copying; ``str.isprintable`` is a single C-level scan.
    """
    if not isinstance(value, str):
        value = str(value)
    if not value.isprintable():
        value = _BAD.sub(_replace, value)
    if len(value) > max_length:
        value = value[: max_length - 1] + "\u2026"
    return value


def escaped(value: str) -> str:
    """``value`` with each control, format or bidirectional character written as its escape
    (``\\x1b``): text a user gave (a path, an environment variable) shown as it is, without
    reaching the terminal as a control sequence."""
    if value.isprintable():
        return value
    return _BAD.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), value)


def clean_required(value: Any, max_length: int = MAX_NAME) -> str:
    """:func:`clean_text` for a field that must hold text: ``None`` is the empty text (an id or
    a vendor a plug-in left out is missing, never the word ``"None"``)."""
    return "" if value is None else clean_text(value, max_length)


def clean_optional(value: str | None, max_length: int = MAX_NAME) -> str | None:
    """:func:`clean_text` that passes ``None`` through."""
    return None if value is None else clean_text(value, max_length)


def clean_detail(value: Any, max_length: int = MAX_NAME) -> Any:
    """A ``details`` value made safe: strings cleaned, tuples and lists cleaned item by item
    (as tuples), non-finite floats (NaN, infinities) turned into ``None``: unknown, never
    NaN, and strict JSON has no NaN."""
    if isinstance(value, str):
        return clean_text(value, max_length)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (tuple, list)):
        return tuple(clean_detail(v, max_length) for v in value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) or hasattr(value, "__index__"):  # (a numpy integer too)
        return int(value)
    if hasattr(value, "__float__") and not isinstance(value, complex):  # (a numpy float)
        number = float(value)
        return number if math.isfinite(number) else None
    return None  # not a detail value (a dict, an object): unknown, never its repr


_INF = float("inf")

#: Keys and tuple values :func:`clean_mapping` found clean (cleaning returns them unchanged):
#: every device of every cycle has the same few detail keys, and the NVIDIA backend's
#: clock-event reason names come as the same few tuples. A tuple is known by its value (an
#: equal tuple cleans to an equal one: cleaning changes a string, a non-finite float or a
#: list, each unequal to what it becomes). Each set is emptied when it reaches its bound.
CLEAN_KEYS: set[str] = set()
CLEAN_TUPLES: set[tuple[Any, ...]] = set()
CLEAN_BOUND = 1024


def clean_mapping(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """``mapping`` with its keys and values cleaned (strings, inside tuples too; no NaN)."""
    out = {}
    for k, v in mapping.items():
        # what cleaning returns unchanged (a short printable key; an int, a bool, a finite
        # float, a short printable string) is kept as is: every device of every cycle has
        # details, nearly all of them numbers under constant keys
        if k not in CLEAN_KEYS:
            if type(k) is not str or len(k) > MAX_NAME or not k.isprintable():
                k = clean_text(k)
            elif len(CLEAN_KEYS) < CLEAN_BOUND:
                CLEAN_KEYS.add(k)
            else:
                CLEAN_KEYS.clear()
        kind = type(v)
        if not (kind is int or kind is bool or v is None
                or (kind is float and -_INF < v < _INF)
                or (kind is str and len(v) <= MAX_NAME and v.isprintable())):
            if kind is tuple:
                v = _clean_tuple(v)
            else:
                v = clean_detail(v)
        out[k] = v
    return out


def _clean_tuple(value: tuple[Any, ...]) -> tuple[Any, ...]:
    try:
        if value in CLEAN_TUPLES:
            return value
    except TypeError:  # an unhashable member (a list): cleaned below, never remembered
        return clean_detail(value)
    cleaned = clean_detail(value)
    if cleaned == value:
        if len(CLEAN_TUPLES) >= CLEAN_BOUND:
            CLEAN_TUPLES.clear()
        CLEAN_TUPLES.add(value)
    return cleaned


#: The most of one value an error message shows (a value the user gave, echoed back).
MAX_SHOWN = 1024
_KEEP = 120
_LONG_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.){%d,}'|\"(?:[^\"\\\n]|\\.){%d,}\""
                          % (MAX_SHOWN + 1, MAX_SHOWN + 1))
#: (an unquoted run: a value shown whole may have quotes and punctuation around it)
_LONG_RUN = re.compile(r"\S{%d,}" % (MAX_SHOWN + 16))


def _cut(match: re.Match[str]) -> str:
    text = match.group(0)
    quote = text[0] if len(text) > 1 and text[0] in "'\"" and text[-1] == text[0] else ""
    body = text[len(quote):len(text) - len(quote)]
    return f"{quote}{body[:_KEEP]}…{quote} ({len(body)} characters)"


def clipped(message: str) -> str:
    """An error message with each value in it longer than :data:`MAX_SHOWN` characters (a
    quoted value, or any run without spaces) cut to its start and its length: a 100 kB
    setting is refused in one readable line, not echoed whole."""
    if len(message) <= MAX_SHOWN:
        return message
    return _LONG_RUN.sub(_cut, _LONG_QUOTED.sub(_cut, message))


def unresolvable_host(host: str) -> str | None:
    """Why ``host`` (a name or an address from a flag, a variable or a file) can never be asked
    of the resolver: it does not encode as an internationalized domain name (bytes that are no
    UTF-8, an empty or over-long label); ``None`` when it can."""
    try:
        host.encode("idna")
    except UnicodeError as exc:
        return f"not a host name ({exc})"
    return None

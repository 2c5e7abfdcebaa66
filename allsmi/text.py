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
* it is at most ``max_length`` characters long (an ellipsis marks a cut).

Markup (``[bold]``) is *not* removed here: it is data. The dashboard shows
text through ``rich.text.Text`` objects, never through markup parsing.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: Longest text kept for a command line; other fields are shorter.
MAX_COMMAND = 4096
#: Longest text kept for names, users, ids, labels and detail strings.
MAX_NAME = 256
#: Longest backend status message.
MAX_MESSAGE = 1024

_BAD = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _replace(match: re.Match[str]) -> str:
    ch = match.group(0)
    return "\ufffd" if "\ud800" <= ch <= "\udfff" else " "


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
    return value

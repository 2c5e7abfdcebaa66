"""Reading the JSON document a vendor tool prints on stdout.

Tools print more than JSON: a deprecation banner, a progress bar, ANSI colour, a
log line after it. And a tool that dies mid-write leaves a document that stops
short. :func:`read_json` tells those apart: the whole output as JSON; else,
when the caller says what its document looks like, the first such document
inside the text (with a note of what was ignored); else an error that says
whether the output stops before its JSON is complete (truncated) or is no JSON
at all, quoting its start. It never guesses from a document cut short.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from .cells import shorten

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Where a document may start inside other text: an object or a list.
_OPENING = re.compile(r"[{\[]")
#: How many candidate starts (``{`` or ``[``) inside the text are tried before giving up; each
#: try reads at most the rest of the (capped) output, so the work stays bounded.
MAX_CANDIDATES = 50


class JsonOutputError(ValueError):
    """The tool's stdout holds no usable JSON; the message says why and starts with the tool."""


def _truncated(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether decoding stopped because the text ended, not because of a wrong character."""
    return exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated")


def read_json(text: str, tool: str, find: Callable[[Any], bool] | None = None) -> tuple[Any, list[str]]:
    """The JSON document in ``text`` (stdout of ``tool``, named in every message) and notes.

    ``find`` says what the wanted document looks like (for example, an object with a
    ``devices`` list); with it, a document surrounded by other text is found and the
    notes say how much was ignored. Raises :class:`JsonOutputError` for empty output,
    output that stops before its JSON is complete ("truncated"), and output that is not
    JSON. Whether the document holds what the caller needs is the caller's to check.
    """
    clean = _ANSI.sub("", text).strip()
    if not clean:
        raise JsonOutputError(f"{tool} printed nothing on stdout")
    try:
        return json.loads(clean), []
    except json.JSONDecodeError as exc:
        first = exc
    if find is not None:
        decoder = json.JSONDecoder()
        tried = 0
        match = _OPENING.search(clean)
        while match is not None and tried < MAX_CANDIDATES:
            tried += 1
            start = after = match.start()
            try:
                value, end = decoder.raw_decode(clean, start)
            except json.JSONDecodeError as exc:
                if tried == 1 or exc.pos > first.pos:
                    first = exc  # the candidate read furthest tells why (a document cut short)
                after = start + 1
            else:
                if find(value):
                    ignored = start + len(clean[end:].strip())
                    return value, [f"ignored {ignored} characters of non-JSON text around "
                                   f"{tool}'s JSON"]
                after = end  # not the wanted one: nor is anything nested inside it
            match = _OPENING.search(clean, after)
    where = f"{first.msg} at line {first.lineno} column {first.colno}"
    # A document was begun: at the start, or (where one is looked for inside) anywhere.
    begun = clean[0] in "{[" or (find is not None and _OPENING.search(clean) is not None)
    if begun and _truncated(clean, first):
        raise JsonOutputError(f"{tool} printed truncated JSON: it ends before the document is "
                              f"complete, so it is not JSON that can be read ({where})")
    raise JsonOutputError(f"{tool} did not print JSON (not JSON: {where}): {shorten(clean, 120)!r}")

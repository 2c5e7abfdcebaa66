"""A small, strict reader for the YAML subset that web configuration files use.

The exporter-toolkit web configuration is YAML. PyYAML is used when it is
installed; without it this reader accepts what those files contain in
practice and refuses anything else with an error naming the line:

* block mappings nested by indentation (spaces only), ``key: value``;
* block sequences of scalars (``- item``) and flow sequences (``[a, b]``);
* plain, ``'single'`` and ``"double"`` quoted scalars; ``true``/``false``,
  ``null``/``~``, integers and floats; ``#`` comments; a leading ``---``.

Anchors, aliases, tags, multi-line scalars and flow mappings are refused
rather than guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class YamlSubsetError(ValueError):
    """The text is not in the supported subset; ``line`` is 1-based."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


@dataclass
class _Line:
    number: int
    indent: int
    text: str


_KEY = re.compile(r"""^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"\[\]{}:][^:#]*?)\s*:(?:\s+|$)(.*)$""")
_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_FLOAT = re.compile(r"^[-+]?([0-9][0-9_]*)?\.[0-9]+([eE][-+]?[0-9]+)?$|^[-+]?[0-9]+[eE][-+]?[0-9]+$")
_DOUBLE_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "/": "/", "0": "\0", "r": "\r"}


def _strip_comment(text: str, number: int) -> str:
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                if quote == "'" and text[i + 1:i + 2] == "'":
                    i += 2
                    continue
                quote = None
        elif ch in "'\"" and (i == 0 or text[i - 1] in " \t:[,-"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
        i += 1
    if quote:
        raise YamlSubsetError("unterminated quoted string", number)
    return text.rstrip()


def _lines(text: str) -> list[_Line]:
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if "\t" in raw[:len(raw) - len(raw.lstrip(" \t"))]:
            raise YamlSubsetError("tabs are not allowed for indentation", number)
        stripped = _strip_comment(raw, number)
        if not stripped.strip():
            continue
        if stripped.strip() in ("---", "..."):
            if out and stripped.strip() == "---":
                raise YamlSubsetError("only one document is allowed", number)
            continue
        indent = len(stripped) - len(stripped.lstrip(" "))
        out.append(_Line(number, indent, stripped.strip()))
    return out


def scalar(text: str, line: int | None = None) -> Any:
    """One scalar: quoted string, boolean, null, number or plain string."""
    if not text:
        return None
    if text[0] == '"':
        if len(text) < 2 or text[-1] != '"':
            raise YamlSubsetError(f"bad double-quoted string {text!r}", line)
        body, out, i = text[1:-1], [], 0
        while i < len(body):
            if body[i] == "\\":
                esc = body[i + 1:i + 2]
                if esc not in _DOUBLE_ESCAPES:
                    raise YamlSubsetError(f"unsupported escape \\{esc} in {text!r}", line)
                out.append(_DOUBLE_ESCAPES[esc])
                i += 2
            else:
                out.append(body[i])
                i += 1
        return "".join(out)
    if text[0] == "'":
        if len(text) < 2 or text[-1] != "'":
            raise YamlSubsetError(f"bad single-quoted string {text!r}", line)
        return text[1:-1].replace("''", "'")
    if text[0] in "&*!|>{%@`":
        raise YamlSubsetError(f"unsupported YAML syntax {text[:20]!r} (install PyYAML for full YAML)",
                              line)
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "~"):
        return None
    if _INT.match(text):
        return int(text.replace("_", ""))
    if _FLOAT.match(text):
        return float(text.replace("_", ""))
    return text


def _flow_sequence(text: str, line: int) -> list[Any]:
    inner = text[1:-1].strip()
    if not inner:
        return []
    items, buf, quote = [], "", None
    for ch in inner:
        if quote:
            buf += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            buf += ch
        elif ch in "[]{}":
            raise YamlSubsetError("nested flow collections are not supported", line)
        elif ch == ",":
            items.append(scalar(buf.strip(), line))
            buf = ""
        else:
            buf += ch
    if buf.strip():
        items.append(scalar(buf.strip(), line))
    return items


def _value(text: str, line: int) -> Any:
    if text.startswith("["):
        if not text.endswith("]"):
            raise YamlSubsetError("flow sequence must close on the same line", line)
        return _flow_sequence(text, line)
    return scalar(text, line)


class _Parser:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.pos = 0

    def block(self, indent: int) -> Any:
        first = self.lines[self.pos]
        if first.text.startswith("- ") or first.text == "-":
            return self.sequence(indent)
        return self.mapping(indent)

    def sequence(self, indent: int) -> list[Any]:
        items = []
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if line.indent < indent:
                break
            if line.indent > indent or not (line.text.startswith("- ") or line.text == "-"):
                raise YamlSubsetError("bad indentation or mixed sequence and mapping", line.number)
            body = line.text[1:].strip()
            if not body or _KEY.match(body) and not body.startswith(("'", '"')):
                raise YamlSubsetError("sequences of mappings are not supported "
                                      "(install PyYAML for full YAML)", line.number)
            items.append(_value(body, line.number))
            self.pos += 1
        return items

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if line.indent < indent:
                break
            if line.indent > indent:
                raise YamlSubsetError("unexpected indentation", line.number)
            match = _KEY.match(line.text)
            if not match:
                raise YamlSubsetError(f"expected 'key: value', got {line.text[:40]!r}", line.number)
            key = scalar(match.group(1).strip(), line.number)
            if not isinstance(key, str):
                key = str(key)
            if key in out:
                raise YamlSubsetError(f"duplicate key {key!r}", line.number)
            rest = match.group(2).strip()
            self.pos += 1
            if rest:
                out[key] = _value(rest, line.number)
                continue
            if self.pos < len(self.lines) and self.lines[self.pos].indent > indent:
                out[key] = self.block(self.lines[self.pos].indent)
            elif (self.pos < len(self.lines) and self.lines[self.pos].indent == indent
                  and self.lines[self.pos].text.startswith("- ")):
                out[key] = self.sequence(indent)  # YAML allows "key:\n- item" at the same indent
            else:
                out[key] = None
        return out


def loads(text: str) -> Any:
    """Parse ``text``; an empty document is ``None``."""
    lines = _lines(text)
    if not lines:
        return None
    parser = _Parser(lines)
    result = parser.block(lines[0].indent)
    if parser.pos != len(lines):
        raise YamlSubsetError("unexpected content", lines[parser.pos].number)
    return result

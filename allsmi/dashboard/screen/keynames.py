"""Key names and characters without the Unicode name database.

Textual turns a key name into its character (``key_to_character``) and into its footer label
(``format_key``) by asking ``unicodedata.lookup`` for the name. The first lookups page in most
of the module's name tables: about 0.8 MiB of resident memory for a footer of plain letters,
measured by ``benchmarks/dashboard.py``. The dashboard answers for the keys it meets from the
tables here and leaves every other key to Textual; ``tests/dashboard/test_keynames.py`` checks
that the tables give Textual's own answers, so an upgrade that changes them fails a test instead
of a key.
"""

from __future__ import annotations

from typing import Callable

#: How named keys are shown (footer, help).
KEY_NAMES = {"question_mark": "?", "slash": "/", "escape": "Esc", "space": "Space", "enter": "Enter",
             "tab": "Tab", "shift+tab": "Shift+Tab", "f1": "F1", "ctrl+c": "Ctrl+C"}

#: Textual's ``key_to_character`` for the named keys of the dashboard's, Textual's screen's and
#: its DataTable's and Input's bindings (``None``: the key types no character).
KEY_CHARACTERS: dict[str, str | None] = {
    "question_mark": "?", "slash": None, "escape": "\x1b", "space": " ", "tab": "\t",
    "backspace": "\x08", "delete": "\x7f", "enter": None, "f1": None, "home": None, "end": None,
    "left": None, "right": None, "up": None, "down": None, "pageup": None, "pagedown": None,
    "insert": None}


def key_display(key: str) -> str | None:
    """How ``key`` (one binding key: ``"slash"``, ``"ctrl+c"``, ``"L"``) is shown; ``None`` for a
    key these tables do not know (Textual's own rule then applies)."""
    if key in KEY_NAMES:
        return KEY_NAMES[key]
    if len(key) == 1 and key.isprintable():
        return key
    modifier, plus, rest = key.rpartition("+")
    if plus and modifier == "ctrl" and len(rest) == 1:
        return f"^{rest}"
    return None


def character_lookup(fallback: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """``key_to_character`` answering from :data:`KEY_CHARACTERS` and single characters, and
    asking ``fallback`` (Textual's) for anything else."""

    def key_to_character(key: str) -> str | None:
        if "+" in key:
            return fallback(key)
        if len(key) == 1:
            return key
        if key in KEY_CHARACTERS:
            return KEY_CHARACTERS[key]
        return fallback(key)

    key_to_character.fallback = fallback  # type: ignore[attr-defined]
    return key_to_character


def install() -> None:
    """Route the key-to-character lookups of Textual's screens (which decide, for each focus
    change, which bindings a focused input would swallow) through :func:`character_lookup`.
    Idempotent; a Textual without that function is left as it is."""
    from textual import screen
    current = getattr(screen, "key_to_character", None)
    if current is None or hasattr(current, "fallback"):
        return
    screen.key_to_character = character_lookup(current)  # type: ignore[attr-defined]

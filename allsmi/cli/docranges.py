"""The documented ranges of settings, generated into the docs from their one declaration.

A range in the docs is written between markers, ``<!-- range NAME -->0.1 to 3600<!-- /range -->``,
and ``python -m allsmi.cli.docranges`` rewrites every marked range of README.md and docs/ from
:data:`RANGES`; ``tests/test_docs.py`` fails when a page differs from what it would write, or
when a flag or a config key accepts another range than the one declared here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from allsmi.accounting.settings import EXPORT_TIMEOUT_RANGE
from allsmi.config import INTERVAL_RANGE, TIMEOUT_RANGE

#: name -> (lowest, highest), inclusive: the same tuples the flags and the config checks use.
RANGES: dict[str, tuple[float, float]] = {
    "collector.interval_seconds": INTERVAL_RANGE,
    "collector.backend_timeout_seconds": TIMEOUT_RANGE,
    "export.timeout_seconds": EXPORT_TIMEOUT_RANGE,
}

MARKED = re.compile(r"(<!-- range (?P<name>[\w.]+) -->)(?P<text>.*?)(<!-- /range -->)", re.S)


def range_text(limits: tuple[float, float]) -> str:
    """``0.1 to 3600``: how the docs write an inclusive range."""
    return f"{limits[0]:g} to {limits[1]:g}"


def rewrite(text: str) -> str:
    """``text`` with every marked range set from :data:`RANGES` (an unknown name raises KeyError)."""
    return MARKED.sub(lambda m: m.group(1) + range_text(RANGES[m.group("name")]) + m.group(4), text)


def doc_pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def main() -> int:
    root = Path(__file__).resolve().parents[2]
    if not (root / "docs").is_dir():
        print(f"allsmi: {root} is not a source checkout (no docs/): run this from a clone's "
              "editable install", file=sys.stderr)
        return 2
    for page in doc_pages(root):
        text = page.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            print(f"rewrote {page.relative_to(root)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The README is a user's guide: short, its links lead somewhere, no development history.

The benchmark narrative lives in docs/benchmarks/ (one page per topic, newest figures first);
user-facing pages do not refer to the project's issue numbers.
"""

from __future__ import annotations

import re
from pathlib import Path

from .docs_examples import REPO, pages

README = REPO / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_anchor(m) for m in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def test_readme_is_under_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250, len(lines)


def test_readme_keeps_its_two_commands_and_vendor_markers() -> None:
    text = README.read_text(encoding="utf-8")
    assert "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/allsmi --simulate mixed" in text
    assert "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/python -m pytest" in text
    assert "<!-- vendors: sentence -->" in text and "<!-- /vendors -->" in text


def test_readme_says_how_long_the_suite_takes() -> None:
    text = README.read_text(encoding="utf-8")
    assert re.search(r"test suite takes about \d+ minutes on \d+ cores", text), \
        "the README says how long the test suite takes"


def test_readme_headline_figures_are_one_table_with_a_link() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Performance\n", 1)[1].split("\n## ", 1)[0]
    tables = re.findall(r"(?:^\|.*\n)+", section, flags=re.M)
    assert len(tables) == 1, "one table of headline figures"
    assert "docs/benchmarks/README.md" in section
    assert "###" not in section, "no benchmark narrative in the README"


def test_user_facing_docs_name_no_issue_numbers() -> None:
    found = []
    for page in pages():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            # "issue 36", "(issue 37)", "[issue 31: ...]": the word before, if any, says whose
            for match in re.finditer(r"(?<![\w-])issues?\s+#?\d+", line, flags=re.I):
                words = line[:match.start()].rstrip(" \t([{\"'").split()
                before = words[-1].strip("([{\"'") if words else ""
                if re.fullmatch(r"[A-Z]{2,}\w*|[a-z]+[A-Z]\w*", before):
                    continue  # another project's issue (DCGM issue 152, ROCm ...): a reference
                found.append(f"{page.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_relative_links_and_anchors_resolve() -> None:
    broken = []
    for page in pages():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_benchmark_page_is_in_the_index() -> None:
    index = (REPO / "docs" / "benchmarks" / "README.md").read_text(encoding="utf-8")
    for page in sorted((REPO / "docs" / "benchmarks").glob("*.md")):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"{page.name} is not listed in docs/benchmarks/README.md"

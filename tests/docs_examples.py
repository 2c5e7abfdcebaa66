"""Reading the examples out of README.md, docs/ and deploy/**/README.md (for tests/test_docs.py).

A fenced block is an example; its language says what it is (``sh``, ``toml``, ``yaml``,
``json``, ``promql``, ``ini``, or none for listings). An HTML comment on the line before
the fence steers the docs test:

- ``<!-- docs-test: run -->`` runs a shell block's commands, in order, in one temporary
  directory per page; ``<!-- docs-test: run, exit 3 -->`` expects that exit status;
  ``<!-- docs-test: run in-repo -->`` runs them in the repository root instead (commands
  that name the repository's files, such as ``kubectl kustomize deploy/kubernetes/...``).
- ``<!-- docs-test: file NAME -->`` writes the block to ``NAME`` in that directory first
  (a config snippet that a later command loads with ``--config NAME``); a TOML block so
  marked is also loaded as a configuration.
- ``<!-- docs-test: skip REASON -->`` says why a block is not run here (it needs hardware,
  systemd, a network host, or it is interactive). The reason is required.

A shell block with neither ``run`` nor ``skip`` fails the test: every command shown to a
user is either run by the tests or says why not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHELL = ("sh", "shell", "bash", "console")
_FENCE = re.compile(r"^(?P<indent> {0,3})```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                    re.S | re.M)
_MARK = re.compile(r"<!--\s*docs-test:\s*(?P<what>run|file|skip)\b(?P<rest>[^>]*)-->\s*$")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    lang: str
    body: str
    mark: str | None = None
    """``run``, ``file``, ``skip`` or ``None``."""
    argument: str = ""
    """``run``: the expected exit status (default 0); ``file``: the name; ``skip``: the reason."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def in_repo(self) -> bool:
        """Run in the repository root (``run in-repo``) rather than a temporary directory."""
        return self.mark == "run" and "in-repo" in self.argument.split()

    @property
    def expected_exit(self) -> int:
        match = re.search(r"exit\s+(\d+)", self.argument)
        return int(match.group(1)) if match else 0

    def commands(self) -> list[str]:
        """The command lines of a shell block: comments dropped, ``\\`` continuations joined."""
        out: list[str] = []
        pending = ""
        for raw in self.body.splitlines():
            line = raw.rstrip()
            if pending:
                line = pending + " " + line.lstrip()
                pending = ""
            if line.endswith("\\"):
                pending = line[:-1].rstrip()
                continue
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line.startswith("$ "):
                line = line[2:]
            if line:
                out.append(line)
        return out


def pages() -> list[Path]:
    found = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found += sorted((REPO / "deploy").rglob("README.md"))  # deploy/ and deploy/kubernetes/
    return found


def examples(page: Path) -> list[Example]:
    text = page.read_text(encoding="utf-8")
    out: list[Example] = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        lang = match.group("lang").lower()
        body = match.group("body")
        if not lang and body.lstrip().startswith("allsmi "):
            lang = "sh"  # an unlabelled listing of commands is still a command example
        out.append(Example(page, line, lang, body, mark.group("what") if mark else None,
                           mark.group("rest").strip() if mark else ""))
    return out


def all_examples() -> list[Example]:
    return [example for page in pages() for example in examples(page)]


def prose(page: Path) -> str:
    """The page without its fenced blocks."""
    return _FENCE.sub("", page.read_text(encoding="utf-8"))

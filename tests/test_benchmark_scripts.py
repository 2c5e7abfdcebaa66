"""The scripts in benchmarks/ keep up with the code under them and with the docs that quote them.

The suite never runs a benchmark (each takes seconds to minutes, and measures rather than
checks), so these are the cheap guards against rot: every script answers ``--help`` (it
imports, its options parse) without writing anything, and every command line that README.md,
a page of docs/ or a script's own docstring gives for a script uses only options that script
takes. All the scripts start at once, so the whole module takes about as long as the slowest.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
#: The benchmarks; ``_name.py`` files are their private helpers (run by them, not by a user).
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
#: A script named in a page or a docstring, and the rest of its command line: up to the end of
#: the code span (a backtick) or of the paragraph.
COMMAND = re.compile(r"benchmarks/(?P<name>[A-Za-z0-9_]+)\.py(?P<rest>.*?)(?=`|\n[ \t]*\n|\Z)", re.S)
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _helps(cwd: Path) -> dict[str, tuple[int, str, str]]:
    """``{script: (exit status, stdout, stderr)}`` of ``--help``, all run at once in ``cwd``."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "100"}
    procs = {name: subprocess.Popen([sys.executable, str(BENCHMARKS / f"{name}.py"), "--help"],
                                    cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in SCRIPTS}
    answers = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            answers[name] = (proc.returncode, out, err)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return answers


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 10, SCRIPTS


def _quoted_commands() -> list[tuple[str, str, list[str]]]:
    """``(where, script, flags)`` for each command line of a benchmark in README.md, docs/ and
    the scripts' docstrings."""
    texts = [(str(p.relative_to(REPO)), p.read_text(encoding="utf-8"))
             for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]]
    for name in SCRIPTS:
        path = BENCHMARKS / f"{name}.py"
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        texts.append((f"benchmarks/{name}.py (docstring)", doc))
    found = []
    for where, text in texts:
        for match in COMMAND.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{where}:{line}", match["name"], FLAG.findall(match["rest"])))
    return found


def test_benchmarks_the_docs_name_exist() -> None:
    names = set(SCRIPTS) | {p.stem for p in BENCHMARKS.glob("_*.py")}
    missing = sorted(f"{where}: benchmarks/{name}.py" for where, name, _ in _quoted_commands()
                     if name not in names)
    assert not missing, "benchmarks the docs name that do not exist:\n" + "\n".join(missing)


def test_every_benchmark_answers_help_and_takes_the_options_its_docs_give(tmp_path: Path) -> None:
    """One test, so that the scripts start once (under xdist, a module's fixture would start
    them again on every worker that runs one of its tests)."""
    helps = _helps(tmp_path)
    problems = []
    for name, (status, out, err) in helps.items():
        if status != 0 or "Traceback" in err:
            problems.append(f"benchmarks/{name}.py --help exited {status}:\n{err[-2000:]}")
        elif not out.startswith("usage:"):
            problems.append(f"benchmarks/{name}.py --help printed no usage: {out[:300]!r}")
    # (a script reading its arguments by hand once wrote its output to a file named --help)
    problems += [f"--help left {left!r} in the working directory" for left in os.listdir(tmp_path)]
    for where, name, flags in _quoted_commands():
        if name in helps:  # (a private helper, or a missing script: the test above)
            problems += [f"{where}: benchmarks/{name}.py does not take {flag}" for flag in flags
                         if not re.search(re.escape(flag) + r"(?![\w-])", helps[name][1])]
    assert not problems, "\n".join(problems)

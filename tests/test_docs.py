"""The docs are part of the product: their examples run, their names exist.

Every fenced example of README.md, docs/ and deploy/**/README.md is checked as a new user
would use it (see tests/docs_examples.py for the markers): shell examples marked ``run``
are run, config and scenario snippets are loaded, YAML and JSON parse, and every metric
name, environment variable and command-line flag the docs name exists in the product.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from functools import lru_cache
from pathlib import Path

import pytest

from allsmi.cli.main import COMMANDS

from .conftest import allsmi_exe
from .docs_examples import REPO, SHELL, Example, all_examples, examples, pages, prose

EXAMPLES = all_examples()
_SHELL_OPERATORS = re.compile(r"(\|\||&&|[|;<>`]|\$\()")


def _ids(items: list[Example]) -> list[str]:
    return [e.where for e in items]


def test_examples_are_found() -> None:
    assert len(EXAMPLES) > 20  # the extractor itself works
    assert any(e.mark == "run" for e in EXAMPLES)


def test_every_shell_example_is_run_or_says_why_not() -> None:
    unmarked = [e.where for e in EXAMPLES if e.lang in SHELL and e.mark not in ("run", "skip")]
    assert not unmarked, ("shell examples neither run by the tests nor marked with a reason "
                          f"(<!-- docs-test: run --> or <!-- docs-test: skip REASON -->): {unmarked}")
    no_reason = [e.where for e in EXAMPLES if e.mark == "skip" and len(e.argument) < 8]
    assert not no_reason, f"skipped examples must say why: {no_reason}"


def _argv(command: str, where: str) -> list[str]:
    if _SHELL_OPERATORS.search(command.replace("'|'", "")):
        pytest.fail(f"{where}: {command!r} needs a shell (pipes, redirections, &&): "
                    "split it into plain commands or mark the block skip with a reason")
    argv = shlex.split(command)
    if argv[0] == "allsmi":
        return allsmi_exe() + argv[1:]
    if argv[0] in ("python", "python3"):
        return [sys.executable] + argv[1:]
    found = shutil.which(argv[0])
    if not found:
        pytest.fail(f"{where}: {argv[0]!r} is not installed here")
    return [found] + argv[1:]


RUN_PAGES = sorted({e.page for e in EXAMPLES if e.mark == "run"})


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(REPO)) for p in RUN_PAGES])
def test_runnable_examples_run(page: Path, tmp_path: Path) -> None:
    """A page's runnable commands, in order, in one directory, with the files it shows."""
    for example in examples(page):
        if example.mark == "file":
            name = example.argument.split()[0]
            (tmp_path / name).write_text(example.body, encoding="utf-8")
        if example.mark != "run":
            continue
        for command in example.commands():
            result = subprocess.run(_argv(command, example.where), cwd=REPO if example.in_repo else tmp_path,
                                    capture_output=True,
                                    text=True, timeout=300, stdin=subprocess.DEVNULL)
            assert result.returncode == example.expected_exit, (
                f"{example.where}: `{command}` exited {result.returncode}, expected "
                f"{example.expected_exit}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}")


TOML = [e for e in EXAMPLES if e.lang == "toml"]


@pytest.mark.parametrize("example", TOML, ids=_ids(TOML))
def test_toml_examples_load(example: Example, tmp_path: Path) -> None:
    data = tomllib.loads(example.body)  # at least valid TOML
    if "project" in data or "tool" in data:
        return  # a pyproject.toml excerpt: valid TOML is all it claims
    path = tmp_path / (example.argument.split()[0] if example.mark == "file" else "example.toml")
    path.write_text(example.body, encoding="utf-8")
    if "devices" in data or "include" in data or "seed" in data:
        from allsmi.backends.simulated import load_scenario
        load_scenario(path)
        return
    from allsmi.config import load_config
    config = load_config(path, environ={})
    if "ledger" in data:
        from allsmi.accounting.settings import ledger_settings
        ledger_settings(config)


YAML = [e for e in EXAMPLES if e.lang in ("yaml", "yml")]


@pytest.mark.parametrize("example", YAML, ids=_ids(YAML))
def test_yaml_examples_parse(example: Example) -> None:
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(example.body) is not None


JSON = [e for e in EXAMPLES if e.lang == "json"]


@lru_cache(maxsize=1)
def _real_snapshot() -> dict:
    result = subprocess.run(allsmi_exe() + ["snapshot", "--simulate", "mixed", "--format", "json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _keys(value: object, prefix: str = "") -> set[str]:
    """Dotted key paths of a JSON value (list items share their list's path)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            out.add(prefix + key)
            if key in ("labels", "details"):
                continue  # free-form maps
            out |= _keys(inner, prefix + key + ".")
    elif isinstance(value, list):
        for inner in value:
            out |= _keys(inner, prefix)
    return out


@pytest.mark.parametrize("example", JSON, ids=_ids(JSON))
def test_json_examples_parse_and_use_real_field_names(example: Example) -> None:
    data = json.loads(example.body)
    if isinstance(data, dict) and "schema_version" in data and "devices" in data:
        real = _keys(_real_snapshot())
        shown = _keys(data)
        assert shown <= real, f"{example.where}: fields the snapshot does not have: {sorted(shown - real)}"


def _declared_metrics() -> set[str]:
    from allsmi.accounting.status import status_text
    from allsmi.exporter.families import FAMILIES
    names = {f.name for f in FAMILIES}
    for text in (status_text(0.0, True, 1.0, 0.0), status_text(0.0, False, 1.0, 0.0, "source", "x")):
        names |= set(re.findall(r"^(allsmi_[a-z0-9_]+)[ {]", text, re.M))
    return names


# Module and file names that look like metric names: followed by '.', ':', '/' or '<'.
_NOT_METRICS = re.compile(r"allsmi_[a-z0-9_]+(?=[.:/<])|allsmi_myvendor\w*")


def test_metric_names_in_docs_are_declared() -> None:
    declared = _declared_metrics()
    unknown: dict[str, list[str]] = {}
    for page in pages():
        text = _NOT_METRICS.sub("", page.read_text(encoding="utf-8"))
        for name in set(re.findall(r"(?<![\w:])allsmi_[a-z0-9_]+\b", text)):
            base = re.sub(r"_(bucket|count|sum|created)$", "", name)
            if name not in declared and base not in declared:
                unknown.setdefault(name, []).append(str(page.relative_to(REPO)))
    assert not unknown, f"metric names in the docs that the exporter does not declare: {unknown}"


def test_environment_variables_in_docs_exist() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for d in ("allsmi", "backends")
                       for p in (REPO / d).rglob("*.py"))
    missing: dict[str, list[str]] = {}
    for page in pages():
        for name in set(re.findall(r"\bALLSMI_[A-Z0-9_]+\b", page.read_text(encoding="utf-8"))):
            if name not in source and not _derived_env(name, source):
                missing.setdefault(name, []).append(str(page.relative_to(REPO)))
    assert not missing, f"environment variables the docs name but no code reads: {missing}"


def _derived_env(name: str, source: str) -> bool:
    """``ALLSMI_SERVE_<KEY>`` variables are derived from the serve settings' names."""
    match = re.fullmatch(r"ALLSMI_SERVE_([A-Z_]+)", name)
    return bool(match) and '"ALLSMI_SERVE_' in source or "ALLSMI_SERVE_" in source


@lru_cache(maxsize=None)
def _help(command: str | None) -> str:
    args = ([command] if command else []) + ["--help"]
    result = subprocess.run(allsmi_exe() + args, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _command_lines() -> list[tuple[str, str]]:
    """``(where, command)`` for every ``allsmi ...`` command the docs show."""
    out: list[tuple[str, str]] = []
    for example in EXAMPLES:
        if example.lang in SHELL or not example.lang:
            for command in example.commands():
                for part in re.split(r"&&|\|\||;|\|", command):
                    words = part.strip().split()
                    while words and ("/" in words[0] and words[0].endswith("allsmi") is False):
                        words = words[1:]
                    if words and Path(words[0]).name == "allsmi":
                        out.append((example.where, " ".join(words)))
    for page in pages():
        for span in re.findall(r"`(allsmi [^`]+)`", prose(page)):
            out.append((str(page.relative_to(REPO)), span))
    return out


def test_flags_in_docs_exist() -> None:
    wrong: list[str] = []
    for where, command in _command_lines():
        words = command.split()[1:]
        sub = next((w for w in words if not w.startswith("-")), None)
        sub = sub if sub in COMMANDS else None
        text = _help(sub)
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", command):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
                wrong.append(f"{where}: `{command}`: {flag} is not an option of "
                             f"`allsmi {sub or ''}`".replace(" `", " `", 1))
    assert not wrong, "\n".join(wrong)

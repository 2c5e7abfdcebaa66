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
        # A whole snapshot shown as the format's example lists every field the schema has.
        assert shown == real, f"{example.where}: fields the example leaves out: {sorted(real - shown)}"


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


# -- options documented for a command exist on it ----------------------------------------

#: Flags of other programs that the docs name in passing (the program in the comment).
OTHER_PROGRAMS_FLAGS = {
    "--once", "--help",                   # nvitop, any program
    "--query-gpu", "--query-compute-apps", # nvidia-smi
    "--snapshot-update",                  # pytest-textual-snapshot
    "--hpc-job-mapping-dir",              # dcgm-exporter
    "--target", "--name", "--no-compile", # pip install --target --no-compile, python -X importtime names
    "--check", "--now",                   # systemd-analyze verify/calendar, faketime
    "--durations",                        # pytest
    "--pcie",                             # amd-smi metric --pcie
}


def _options_of(command: str) -> set[str]:
    """Every flag of ``allsmi COMMAND`` (``""``: plain ``allsmi``), including ``--no-`` forms."""
    import importlib

    from allsmi.cli.group import cli
    if command:
        module, attr = COMMANDS[command].split(":")
        cmd = getattr(importlib.import_module(module), attr)
    else:
        cmd = cli
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def _prose_flags() -> list[tuple[str, str, str]]:
    """``(page, section heading, flag)`` for each flag written on its own in prose (a backticked
    span that is not an ``allsmi ...`` command line)."""
    out = []
    for page in pages():
        section = ""
        for line in prose(page).splitlines():
            if line.startswith("#"):
                section = line.strip("# ")
            for span in re.findall(r"`([^`\n]+)`", line):
                if span.startswith("allsmi"):
                    continue
                for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?![\w.-])", span):
                    out.append((str(page.relative_to(REPO)), section, flag))
    return out


def _benchmark_flags() -> set[str]:
    """The options the scripts in benchmarks/ declare (the docs quote their command lines)."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "benchmarks").rglob("*.py"))
    return set(re.findall(r"""["'](--[a-z][a-z0-9-]*)["']""", source))


def _vendor_flags() -> set[str]:
    """The vendor tools' options the installed backends declare (``tool_flags`` and the flags of
    ``version_command``): a vendor's docs page may name them, and no list here names a vendor."""
    from allsmi.collection import registry
    flags: set[str] = set()
    for declaration in registry.declarations():
        flags.update(declaration.tool_flags)
        flags.update(arg for arg in declaration.version_command if arg.startswith("--"))
    return flags


def test_flags_named_in_prose_exist() -> None:
    every = set().union(*(_options_of(c) for c in ("", *COMMANDS))) | _benchmark_flags() | _vendor_flags()
    unknown = sorted({f"{page} ({section}): {flag}" for page, section, flag in _prose_flags()
                      if flag not in every and flag not in OTHER_PROGRAMS_FLAGS})
    assert not unknown, "flags the docs name that no allsmi command takes:\n" + "\n".join(unknown)


def test_dashboard_options_documented_exist_on_plain_allsmi_and_view() -> None:
    """docs/dashboard.md documents the dashboard, which both ``allsmi`` and ``allsmi view`` open:
    a dashboard flag it names must work on both (only the cluster sources are view's own)."""
    from allsmi.cli.view import SOURCE_OPTIONS
    plain, view = _options_of(""), _options_of("view")
    assert view - plain == set(SOURCE_OPTIONS), "plain allsmi must take every dashboard option of view"
    missing = sorted({f"{section}: {flag}" for page, section, flag in _prose_flags()
                      if page == "docs/dashboard.md" and flag in view and flag not in SOURCE_OPTIONS
                      and flag not in plain})
    assert not missing, f"dashboard options documented but not taken by plain allsmi: {missing}"


# -- ranges in the docs are the declared ones ----------------------------------------------

def test_documented_ranges_are_generated_from_the_declarations() -> None:
    from allsmi.cli.docranges import MARKED, RANGES, doc_pages, rewrite
    stale = [str(p.relative_to(REPO)) for p in doc_pages(REPO)
             if rewrite(p.read_text(encoding="utf-8")) != p.read_text(encoding="utf-8")]
    assert not stale, f"run `python -m allsmi.cli.docranges`: {stale}"
    text = "\n".join(p.read_text(encoding="utf-8") for p in doc_pages(REPO))
    marked = {m.group("name") for m in MARKED.finditer(text)}
    assert marked == set(RANGES), f"declared ranges the docs never state: {set(RANGES) - marked}"
    # A line that states a range for one of these settings without the marker is written by hand.
    unmarked = []
    for page in doc_pages(REPO):
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            bare = MARKED.sub("", line)
            for name in RANGES:
                section, key = name.split(".")
                if (f"`{key}`" in bare and f"[{section}]" in bare
                        and re.search(r"\d\s*(to|-|–)\s*\d", bare)):
                    unmarked.append(f"{page.relative_to(REPO)}:{number}: {name}")
    assert not unmarked, f"ranges stated by hand (mark them; see allsmi/cli/docranges.py): {unmarked}"


def _float_range(command: str, flag: str) -> tuple[float, float]:
    import importlib
    module, attr = COMMANDS[command].split(":")
    cmd = getattr(importlib.import_module(module), attr)
    param = next(p for p in cmd.params if flag in p.opts)
    return (param.type.min, param.type.max)  # type: ignore[attr-defined]


def test_export_timeout_flag_and_config_key_share_one_range(tmp_path: Path) -> None:
    from allsmi.accounting.settings import EXPORT_TIMEOUT_RANGE, export_defaults
    from allsmi.config import ConfigError, load_config
    assert _float_range("export", "--timeout") == EXPORT_TIMEOUT_RANGE
    assert _float_range("idle", "--timeout") == EXPORT_TIMEOUT_RANGE
    low, high = EXPORT_TIMEOUT_RANGE
    for value, ok in ((low, True), (high, True), (low / 2, False), (high * 2, False)):
        path = tmp_path / "c.toml"
        path.write_text(f"[export]\ntimeout_seconds = {value!r}\n")
        if ok:
            assert export_defaults(load_config(path, environ={})).timeout_seconds == value
        else:
            with pytest.raises(ConfigError, match="timeout_seconds"):
                export_defaults(load_config(path, environ={}))
    result = subprocess.run(allsmi_exe() + ["export", "--simulate", "mixed", "--timeout", f"{low / 2!r}"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--timeout" in result.stderr


# -- what the docs say the code is, it is --------------------------------------------------

#: The dashboard's widgets the docs describe by name: what the docs call them -> the class.
DESCRIBED_WIDGETS = {
    "device table": "allsmi.dashboard.tables.device_table:DeviceTable",
    "processes panel": "allsmi.dashboard.views.panels:ProcessTable",
}


def test_widget_classes_the_docs_name_are_the_real_ones() -> None:
    """"The device table is ... `X`" names a class the widget is (or says "not a `X`")."""
    import importlib

    import textual.widgets
    unknown = []
    for page in pages():
        text = re.sub(r"\s+", " ", prose(page))
        for sentence in re.split(r"(?<=[.;:])\s", text):
            for name, target in DESCRIBED_WIDGETS.items():
                if not re.search(rf"\b[Tt]he {name} is\b", sentence):
                    continue
                module, attr = target.split(":")
                mro = {c.__name__ for c in getattr(importlib.import_module(module), attr).__mro__}
                for cls in re.findall(r"`([A-Z]\w+)`", sentence):
                    negated = re.search(rf"\b(not|no longer|instead of|before:) (a |an |the )?(Textual's |Textual )?"
                                        rf"`{cls}`", sentence)
                    widget_class = hasattr(textual.widgets, cls) or cls in mro
                    if widget_class and not negated and cls not in mro:
                        unknown.append(f"{page.relative_to(REPO)}: the {name} is not a {cls} "
                                       f"({attr} is a {', '.join(sorted(mro - {'object'}))})")
    assert not unknown, "\n".join(unknown)


#: Names in docs/ that belong to other programs and libraries, not to allsmi.
OTHER_NAMES = {
    "CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "DirectoryTree", "OptionList", "InsufficientSize",
    "nvmlTemperature_v1", "nvmlDeviceGetPersistenceMode", "nvmlSystemGetCudaDriverVersion",
    "amdsmi_exception", "amdsmi_interface", "amdsmi_status_t",
}
#: ... and whole families of them (the vendor libraries' own names).
OTHER_PREFIXES = ("NVMLError_", "nvml", "amdsmi_", "hlml", "rsmi_")


def test_code_names_in_docs_exist_in_the_code() -> None:
    """A function, class, module or attribute the docs name (``snake_case``, ``CamelCase``,
    ``dotted.names``, ``call()``) is in the source tree: renamed or removed code is not
    described as if it still ran."""
    source = "\n".join(p.read_text(encoding="utf-8", errors="replace")
                       for d in ("allsmi", "backends", "deploy", "tests", "fixtures", "benchmarks")
                       for p in (REPO / d).rglob("*") if p.is_file() and p.suffix != ".pyc")
    missing: dict[str, list[str]] = {}
    for page in pages():
        for span in set(re.findall(r"`([^`\n]+)`", prose(page))):
            match = re.fullmatch(r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(\(\))?", span)
            if not match:
                continue
            last = match.group(1).split(".")[-1]
            code_like = ("_" in last.strip("_") or re.search(r"[a-z][A-Z]", last) or match.group(2)
                         or "." in match.group(1))
            if (code_like and last not in source and span not in OTHER_NAMES
                    and not last.startswith(OTHER_PREFIXES)):
                missing.setdefault(str(page.relative_to(REPO)), []).append(span)
    assert not missing, f"names the docs give that the code does not have: {missing}"


# -- field lists in the docs are the schema's -----------------------------------------------

def _table_names(page: Path, heading: str) -> list[str]:
    """The backticked names in the first column of the table under ``heading``."""
    text = page.read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    names: list[str] = []
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("| ---"):
            names.extend(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def test_billing_csv_columns_documented_are_the_export_columns() -> None:
    from allsmi.accounting.formats import HEAD_COLUMNS, TAIL_COLUMNS
    from allsmi.schema import WAITING_REASONS
    documented = _table_names(REPO / "docs" / "accounting.md", "### CSV columns")
    # One row stands for a column per waiting reason: waiting_<reason>_seconds, _cost.
    documented = [name.replace("<reason>", reason) for name in documented
                  for reason in (WAITING_REASONS if "<reason>" in name else ("",))]
    assert sorted(set(documented)) == sorted({*HEAD_COLUMNS, "label_<name>", *TAIL_COLUMNS})



def test_processes_csv_columns_are_all_documented() -> None:
    """docs/snapshot.md's ``--format processes-csv`` paragraph names every column the format writes."""
    from allsmi.schema.fields import PROCESS_COLUMNS
    text = (REPO / "docs" / "snapshot.md").read_text()
    start = text.index("* `--format processes-csv`")
    paragraph = text[start:text.index("\n* ", start + 1)]
    assert [c for c in PROCESS_COLUMNS if f"`{c}`" not in paragraph] == []


# -- every command is written with the interpreter it needs ---------------------------------

def _command_texts() -> list[tuple[str, str]]:
    """``(page, text)`` of every inline code span and every shell block line."""
    out = []
    for example in EXAMPLES:
        if example.lang in SHELL:
            out.extend((example.where, line) for line in example.commands())
    for page in pages():
        out.extend((str(page.relative_to(REPO)), span) for span in re.findall(r"`([^`\n]+)`", prose(page)))
    return out


def test_pip_and_python_commands_name_the_environment_they_need() -> None:
    """A bare ``pip install`` installs into whichever Python is first on the PATH (often not
    allsmi's), and the system ``python3`` lacks allsmi's dependencies: commands that install into
    allsmi's environment or import a third-party module name that environment's interpreter."""
    wrong = []
    for where, text in _command_texts():
        if re.search(r"(?<![/\w.-])(?<!-m )pip3? install\b", text) or \
                re.search(r"(?<![/\w.-])python3? -m pip\b", text):
            wrong.append(f"{where}: {text}")
        for match in re.finditer(r"(?<![/\w.-])python3? -c\s+'([^']*)'", text):
            imported = {m.split(".")[0] for m in re.findall(r"\bimport\s+([\w.,\s]+?)(?:;|$)", match.group(1))
                        for m in re.split(r"[,\s]+", m) if m}
            foreign = sorted(imported - set(sys.stdlib_module_names))
            if foreign:
                wrong.append(f"{where}: {text} (imports {foreign} with the system python)")
    assert not wrong, "write the environment's interpreter (.venv/bin/pip, /opt/allsmi/bin/python):\n" \
        + "\n".join(wrong)


def test_install_hints_of_the_product_name_its_interpreter() -> None:
    """What allsmi itself tells a user to install goes to the Python that runs it."""
    from allsmi.accounting.parquet import EXTRA_HINT
    from allsmi.attribution.kubernetes import INSTALL_HINT
    for hint in (EXTRA_HINT, INSTALL_HINT):
        assert f"{sys.executable} -m pip install 'allsmi[" in hint, hint

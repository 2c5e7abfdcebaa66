"""What the docs quote of the product is what the product says and does.

tests/test_docs.py runs the examples and checks the names (metrics, flags, variables); these
check the rest a reader copies: the subcommands named, the error messages quoted, the example
output shown, the variables listed for every vendor tool, the defaults stated.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
import subprocess
from functools import lru_cache
from pathlib import Path

from allsmi.cli.main import COMMANDS

from .conftest import allsmi_exe
from .docs_examples import REPO, SHELL, all_examples, pages, prose


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(allsmi_exe() + args, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]


def _subcommands_named() -> list[tuple[str, str]]:
    """``(where, word)`` for each ``allsmi WORD`` the docs show, WORD a would-be subcommand."""
    out = []
    for example in all_examples():
        if example.lang in SHELL or not example.lang:
            for command in example.commands():
                for part in re.split(r"&&|\|\||;|\|", command):
                    words = part.split()
                    while words and "=" in words[0] and not words[0].startswith("-"):
                        words = words[1:]  # VAR=value allsmi ...
                    if len(words) > 1 and Path(words[0]).name == "allsmi":
                        out.append((example.where, words[1]))
    for page in pages():
        for word in re.findall(r"`allsmi ([^\s`]+)", prose(page)):
            out.append((str(page.relative_to(REPO)), word))
    return [(where, word) for where, word in out if re.fullmatch(r"[a-z][a-z0-9-]*", word)]


def test_subcommands_the_docs_name_exist() -> None:
    """``allsmi dashboard`` is not a command: the dashboard is plain ``allsmi`` (or ``view``)."""
    named = _subcommands_named()
    assert len(named) > 100  # the extractor works
    wrong = sorted({f"{where}: allsmi {word}" for where, word in named if word not in COMMANDS})
    assert not wrong, "commands the docs name that allsmi does not have:\n" + "\n".join(wrong)


def _config_for(key: str) -> str:
    """A configuration whose only fault is the unknown ``key`` (``table.key`` or
    ``table[N].key``, as the messages name keys)."""
    listed = re.fullmatch(r"(\w+)\[(\d+)\]\.(\w+)", key)
    if listed:
        table, count, bad = listed.group(1), int(listed.group(2)), listed.group(3)
        assert table == "rules", key
        rule = '[[rules]]\nresource_group = "x"\nvendor = "*"\n'
        return rule * count + f"{bad} = 1\n"
    table, bad = key.rsplit(".", 1)
    return f"[{table}]\n{bad} = 1\n"


def test_unknown_key_messages_quoted_in_the_docs_list_the_keys_allowed(tmp_path: Path) -> None:
    """An error message the docs quote for an unknown key lists what the product lists."""
    quoted = []
    for page in pages():
        for key, allowed in re.findall(r"key '([\w.\[\]]+)': unknown key \(allowed: ([^)]*)\)",
                                       page.read_text(encoding="utf-8")):
            quoted.append((page, key, allowed))
    assert quoted
    wrong = []
    for page, key, allowed in quoted:
        path = tmp_path / "config.toml"
        path.write_text(_config_for(key), encoding="utf-8")
        result = _run(["snapshot", "--simulate", "mixed", "--format", "json", "--config", str(path)])
        assert result.returncode == 2, result.stderr
        real = re.search(r"unknown key \(allowed: ([^)]*)\)", result.stderr)
        assert real, result.stderr
        if real.group(1) != allowed:
            wrong.append(f"{page.relative_to(REPO)}: {key}: the docs say ({allowed}), "
                         f"allsmi says ({real.group(1)})")
    assert not wrong, "\n".join(wrong)


@lru_cache(maxsize=1)
def _process_keys() -> list[str]:
    result = _run(["snapshot", "--simulate", "mixed", "--format", "json"])
    assert result.returncode == 0, result.stderr
    for device in json.loads(result.stdout)["devices"]:
        if device["processes"]:
            return list(device["processes"][0])
    raise AssertionError("no simulated process")


def test_process_lists_shown_as_example_output_have_the_real_fields() -> None:
    """A printed process (``# False [{'pid': ...}]`` under a command) has the keys a real
    process has, in their order, not those of an older schema."""
    shown = []
    for example in all_examples():
        if example.lang not in SHELL:
            continue
        for line in example.body.splitlines():
            match = re.match(r"\s*#\s*(?:True|False)\s+(\[\{.*\}\])\s*$", line)
            if match:
                shown.append((example.where, ast.literal_eval(match.group(1))))
    assert shown
    for where, processes in shown:
        for process in processes:
            assert list(process) == _process_keys(), f"{where}: {list(process)}"


def _tool_variables() -> set[str]:
    """The override variables of the vendor tools the installed backends run."""
    from allsmi.collection import registry
    return {v for d in registry.declarations() for v in d.env_vars if v.startswith("ALLSMI_")}


def test_every_vendor_tools_variable_is_in_the_configuration_reference() -> None:
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.split("\n## Environment variables\n", 1)[1]
    variables = _tool_variables()
    assert {"ALLSMI_HL_SMI", "ALLSMI_NPU_SMI", "ALLSMI_NEURON_LS"} <= variables
    missing = sorted(v for v in variables if f"`{v}`" not in section)
    assert not missing, f"docs/configuration.md's environment variables leave out {missing}"
    # ... and the node install names them where it says how to point at a tool elsewhere
    deploy = (REPO / "deploy" / "README.md").read_text(encoding="utf-8")
    missing = sorted(v for v in variables if f"`{v}`" not in deploy)
    assert not missing, f"deploy/README.md's vendor tools leave out {missing}"
    assert "`ALLSMI_LEDGER`" in section


def test_until_defaults_to_the_start_of_the_current_minute_as_the_help_says() -> None:
    help_text = " ".join(_run(["export", "--help"]).stdout.split())
    assert "--until TIME Window end (exclusive), ISO 8601; default: the start of the current " \
           "minute" in help_text
    docs = " ".join((REPO / "docs" / "accounting.md").read_text(encoding="utf-8").split())
    assert "`--until` defaults to the start of the current minute" in docs
    before = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0)
    since = (before - dt.timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = _run(["export", "--simulate", "mixed", "--since", since, "--format", "json"])
    after = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0)
    assert result.returncode == 0, result.stderr
    end = dt.datetime.fromisoformat(json.loads(result.stdout)["period_end"].replace("Z", "+00:00"))
    assert end in (before, after)


def test_the_help_names_every_vendor_the_readme_names() -> None:
    """``allsmi --help`` says what it monitors as the README does: every shipped vendor."""
    from allsmi.cli.vendortables import builtin_declarations
    summary = " ".join(_run(["--help"]).stdout.split("\n\n")[1].split())
    missing = sorted({d.product.split()[0] for d in builtin_declarations()
                      if d.product.split()[0] not in summary})
    assert not missing, f"`allsmi --help` ({summary!r}) leaves out {missing}"

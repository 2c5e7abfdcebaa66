"""The start-up fast path of ``allsmi snapshot`` (allsmi/cli/fast.py) is click, only faster.

Every command line below runs twice as a subprocess: through the console entry point
(``allsmi.cli.main:main``, which takes the fast path when it can) and through the click
group alone. Exit status, stderr and stdout (values that change from one run to the next
taken out) must be the same; and each run reports whether click was imported, so the
tests also pin down which invocations take the fast path and which fall back.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ENTRY = "from allsmi.cli.main import main as run\nrun()\n"
CLICK = "from allsmi.cli.group import cli\ncli(prog_name='allsmi')\n"
REPORT = ("import atexit, os, sys\n"
          "def _report():\n"
          "    with open(os.environ['FASTPATH_REPORT'], 'w') as f:\n"
          "        f.write('click' if 'click' in sys.modules else 'no-click')\n"
          "atexit.register(_report)\n")


def _run(via: str, args: list[str], tmp_path: Path, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], bool]:
    report = tmp_path / f"report-{via}"
    report.unlink(missing_ok=True)
    env = {**os.environ, "FASTPATH_REPORT": str(report)}
    result = subprocess.run([sys.executable, "-c", REPORT + (ENTRY if via == "entry" else CLICK), *args],
                            capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
                            cwd=cwd or tmp_path)  # never the checkout: a relative -o lands here
    return result, report.read_text() == "click"


def _stable(text: str) -> Any:
    """What must not differ between two runs a second apart."""
    if not text:
        return ""
    if text.lstrip().startswith("{"):
        doc = json.loads(text)
        return {"keys": sorted(doc),
                "devices": [(d["id"], d["vendor"], d["name"], d["resource_group"], d["parent"])
                            for d in doc["devices"]],
                "backends": [(b["name"], b["status"], b["message"]) for b in doc["backends"]]}
    rows = list(csv.reader(io.StringIO(text)))
    return [rows[0]] + [row[:3] for row in rows[1:]]


def _same(args: list[str], tmp_path: Path, *, fast: bool) -> subprocess.CompletedProcess[str]:
    entry, entry_click = _run("entry", args, tmp_path)
    click_run, _ = _run("click", args, tmp_path)
    assert entry.returncode == click_run.returncode, (entry.stderr, click_run.stderr)
    assert entry.stderr == click_run.stderr
    assert _stable(entry.stdout) == _stable(click_run.stdout)
    assert entry_click is (not fast), f"{args}: expected the {'fast path' if fast else 'click path'}"
    return entry


CONFIG = """\
[node]
resource_group = "lab"

[groups.training]
labels = { team = "ml" }

[[rules]]
resource_group = "training"
vendor = "nvidia"
"""


@pytest.mark.parametrize("args", [
    ["snapshot", "--simulate", "mixed", "--format", "json"],
    ["snapshot", "--simulate", "mixed", "--format=csv"],
    ["--simulate", "mixed", "snapshot", "--format", "json"],
    ["--simulate", "mixed", "--timeout", "3", "snapshot", "--interval", "0.5", "--format", "json"],
    ["snapshot", "--simulate", "mixed"],  # JSON by default off a terminal
    ["snapshot", "--format", "json", "--simulate", "mixed", "--format", "csv"],  # the last one wins
], ids=["json", "csv-equals", "global-option", "ranges", "default-format", "repeated"])
def test_plain_snapshots_take_the_fast_path_with_the_same_document(args: list[str], tmp_path: Path) -> None:
    result = _same(args, tmp_path, fast=True)
    assert result.returncode == 0 and result.stdout


def test_config_and_output_file_on_the_fast_path(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    for via in ("entry", "click"):
        out = tmp_path / f"{via}.json"
        result, used_click = _run(via, ["snapshot", "--simulate", "mixed", "--config", str(config),
                                        "-o", str(out)], tmp_path)
        assert result.returncode == 0 and result.stdout == "" and result.stderr == ""
        assert used_click is (via == "click")
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    docs = [_stable((tmp_path / f"{via}.json").read_text()) for via in ("entry", "click")]
    assert docs[0] == docs[1]
    assert {group for (_, vendor, _, group, parent) in docs[0]["devices"] if vendor == "nvidia"} == {"training"}


def test_errors_found_while_running_are_reported_as_click_does(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[collector]\ninterval_seconds = -1\n")
    cases = [
        (["snapshot", "--simulate", "no-such-scenario"], 2, "unknown scenario"),
        (["snapshot", "--simulate", "mixed", "--config", str(bad)], 2, "line 2, key 'collector.interval_seconds'"),
        (["snapshot", "--simulate", "mixed", "--config", str(tmp_path / "missing.toml")], 2, "file not found"),
        (["snapshot", "--simulate", "mixed", "-o", str(tmp_path / "no-dir" / "out.json")], 1, "cannot write"),
    ]
    for args, code, message in cases:
        # The fast path parses these; click is imported only to print the error.
        result = _same(args, tmp_path, fast=False)
        assert result.returncode == code and result.stdout == ""
        assert result.stderr.startswith("allsmi: ") and message in result.stderr, result.stderr


@pytest.mark.parametrize("args", [
    ["snapshot", "--format", "xml"],
    ["snapshot", "--format", "JSON"],
    ["snapshot", "--format"],
    ["snapshot", "--format="],
    ["snapshot", "--timeout", "nan"],
    ["snapshot", "--timeout", "0"],
    ["snapshot", "--interval", "abc"],
    ["snapshot", "--interval", "1e9"],
    ["snapshot", "--simulate", "--format"],
    ["snapshot", "extra"],
    ["snapshot", "--", "--format", "json"],
    ["snapshot", "--help"],
    ["snapshot", "-h"],
    ["--version"],
    ["--format", "json", "snapshot"],
    ["snapshot", "--no-such-option"],
    ["snapshot", "-ojson.out"],
    ["snapshot", "--simulate", "mixed", "snapshot"],
    ["backends"],
], ids=" ".join)
def test_anything_else_falls_back_to_click(args: list[str], tmp_path: Path) -> None:
    _same(args, tmp_path, fast=False)


def test_paths_click_checks_fall_back_to_click(tmp_path: Path) -> None:
    directory = tmp_path / "dir"
    directory.mkdir()
    readonly = tmp_path / "readonly.json"
    readonly.write_text("{}")
    readonly.chmod(0o444)
    cases = [["snapshot", "--simulate", "mixed", "--config", str(directory)],
             ["snapshot", "--simulate", "mixed", "-o", str(directory)]]
    if os.geteuid() != 0:  # root may write anything
        cases.append(["snapshot", "--simulate", "mixed", "-o", str(readonly)])
    for args in cases:
        result = _same(args, tmp_path, fast=False)
        assert result.returncode == 2 and "Invalid value" in result.stderr


def test_shell_completion_is_left_to_click(tmp_path: Path) -> None:
    os.environ["_ALLSMI_COMPLETE"] = "bash_source"
    try:
        result, used_click = _run("entry", ["snapshot"], tmp_path)
    finally:
        del os.environ["_ALLSMI_COMPLETE"]
    assert used_click and result.returncode == 0 and "complete" in result.stdout


@pytest.mark.parametrize("args", [["--simulate", "mixed"], ["--simulate", "mixed", "--interval", "2"]],
                         ids=" ".join)
def test_bare_dashboard_takes_the_fast_path_and_prints_as_click_does(args: list[str],
                                                                     tmp_path: Path) -> None:
    """Bare ``allsmi`` with global options only is parsed without click (the dashboard then
    never holds click); without a terminal both paths print the same plain table (click is
    imported there only to print it, as click would)."""
    from allsmi.cli.fast import parse
    interval = {"interval": 2.0} if "--interval" in args else {}
    assert parse(args) == ({"simulate": "mixed", **interval}, None)
    entry, _ = _run("entry", args, tmp_path)
    click_run, _ = _run("click", args, tmp_path)
    assert entry.returncode == click_run.returncode == 0, (entry.stderr, click_run.stderr)
    assert entry.stderr == click_run.stderr
    lines, click_lines = entry.stdout.splitlines(), click_run.stdout.splitlines()
    assert len(lines) == len(click_lines) > 2 and lines[1] == click_lines[1]  # rows; the header
    assert [line.split()[:3] for line in lines[2:]] == [line.split()[:3] for line in click_lines[2:]]


@pytest.mark.parametrize("args", [["--theme", "nord"], ["--sort", "power"], ["--interval", "0"],
                                  ["-h"]], ids=" ".join)
def test_dashboard_options_and_bad_values_go_to_click(args: list[str]) -> None:
    from allsmi.cli.fast import parse
    assert parse(args) is None

"""Configuration and command-line edges: every bad input is refused where it is given, naming
the file, the line and the key (or the option), exit 2; an interrupted snapshot writes a whole
document or nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import click
import pytest

from allsmi.cli.main import COMMANDS
from allsmi.config import ConfigError, load_config, parse_config

CONFIG = Path("/etc/allsmi/config.toml")


def _err(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, CONFIG)
    return info.value


@pytest.mark.parametrize(("text", "line", "key"), [
    ("[collector]\ninterval_seconds = 1\ninterval_seconds = 2\n", 3, "collector.interval_seconds"),
    ("[collector]\n[collector]\n", 2, "collector"),
    ('[[rules]]\nresource_group = "a"\nhost = "x"\n[[rules]]\nresource_group = "b"\nhost = "y"\n'
     'host = "z"\n', 7, "rules[2].host"),
    ("[node]\nresource_group = nope\n", 2, "node.resource_group"),
])
def test_a_toml_syntax_error_names_the_key_of_its_line(text: str, line: int, key: str) -> None:
    """A key written twice (or a value TOML cannot read) named the line only."""
    err = _err(text)
    assert (err.line, err.key) == (line, key)
    assert f"line {line}, key '{key}': invalid TOML" in str(err)


def test_bytes_that_are_not_utf8_name_the_line_and_the_key(tmp_path: Path) -> None:
    """The message gave a byte offset ("position 33") and no line."""
    path = tmp_path / "config.toml"
    path.write_bytes(b'[collector]\ninterval_seconds = 2\n[node]\nresource_group = "caf\xe9"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert (info.value.line, info.value.key) == (4, "node.resource_group")
    assert "not UTF-8" in str(info.value) and "column 22" in str(info.value)
    problems: list[ConfigError] = []  # allsmi doctor: the same problem, listed
    load_config(path, {}, problems=problems)
    assert [(p.line, p.key) for p in problems] == [(4, "node.resource_group")]


def test_a_utf8_byte_order_mark_is_read_as_text(tmp_path: Path) -> None:
    """Editors that write a byte-order mark made a valid file "invalid TOML" at line 1."""
    path = tmp_path / "config.toml"
    path.write_bytes(b'\xef\xbb\xbf[node]\nresource_group = "lab"\n')
    assert load_config(path, {}).default_group == "lab"


@pytest.mark.parametrize(("text", "key"), [
    ("[groups.a.labels]\nteam = nan\n", "groups.a.labels.team"),
    ("[groups.a.labels]\nteam = -inf\n", "groups.a.labels.team"),
    ('[[rules]]\nresource_group = "a"\nindex = -1\n', "rules[1].index"),
])
def test_values_that_mean_nothing_are_refused(text: str, key: str) -> None:
    """A label ``nan`` or ``inf`` and a rule for device -1 (which matches nothing) were taken."""
    err = _err(text)
    assert (err.line, err.key) == (2 if "labels" in text else 3, key)


def test_a_group_named_by_digits_is_shown_as_a_table_key() -> None:
    """``[groups.7]`` was shown as the 8th element of an array (``groups[8].foo``)."""
    err = _err("[groups.7]\nfoo = 1\n")
    assert (err.line, err.key) == (2, "groups.7.foo")
    assert _err('[[rules]]\nresource_group = "a"\nvendr = "x"\n').key == "rules[1].vendr"


@pytest.mark.parametrize("value", ["gpu\n7", "gpu\u202e7", "h" * 300])
def test_a_host_name_is_validated_like_a_setting(value: str) -> None:
    """A host name with a newline or a bidirectional control was reported, exported and matched
    by ``[[rules]] host`` as it was."""
    env = {"XDG_CONFIG_HOME": "/nonexistent"}
    with pytest.raises(ConfigError) as info:
        load_config(None, {**env, "ALLSMI_HOSTNAME": value})
    assert str(info.value).startswith("$ALLSMI_HOSTNAME: ") and "\n" not in str(info.value)
    for fine in ("", "  ", " gpu-7 "):  # blank: unset (the kernel's name)
        load_config(None, {**env, "ALLSMI_HOSTNAME": fine})


def test_a_blank_resource_group_variable_is_unset() -> None:
    """A blank ``$ALLSMI_RESOURCE_GROUP`` put every device no rule matches in the group ``""``."""
    env = {"XDG_CONFIG_HOME": "/nonexistent"}
    assert load_config(None, {**env, "ALLSMI_RESOURCE_GROUP": "   "}).default_group == "default"
    assert load_config(None, {**env, "ALLSMI_RESOURCE_GROUP": " lab "}).default_group == "lab"


def _text_options(command: click.Command) -> list[str]:
    return [p.opts[0] for p in command.params if isinstance(p, click.Option) and not p.is_flag
            and not p.multiple and isinstance(p.type, (click.types.StringParamType, click.Path))]


def test_every_text_option_of_every_command_refuses_an_empty_value() -> None:
    """``''`` read as not given: ``serve --web-config ''`` served without TLS, ``snapshot -o ''``
    printed to stdout, ``--config ''`` read another file, ``--simulate ''`` the hardware."""
    from allsmi.cli.group import LazyGroup, cli
    checked = 0
    with click.Context(cli) as ctx:
        for name in COMMANDS:
            command = LazyGroup.get_command(cli, ctx, name)
            assert command is not None
            for option in _text_options(command):
                with pytest.raises(click.BadParameter, match="must not be empty"):
                    command.make_context(name, [option, ""], parent=ctx)
                checked += 1
    for option in _text_options(cli):
        with pytest.raises(click.BadParameter, match="must not be empty"):
            cli.make_context("allsmi", [option, " ", "backends"])
    assert checked > 30


def test_output_dash_is_stdout_on_every_command(tmp_path: Path) -> None:
    """``-o -`` wrote a file called ``-`` (export, idle, waste): it is stdout, for every command
    that takes ``--output``, never a file."""
    from allsmi.cli.group import LazyGroup, cli
    with click.Context(cli) as ctx:
        takers = [name for name in COMMANDS if any(
            "--output" in getattr(p, "opts", ()) for p in LazyGroup.get_command(cli, ctx, name).params)]
    assert {"snapshot", "export", "idle", "waste", "report"} <= set(takers), takers
    for name in ("snapshot", "export"):
        args = [name, "--simulate", "mixed", "--format", "json", "-o", "-"]
        if name == "export":  # two hours replayed (a day's took 2 s of CPU)
            args[3:3] = ["--since", "2026-11-02T09:00:00Z", "--until", "2026-11-02T11:00:00Z"]
        out = subprocess.run([sys.executable, "-m", "allsmi", *args], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path,
                             env={"ALLSMI_CONFIG": "/dev/null", "PATH": "/usr/bin:/bin"})
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) and not (tmp_path / "-").exists(), name
    for name in takers:  # each turns "-" into "not given" (stdout) before its own checks
        with click.Context(cli) as ctx:
            command = LazyGroup.get_command(cli, ctx, name)
            sub = command.make_context(name, ["-o", "-", *(["--period", "yesterday"]
                                                            if name != "snapshot" else [])],
                                       parent=ctx)
            assert sub.params["output"] is None, name


def _snapshot_with(patch: str) -> subprocess.CompletedProcess[str]:
    """``allsmi snapshot --simulate mixed --format json`` through the console entry point, with
    ``patch`` run first (a subprocess: SIGINT must reach a main thread of its own)."""
    code = (f"import os, signal, sys\n{patch}\n"
            "sys.argv = ['allsmi', 'snapshot', '--simulate', 'mixed', '--format', 'json']\n"
            "from allsmi.cli.main import main\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"ALLSMI_CONFIG": "/dev/null", "PATH": "/usr/bin:/bin"},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_an_interrupted_snapshot_writes_nothing_and_exits_130() -> None:
    """Ctrl-C while collecting printed a traceback and exited 1."""
    out = _snapshot_with("from allsmi.collection.collector import Collector\n"
                         "def collect(self): raise KeyboardInterrupt\n"
                         "Collector.collect_once = collect\n")
    assert (out.returncode, out.stdout) == (130, "")
    assert out.stderr == "allsmi: interrupted by SIGINT; nothing was written\n"


def test_sigint_while_the_document_is_written_leaves_it_whole() -> None:
    """Ctrl-C in the middle of the write left part of the document on stdout (and a traceback)."""
    out = _snapshot_with("from allsmi.cli import snapshot_run\n"
                         "def write(self, text):\n"
                         "    sys.stdout.write(text[:100]); sys.stdout.flush()\n"
                         "    os.kill(os.getpid(), signal.SIGINT)\n"
                         "    sys.stdout.write(text[100:])\n"
                         "snapshot_run.OriginalStdout.write = write\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["devices"] and out.stderr == ""


def test_a_csv_cell_never_holds_a_formula_nor_an_infinite_number() -> None:
    """``"-inf"`` passed as a plain number (a spreadsheet reads a leading ``-`` as a formula), and
    a non-finite float was written as ``nan``/``inf`` where unknown is an empty cell."""
    from allsmi.schema.formatting import csv_cell
    assert [csv_cell(v) for v in ("-inf", "+nan", "-Infinity", "=1+1", "-3.5", "-1")] == \
        ["'-inf", "'+nan", "'-Infinity", "'=1+1", "-3.5", "-1"]
    assert [csv_cell(v) for v in (float("nan"), float("-inf"), None, 2.5)] == ["", "", "", "2.5"]


def _allsmi(*args: str) -> subprocess.Popen[str]:
    """``allsmi ARGS`` with no ``ALLSMI_*`` variable of the caller's."""
    from .conftest import allsmi_exe
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
    return subprocess.Popen(allsmi_exe() + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)


def test_gaps_are_judged_against_the_interval_the_command_samples_at(tmp_path: Path) -> None:
    """``[ledger] max_gap_seconds`` below the sampling interval passed ``snapshot`` and ``doctor``
    (which said the file was fine) and stopped only ``allsmi record`` at start; a gap the
    ``--interval`` flag makes valid was refused against the file's interval."""
    ledger = tmp_path / "ledger.toml"
    ledger.write_text("[ledger]\nmax_gap_seconds = 1\n")
    for command in (["snapshot", "--format", "json"], ["doctor", "--json"]):
        proc = _allsmi(*command, "--simulate", "mixed", "--config", str(ledger))
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (command, err)
        assert f"{ledger}, line 2, key 'ledger.max_gap_seconds': must be at least the sampling " \
               "interval (2 s), got 1" in err, err
    problems = json.loads(out)["config_problems"]  # (doctor's report is still printed)
    assert [(p["line"], p["key"]) for p in problems] == [(2, "ledger.max_gap_seconds")]
    proc = _allsmi("snapshot", "--format", "json", "--simulate", "mixed", "--interval", "0.5",
                   "--config", str(ledger))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and json.loads(out)["devices"], err
    serve = tmp_path / "serve.toml"
    serve.write_text("[serve]\nenergy_max_gap_seconds = 1\n")
    proc = _allsmi("serve", "--simulate", "mixed", "--interval", "0.5", "--listen", "127.0.0.1:0",
                   "--config", str(serve))
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        assert "serving metrics on" in line, line + (proc.stderr.read() if proc.poll() else "")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_the_ledger_gap_has_its_lower_end_whatever_the_interval(tmp_path: Path) -> None:
    """``[ledger] max_gap_seconds``'s lower end (the least sampling interval, 0.05 s) is checked
    wherever ``[ledger]`` is read, not only where a command's sampling interval is at hand:
    ``ledger_settings`` (the recorder, a replay, a report) took 0.01."""
    from allsmi.accounting.settings import ledger_settings
    path = tmp_path / "config.toml"
    path.write_text("[ledger]\nmax_gap_seconds = 0.01\n")
    with pytest.raises(ConfigError) as caught:
        ledger_settings(load_config(str(path), environ={}), environ={})
    assert str(caught.value) == (f"{path}, line 2, key 'ledger.max_gap_seconds': must be a "
                                 "number from 0.05 to 604800, got 0.01")
    path.write_text("[ledger]\nmax_gap_seconds = 0.05\n")
    assert ledger_settings(load_config(str(path), environ={}), environ={}).max_gap_seconds == 0.05


def test_the_interval_flag_samples_serve_in_the_config_check(tmp_path: Path) -> None:
    """``allsmi serve --interval 0.5`` with ``[serve] interval_seconds = 2`` and
    ``energy_max_gap_seconds = 1`` samples every 0.5 s, so the gap is valid; the check every
    command runs judged it against the file's 2 s and exited 2 before serve started (and
    ``allsmi doctor --interval 0.5`` said the same). Without the flag it is refused."""
    config = tmp_path / "serve.toml"
    config.write_text("[serve]\ninterval_seconds = 2\nenergy_max_gap_seconds = 1\n")
    proc = _allsmi("serve", "--simulate", "mixed", "--interval", "0.5", "--listen", "127.0.0.1:0",
                   "--config", str(config))
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        assert "serving metrics on" in line, line + (proc.stderr.read() if proc.poll() else "")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    for args, code in ((["--interval", "0.5"], 0), ([], 2)):
        proc = _allsmi("doctor", "--json", *args, "--config", str(config))
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == code, err
        problems = json.loads(out)["config_problems"]
        assert [p["key"] for p in problems] == ([] if code == 0 else
                                                 ["serve.energy_max_gap_seconds"]), problems

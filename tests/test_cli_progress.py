"""Progress on long work: shown on stderr when it is a terminal, nothing when it is not (cron,
pipes), the time taken at the end with ``--verbose``; stdout is the document alone either way."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .conftest import allsmi_exe, run_allsmi

ENV = {"ALLSMI_CONFIG": "/dev/null"}


def _window(hours: float = 3.0) -> tuple[str, ...]:
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=hours)
    return ("--since", start.strftime("%Y-%m-%dT%H:%M:%SZ"), "--until", end.strftime("%Y-%m-%dT%H:%M:%SZ"))


def test_off_a_terminal_nothing_is_written_to_stderr(tmp_path: Path) -> None:
    out = run_allsmi("export", "--simulate", "mixed", *_window(), "--format", "json", env=ENV,
                     cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["source"] == "simulation mixed"
    assert "replaying" not in out.stderr and "\x1b" not in out.stderr, out.stderr


def test_verbose_says_how_long_it_took(tmp_path: Path) -> None:
    out = run_allsmi("export", "--simulate", "mixed", *_window(), "--format", "json", "--verbose",
                     env=ENV, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    json.loads(out.stdout)
    assert re.search(r"^allsmi: replaying mixed: \d+\.\d s \(\d+ chunks\)$", out.stderr, re.M), out.stderr
    assert "\x1b" not in out.stderr
    idle = run_allsmi("idle", "--simulate", "mixed", *_window(), "--format", "json", "-v",
                      env=ENV, cwd=tmp_path, timeout=120)
    assert idle.returncode == 0 and re.search(r"^allsmi: replaying mixed: \d+\.\d s", idle.stderr, re.M)


BUDGET = """\
[[rules]]
resource_group = "training"
vendor = "nvidia"
[groups.training]
price_per_device_hour = 2.0
currency = "EUR"
budget_per_month = 100
"""


def _budget_window() -> tuple[str, ...]:
    """An hour of last month from 01:00 on its first day (UTC): the budgets' month to date is
    the two hours from midnight, a second replay."""
    first = datetime.now(timezone.utc).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    start = (first - timedelta(days=1)).replace(day=1, hour=1)
    return ("--since", start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "--until", (start + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"), "--tz", "UTC")


def test_verbose_says_how_long_the_budgets_month_to_date_took(tmp_path: Path) -> None:
    """With a budget, the month to date is replayed too: --verbose says how long each took,
    naming what the second one was for; off a terminal nothing else is written."""
    (tmp_path / "c.toml").write_text(BUDGET)
    out = run_allsmi("export", "--config", str(tmp_path / "c.toml"), "--simulate", "mixed",
                     *_budget_window(), "--format", "json", "--verbose", cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "training")
    assert row["budget_used_ratio"] > row["cost"] / 100  # two hours' cost against one's
    assert re.search(r"^allsmi: replaying mixed: \d+\.\d s \(\d+ chunks\)$", out.stderr, re.M)
    assert re.search(r"^allsmi: replaying mixed \(month to date, for the budgets\): \d+\.\d s "
                     r"\(\d+ chunks\)$", out.stderr, re.M), out.stderr
    assert "\x1b" not in out.stderr
    quiet = run_allsmi("export", "--config", str(tmp_path / "c.toml"), "--simulate", "mixed",
                       *_budget_window(), "--format", "json", cwd=tmp_path, timeout=120)
    assert quiet.returncode == 0 and quiet.stdout == out.stdout
    assert "replaying" not in quiet.stderr, quiet.stderr


def _on_a_terminal(args: list[str], cwd: Path, term: str = "xterm-256color") -> tuple[int, bytes, bytes]:
    """(exit status, stdout, what the terminal showed) of ``allsmi ARGS`` with stderr on a
    pseudo-terminal and stdout a pipe."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(allsmi_exe() + args,
                            stdout=subprocess.PIPE, stderr=terminal, stdin=subprocess.DEVNULL,
                            env={**os.environ, **ENV, "TERM": term, "COLUMNS": "100"},
                            cwd=cwd)
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # the terminal's other side closed: the command ended
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        stdout, _ = proc.communicate(timeout=60)
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, stdout, seen


def test_on_a_terminal_stderr_shows_progress_and_stdout_stays_the_document(tmp_path: Path) -> None:
    """stderr on a pseudo-terminal, stdout a pipe: the progress goes to the terminal only."""
    code, stdout, seen = _on_a_terminal(["export", "--simulate", "mixed", *_window(12), "--format",
                                         "json"], tmp_path)
    assert code == 0
    assert json.loads(stdout)["source"] == "simulation mixed"
    assert b"\x1b" not in stdout and b"replaying" not in stdout
    assert b"allsmi: replaying mixed" in seen, seen[-500:]


def test_on_a_terminal_the_budgets_replay_shows_its_progress_too(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(BUDGET)
    code, stdout, seen = _on_a_terminal(["export", "--config", str(tmp_path / "c.toml"),
                                         "--simulate", "mixed", *_budget_window(), "--format",
                                         "csv"], tmp_path)
    assert code == 0 and b"\x1b" not in stdout and stdout.startswith(b"period_start,")
    assert b"allsmi: replaying mixed (month to date, for the budgets)" in seen, seen[-500:]


def test_on_a_terminal_a_scenario_name_with_brackets_is_shown_as_text(tmp_path: Path) -> None:
    """The progress line's text (a scenario's name, a ledger's path) is not rich markup: a name
    holding ``[/]`` ended the command with a MarkupError on a terminal."""
    (tmp_path / "lab.toml").write_text('name = "lab [/] [bold]x"\ninclude = "mixed"\n')
    code, stdout, seen = _on_a_terminal(["export", "--simulate", str(tmp_path / "lab.toml"),
                                         *_window(2), "--format", "json"], tmp_path)
    assert code == 0, seen[-800:]
    assert json.loads(stdout)["rows"]
    assert b"allsmi: replaying lab [/] [bold]x" in seen, seen[-500:]


def test_on_a_terminal_a_step_without_a_unit_shows_no_count(tmp_path: Path) -> None:
    """The billing step counts nothing: its line read ``allsmi: billing 0`` for its whole run."""
    code, stdout, seen = _on_a_terminal(["export", "--simulate", "mixed", *_window(2), "--format",
                                         "json"], tmp_path)
    assert code == 0 and json.loads(stdout)["rows"]
    plain = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", seen)
    assert b"allsmi: billing" in plain, plain[-500:]
    assert not re.search(rb"allsmi: billing \d+ ", plain), plain[-500:]  # (then the time)


def test_on_a_dumb_terminal_nothing_is_written(tmp_path: Path) -> None:
    """``TERM=dumb`` cannot redraw a line (the dashboard prints a plain table there): the
    progress wrote a blank line per step instead of nothing."""
    code, stdout, seen = _on_a_terminal(["export", "--simulate", "mixed", *_window(2), "--format",
                                         "json"], tmp_path, term="dumb")
    assert code == 0 and json.loads(stdout)["rows"]
    assert seen == b"", seen

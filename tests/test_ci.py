"""CI runs exactly the README's test command."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    lines = (REPO / "README.md").read_text().splitlines()
    start = lines.index("```sh")
    end = lines.index("```", start)
    return [line for line in lines[start + 1:end] if line and not line.startswith("#")]


def test_ci_runs_the_readme_test_command() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci
    assert "allsmi --simulate mixed" in commands[0]

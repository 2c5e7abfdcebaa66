"""What the every-key tests (tests/test_config_every_key.py, tests/test_scenario_every_key.py)
share: the check every command runs on a configuration or scenario file, in this process, and
what a refusal must look like."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest

from allsmi.cli.common import settings


def judged(capsys: pytest.CaptureFixture[str], config: Path | None = None,
           scenario: Path | None = None) -> tuple[Any, str, str]:
    """The exit code, stdout and stderr of the check every command runs on ``config`` or
    ``scenario`` (:func:`allsmi.cli.common.settings`); a crash is its ``repr``."""
    code: Any = 0
    try:
        settings(None if config is None else str(config),
                 None if scenario is None else str(scenario), None, None, parent={})
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a crash is what these tests look for
        code = f"crashed: {exc!r}"
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(text: str, line: int, key: str, path: Path, code: Any, out: str,
                   err: str) -> None:
    """Exit 2, nothing on stdout, one line on stderr naming ``path``, ``line`` and ``key``
    (the file's ``text`` is shown when it is not)."""
    assert code == 2, f"exit {code} for {text!r}; stderr: {err!r}"
    assert out == ""
    assert "Traceback" not in err
    assert str(path) in err, err
    assert f", line {line}, key '{key}':" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert len(err) < 2000, err  # (an integer of hundreds of digits is not echoed whole)

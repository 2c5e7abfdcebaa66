"""What a test does when something it needs is missing (issue 36: skipped with the reason
outside CI, failed in CI), for each way the suite looks for it: a system tool on the PATH,
Playwright, focus-validator's environment and the wheelhouse of the tests that run pip."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from . import wheelhouse
from .accounting import focus_validator
from .conftest import require_tool
from .report import browser


def _outcome(monkeypatch: pytest.MonkeyPatch, ci: bool, look: Callable[[], Any]) -> tuple[str, str]:
    """(``skipped`` or ``failed``, the message) of ``look()`` outside CI or under it."""
    if ci:
        monkeypatch.setenv("ALLSMI_REQUIRE_INTEGRATION", "1")
    else:
        monkeypatch.delenv("ALLSMI_REQUIRE_INTEGRATION", raising=False)
    try:
        look()
    except pytest.skip.Exception as exc:
        return "skipped", str(exc)
    except pytest.fail.Exception as exc:
        return "failed", str(exc)
    return "found", ""


def _no_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], Any]:
    monkeypatch.setenv("PATH", str(tmp_path))
    return lambda: require_tool("promtool", "prometheus")


def _no_playwright(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], Any]:
    (tmp_path / "chromium").write_text("#!/bin/sh\n")
    (tmp_path / "chromium").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(__import__("sys").modules, "playwright.sync_api", None)  # (cannot import)
    return browser.chromium


def _no_validator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], Any]:
    monkeypatch.setattr(focus_validator, "VENV", tmp_path / "venv")
    monkeypatch.setattr(focus_validator, "INSTALLING", tmp_path / "venv.installing")
    monkeypatch.setattr(focus_validator, "INSTALL_LOG", tmp_path / "venv.log")
    return focus_validator.validator_executable


def _no_wheels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[], Any]:
    monkeypatch.setattr(wheelhouse, "WHEELHOUSE", tmp_path / "wheels")
    monkeypatch.setattr(wheelhouse, "INSTALLING", tmp_path / "wheels.installing")
    monkeypatch.setattr(wheelhouse, "INSTALL_LOG", tmp_path / "wheels.log")
    return lambda: wheelhouse.offline_pip_env(lock=True)


CASES = {"tool": (_no_tool, "promtool not found (apt-get install prometheus)"),
         "playwright": (_no_playwright, "playwright is not installed"),
         "focus-validator": (_no_validator, "focus-validator 2.2.1 is not installed"),
         "wheelhouse": (_no_wheels, "lacks setuptools, wheel, amdsmi==")}


@pytest.mark.parametrize("ci", [False, True], ids=["outside CI", "under CI"])
@pytest.mark.parametrize("missing", sorted(CASES))
def test_what_is_missing_skips_with_its_reason_outside_ci_and_fails_under_ci(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, missing: str, ci: bool) -> None:
    make, reason = CASES[missing]
    outcome, message = _outcome(monkeypatch, ci, make(monkeypatch, tmp_path))
    assert outcome == ("failed" if ci else "skipped"), (outcome, message)
    assert reason in message
    if missing in ("focus-validator", "wheelhouse"):  # (and how to get it)
        assert "run .ci/run" in message and "pip" in message, message


def test_a_test_waits_for_the_background_download_and_reads_its_log(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """While .ci/run's download runs (its pid in the file), the test waits; once it has ended,
    what it said is in the failure."""
    import subprocess
    import sys
    look = _no_wheels(monkeypatch, tmp_path)
    (tmp_path / "wheels.log").write_text("ERROR: No matching distribution found for h11")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    try:
        (tmp_path / "wheels.installing").write_text(str(sleeper.pid))
        outcome, message = _outcome(monkeypatch, True, look)
        assert sleeper.poll() is not None  # (it waited for the download to end)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert outcome == "failed" and "No matching distribution found for h11" in message

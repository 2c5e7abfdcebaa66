"""The long-running-tool helper (``allsmi.backends._common.reports.NewestReport``) against the
shared stand-in's streaming mode: the newest report, a child that dies restarted with back-off,
garbage lines skipped and named, a tool that never reports a timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from allsmi.backend_api import BackendError, BackendTimeout
from allsmi.backends._common.reports import NewestReport
from tests.contract import standin


def _parse(line: str) -> dict:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ValueError("not a report")
    return value


def _tool(tmp_path: Path, **route: object) -> Path:
    return standin.write_standin(tmp_path, "reporter", {}, default=dict(route, pidfile=str(tmp_path / "pids")))


def _wait(condition, seconds: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_the_newest_report_of_a_tool_that_keeps_printing(tmp_path: Path) -> None:
    exe = _tool(tmp_path, text='{"n": 1}\n', every=0.05)
    reports = NewestReport([str(exe)], _parse, label="reporter", first_report_timeout=5, stale_after=5)
    try:
        warnings: list[str] = []
        assert reports.newest(warnings) == {"n": 1} and warnings == []
        pid = reports.pid
        assert pid is not None and standin.alive(pid)
    finally:
        reports.close()
    assert not standin.alive(pid)


def test_a_tool_that_dies_is_restarted_with_back_off_and_reported_until_it_reports(tmp_path: Path) -> None:
    # Each run prints one report and exits 3: the stream restarts it (back-off 0.05 s).
    exe = _tool(tmp_path, text='{"n": 1}\n', stderr="lost the device\n", rc=3)
    clock = [100.0]
    reports = NewestReport([str(exe)], _parse, label="reporter", first_report_timeout=5, stale_after=1,
                           backoff=(0.05, 0.05), clock=lambda: clock[0])
    try:
        assert reports.newest([]) == {"n": 1}
        _wait(lambda: len(standin.pids(tmp_path / "pids")) >= 3)  # restarted, again and again
        clock[0] += 10  # no report for 10 s (by the report clock): the last exit is the reason
        with pytest.raises(BackendError, match="exited with status 3: lost the device"):
            reports.newest([])
    finally:
        reports.close()


def test_garbage_lines_are_skipped_and_named(tmp_path: Path) -> None:
    exe = _tool(tmp_path, text='<html>oops</html>\n{"n": 2}\n', every=0.05)
    reports = NewestReport([str(exe)], _parse, label="reporter", first_report_timeout=5, stale_after=5)
    try:
        warnings: list[str] = []
        assert reports.newest(warnings) == {"n": 2}
        assert any("reporter: not JSON" in w and "skipped" in w for w in warnings), warnings
    finally:
        reports.close()


def test_a_tool_that_never_reports_is_a_timeout_and_one_that_crashes_an_error(tmp_path: Path) -> None:
    hung = NewestReport([str(_tool(tmp_path / "a", hang=True))], _parse, label="reporter",
                        first_report_timeout=0.3, stale_after=5)
    started = time.monotonic()
    try:
        with pytest.raises(BackendTimeout, match="printed no report within 0.3 s"):
            hung.newest([])
    finally:
        hung.close()
    assert time.monotonic() - started < 3
    crashed = NewestReport([str(_tool(tmp_path / "b", stderr="Segmentation fault\n", die="SIGSEGV"))], _parse,
                           label="reporter", first_report_timeout=5, stale_after=5)
    try:
        with pytest.raises(BackendError, match=r"killed by signal SIGSEGV \(11\): Segmentation fault"):
            crashed.newest([])
    finally:
        crashed.close()


def test_a_tool_leaving_a_grandchild_on_its_pipes_is_seen_to_exit(tmp_path: Path) -> None:
    exe = _tool(tmp_path, grandchild=True, stderr="Error: PCI link down\n", rc=1)
    reports = NewestReport([str(exe)], _parse, label="reporter", first_report_timeout=5, stale_after=5)
    started = time.monotonic()
    try:
        with pytest.raises(BackendError, match="exited with status 1: Error: PCI link down"):
            reports.newest([])
        assert time.monotonic() - started < 3
    finally:
        reports.close()
    _wait(lambda: not any(standin.alive(p) for p in standin.pids(tmp_path / "pids")))

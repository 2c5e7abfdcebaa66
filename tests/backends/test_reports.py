"""The long-running-tool helper (``allsmi.backends._common.reports.NewestReport``) against the
shared stand-in's streaming mode: the newest report, a child that dies restarted with back-off,
garbage lines skipped and named, a tool that never reports a timeout, one that prints only
garbage or over-long lines an error that names its output."""

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


def test_a_tool_that_prints_only_garbage_is_an_error_naming_it_not_a_timeout(tmp_path: Path) -> None:
    exe = _tool(tmp_path, text="garbage line\n", every=0.05)
    reports = NewestReport([str(exe)], _parse, label="reporter", first_report_timeout=2, stale_after=5)
    try:
        with pytest.raises(BackendError, match=r"^reporter printed no readable report within 2 s: "
                                               r"reporter: not JSON .*'garbage line'") as caught:
            reports.newest([])
        assert not isinstance(caught.value, BackendTimeout)
    finally:
        reports.close()


def test_a_tool_that_prints_garbage_and_exits_0_is_an_error_naming_it(tmp_path: Path) -> None:
    exe = _tool(tmp_path, text="garbage line\n", rc=0)
    reports = NewestReport([str(exe)], _parse, label="reporter", first_report_timeout=5, stale_after=5)
    try:
        with pytest.raises(BackendError, match=r"^reporter exited with status 0; it printed unreadable "
                                               r"output: reporter: not JSON .*'garbage line'"):
            reports.newest([])
    finally:
        reports.close()


def test_a_stale_report_names_the_garbage_printed_since(tmp_path: Path) -> None:
    exe = tmp_path / "reporter"
    exe.write_text("#!/bin/sh\necho '{\"n\": 1}'\nwhile true; do echo garbage line; sleep 0.05; done\n")
    exe.chmod(0o755)
    clock = [100.0]
    reports = NewestReport([str(exe)], _parse, label="reporter", first_report_timeout=5, stale_after=1,
                           clock=lambda: clock[0])
    try:
        assert reports.newest([]) == {"n": 1}
        clock[0] += 10  # no report for 10 s, only garbage
        messages: list[str] = []

        def names_the_garbage() -> bool:
            with pytest.raises(BackendError, match=r"^no fresh reporter report for 10.0 s") as caught:
                reports.newest([])
            messages.append(str(caught.value))
            return "it printed unreadable output: reporter: not JSON" in messages[-1]

        _wait(names_the_garbage, seconds=5)
        assert "'garbage line'" in messages[-1], messages[-1]
    finally:
        reports.close()


def test_an_over_long_line_is_an_error_saying_the_report_was_too_long(tmp_path: Path) -> None:
    long = '{"n": "' + "x" * 2000 + '"}'
    only_long = NewestReport([str(_tool(tmp_path / "a", text=long + "\n", every=0.05))], _parse,
                             label="reporter", first_report_timeout=5, stale_after=5, max_line_bytes=1000)
    try:
        with pytest.raises(BackendError, match=rf"reporter's report was too long to read: a line of "
                                               rf"{len(long)} bytes, over the limit of 1000 bytes") as caught:
            only_long.newest([])
        assert not isinstance(caught.value, BackendTimeout)
    finally:
        only_long.close()
    # A readable report, then a longer one: the readable one is not the newest, so not used.
    then_long = NewestReport([str(_tool(tmp_path / "b", text='{"n": 1}\n' + long + "\n", every=60))], _parse,
                             label="reporter", first_report_timeout=5, stale_after=5, max_line_bytes=1000)

    def too_long() -> bool:
        try:
            then_long.newest([])
        except BackendError as exc:
            return "reporter's report was too long to read" in str(exc)
        return False

    try:
        _wait(too_long, seconds=5)
    finally:
        then_long.close()

"""The long-running child reader used by the Gaudi loop mode."""

from __future__ import annotations

import sys
import threading
import time

import psutil

from allsmi.backends._common.stream import LineStream, StreamExit


def _script(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_backoff_grows_for_children_that_print_nothing() -> None:
    exits: list[tuple[float, StreamExit]] = []
    stream = LineStream(_script("import sys; sys.stderr.write('boom'); sys.exit(4)"),
                        on_line=lambda line: None,
                        on_exit=lambda info: exits.append((time.monotonic(), info)) or len(exits) < 5,
                        backoff_initial=0.05, backoff_max=0.2)
    stream.start()
    deadline = time.monotonic() + 10
    while stream.running and time.monotonic() < deadline:
        time.sleep(0.02)
    stream.close()
    assert len(exits) == 5
    assert all(info.returncode == 4 and info.lines == 0 for _, info in exits)
    assert exits[0][1].describe("tool") == "tool exited with status 4: boom"
    gaps = [b[0] - a[0] for a, b in zip(exits, exits[1:])]
    # waits are 0.1, 0.2, 0.2, 0.2 (doubling from 0.05, capped at 0.2) plus start-up time
    assert gaps[0] >= 0.1 and all(g >= 0.2 for g in gaps[1:])
    assert [info.generation for _, info in exits] == [1, 2, 3, 4, 5]


def test_only_whole_lines_are_delivered_and_long_lines_dropped() -> None:
    lines: list[str] = []
    exits: list[StreamExit] = []
    code = ("import sys; sys.stdout.write('a\\n' + 'x' * 5000 + '\\nb\\r\\nhalf-a-li'); "
            "sys.stdout.flush()")
    stream = LineStream(_script(code), on_line=lines.append,
                        on_exit=lambda info: exits.append(info) or False,
                        max_line_bytes=1000)
    stream.start()
    deadline = time.monotonic() + 5
    while stream.running and time.monotonic() < deadline:
        time.sleep(0.02)
    stream.close()
    assert lines == ["a", "b"]
    assert stream.dropped_long_lines == 1
    assert exits[0].dropped_partial and exits[0].returncode == 0


def test_each_long_line_is_handed_on_with_its_length() -> None:
    lengths: list[int] = []
    exits: list[StreamExit] = []
    code = ("import sys; sys.stdout.write('a\\n' + 'x' * 5000 + '\\n' + 'y' * 200000 + '\\nb\\n'); "
            "sys.stdout.flush()")
    stream = LineStream(_script(code), on_line=lambda line: None, on_long_line=lengths.append,
                        on_exit=lambda info: exits.append(info) or False, max_line_bytes=1000)
    stream.start()
    deadline = time.monotonic() + 5
    while stream.running and time.monotonic() < deadline:
        time.sleep(0.02)
    stream.close()
    assert lengths == [5000, 200000]
    assert exits[0].long_lines == 2 and exits[0].lines == 2 and not exits[0].dropped_partial
    assert exits[0].describe("tool") == "tool exited with status 0 (2 line(s) over the length limit dropped)"


def test_hung_child_is_killed_and_close_leaves_nothing_behind() -> None:
    exits: list[StreamExit] = []
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    stream = LineStream(_script("import time; print('x', flush=True); time.sleep(60)"),
                        on_line=lambda line: None, on_exit=lambda info: exits.append(info) or True,
                        idle_timeout=0.3, backoff_initial=0.05)
    stream.start()
    deadline = time.monotonic() + 5
    while not exits and time.monotonic() < deadline:
        time.sleep(0.02)
    assert exits and exits[0].reason == "hung" and exits[0].returncode == -9
    assert "printed nothing for too long" in exits[0].describe("tool")
    stream.close()
    stream.close()
    assert not stream.running and stream.pid is None
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children_before
    assert set(threading.enumerate()) <= threads_before


def test_spawn_failure_is_reported() -> None:
    exits: list[StreamExit] = []
    stream = LineStream(["/nonexistent/hl-smi", "-l", "1"], on_line=lambda line: None,
                        on_exit=lambda info: exits.append(info) or False)
    stream.start()
    deadline = time.monotonic() + 5
    while stream.running and time.monotonic() < deadline:
        time.sleep(0.02)
    stream.close()
    assert exits[0].reason == "spawn-failed" and "cannot run hl-smi" in exits[0].describe("hl-smi")

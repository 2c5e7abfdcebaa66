"""The long benchmarks' progress (benchmarks/_progress.py): on stderr when it is a terminal,
nothing when it is not; the table on stdout either way, even what is printed while the line is
drawn (issue 35)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = """
import sys, time
sys.path.insert(0, "benchmarks")
from _progress import progress
with progress("idle CPU of 2 servers", total=3) as done:
    print("| exporter | CPU |", flush=True)  # printed while the progress line is drawn
    for _ in range(3):
        time.sleep(0.25)
        done.advance()
print("| allsmi | 0.25 % |")
"""


def test_off_a_terminal_the_benchmark_prints_its_table_alone() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "| exporter | CPU |\n| allsmi | 0.25 % |\n" and out.stderr == ""


def test_on_a_terminal_stderr_shows_progress_and_stdout_keeps_the_table() -> None:
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=terminal,
                            stdin=subprocess.DEVNULL, cwd=REPO,
                            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"})
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(controller, 65536)
                except OSError:
                    break
        stdout = proc.communicate(timeout=30)[0]
    finally:
        os.close(controller)
    assert proc.returncode == 0
    assert stdout == b"| exporter | CPU |\n| allsmi | 0.25 % |\n"  # none of it sent to stderr
    assert b"allsmi: idle CPU of 2 servers" in seen, seen

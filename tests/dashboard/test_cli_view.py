"""``allsmi`` / ``allsmi view`` as a user runs them: in a real terminal (tmux) and in pipes."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from ..conftest import allsmi_exe, require_tool, run_allsmi

pytestmark = pytest.mark.timeout(180)


class Tmux:
    """A private tmux server (its own socket) running one command in a WxH window."""

    def __init__(self, tmux: str, name: str) -> None:
        self.tmux, self.name = tmux, name

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.tmux, "-L", self.name, *args], capture_output=True, text=True,
                              timeout=20, check=check)

    def start(self, command: list[str], width: int, height: int) -> None:
        env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        subprocess.run([self.tmux, "-L", self.name, "-f", "/dev/null", "new-session", "-d", "-s", "t",
                        "-x", str(width), "-y", str(height), shlex.join(command)],
                       check=True, timeout=20, env={**env, "TERM": "xterm-256color"})

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "t", check=False).stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "t", *keys)

    def alive(self) -> bool:
        return self.run("has-session", "-t", "t", check=False).returncode == 0

    def wait_for(self, pattern: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if re.search(pattern, text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"{pattern!r} never appeared; screen was:\n{text}")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    path = require_tool("tmux", "tmux")
    session = Tmux(path, f"allsmi-test-{os.getpid()}-{time.monotonic_ns()}")
    try:
        yield session
    finally:
        session.run("kill-server", check=False)


VENDORS = ("nvidia", "amd", "intel", "furiosa", "rebellions", "tenstorrent")


def _device_rows(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if re.match(r"^\s+\d+\s+\S+", line)
            and re.search(r"\d+°C|N/A", line)]


def test_80x24_renders_scrolls_to_every_device_and_q_quits(tmux: Tmux) -> None:
    tmux.start(allsmi_exe() + ["--simulate", "mixed", "--interval", "0.5"], 80, 24)
    screen = tmux.wait_for(r"\d+°C")
    lines = screen.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    rows = _device_rows(screen)
    assert len(rows) >= 8, screen
    assert re.search(r"\d+%", rows[0]) and re.search(r"\d+/\d+W", rows[0]), rows[0]
    seen = set()
    for _ in range(12):  # page through the whole table
        seen.update(line.split()[1] for line in _device_rows(tmux.screen()))
        tmux.keys("PageDown")
        time.sleep(0.3)
    tmux.keys("End")
    last = tmux.wait_for(r"Blackhole|tenstor")
    seen.update(line.split()[1] for line in _device_rows(last))
    assert {v[:6] for v in VENDORS} <= {s[:6] for s in seen}, seen
    tmux.keys("q")
    deadline = time.monotonic() + 5
    while tmux.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not tmux.alive(), "q did not quit within 5 s"


def test_200x60_shows_every_device_at_once(tmux: Tmux) -> None:
    tmux.start(allsmi_exe() + ["--simulate", "mixed", "--interval", "0.5"], 200, 60)
    screen = tmux.wait_for(r"Blackhole.*\n(.*\n)*.*Blackhole")
    rows = _device_rows(screen)
    assert len(rows) == 34, screen  # every physical device (MIG slices have no index column)
    assert sum("MIG" in line for line in screen.splitlines()) >= 3
    for vendor in VENDORS:
        assert vendor in screen
    assert re.search(r"\d+\.\d GiB/\d+\.\d GiB", screen)
    tmux.keys("g")
    tmux.wait_for(r"Resource groups")
    tmux.keys("q")
    deadline = time.monotonic() + 5
    while tmux.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not tmux.alive()


def test_without_a_terminal_prints_a_table() -> None:
    result = run_allsmi("--simulate", "mixed")
    assert result.returncode == 0, result.stderr
    assert "NVIDIA H100 80GB HBM3" in result.stdout and "RBLN-CA12" in result.stdout
    assert "\x1b[" not in result.stdout


def test_bad_dashboard_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[dashboard]\nsort = "colour"\n')
    result = run_allsmi("--config", str(config), "--simulate", "mixed")
    assert result.returncode == 2
    assert "line 2" in result.stderr and "dashboard.sort" in result.stderr
    config.write_text('[dashboard]\nthemes = "x"\n')
    result = run_allsmi("view", "--config", str(config), "--simulate", "mixed")
    assert result.returncode == 2 and "dashboard.themes" in result.stderr


def test_view_argument_errors_exit_2(tmp_path: Path) -> None:
    result = run_allsmi("view", "--hostfile", str(tmp_path / "missing.txt"))
    assert result.returncode == 2 and "cannot read" in result.stderr
    result = run_allsmi("view", "--hosts", "http://127.0.0.1:1", "--prometheus", "http://127.0.0.1:2")
    assert result.returncode == 2 and "not both" in result.stderr
    result = run_allsmi("view", "--theme", "no-such-theme", "--simulate", "mixed")
    assert result.returncode == 2 and "unknown theme" in result.stderr

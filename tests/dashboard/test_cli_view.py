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


VENDORS = ("nvidia", "amd", "intel", "furiosa", "rebellions", "tenstorrent", "aws", "huawei",
           "google")


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
    last = tmux.wait_for(r"TPU|google")
    seen.update(line.split()[1] for line in _device_rows(last))
    assert {v[:4] for v in VENDORS} <= {s[:4] for s in seen}, seen  # (a cut name ends in …)
    tmux.keys("q")
    deadline = time.monotonic() + 5
    while tmux.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not tmux.alive(), "q did not quit within 5 s"


def test_200x60_shows_every_device_at_once(tmux: Tmux) -> None:
    tmux.start(allsmi_exe() + ["--simulate", "mixed", "--interval", "0.5"], 200, 60)
    screen = tmux.wait_for(r"Blackhole.*\n(.*\n)*.*Blackhole")
    rows = _device_rows(screen)
    assert len(rows) == 38, screen  # every physical device (MIG slices have no index column)
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


def test_a_host_never_reached_has_an_unknown_device_count_not_0() -> None:
    """``view --hosts`` through a pipe: the refused host's devices are N/A (nobody counted them),
    it exits 1; on screen its row says N/A too."""
    result = run_allsmi("view", "--hosts", "127.0.0.1:1", "--timeout", "5")
    assert result.returncode == 1, result.stderr
    header, row = result.stdout.splitlines()
    assert re.match(r"127\.0\.0\.1:1\s+down\s+N/A\s+N/A\s+N/A\s+\S", row), result.stdout


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


def test_plain_allsmi_takes_the_dashboard_options_of_view() -> None:
    """Plain ``allsmi`` opens the same dashboard as ``allsmi view`` and takes its options."""
    from allsmi.cli.group import cli
    from allsmi.cli.view import SOURCE_OPTIONS, view
    view_options = {o for p in view.params for o in p.opts} - set(SOURCE_OPTIONS)
    assert view_options <= {o for p in cli.params for o in p.opts}
    result = run_allsmi("--simulate", "mixed", "--theme", "textual-light", "--sort", "power")
    assert result.returncode == 0, result.stderr
    assert "RBLN-CA12" in result.stdout
    result = run_allsmi("--theme", "no-such-theme", "--simulate", "mixed")
    assert result.returncode == 2 and "unknown theme" in result.stderr
    result = run_allsmi("--sort", "colour", "--simulate", "mixed")
    assert result.returncode == 2 and "--sort" in result.stderr
    result = run_allsmi("--sort", "power", "snapshot", "--simulate", "mixed")
    assert result.returncode == 2 and "--sort applies to the dashboard" in result.stderr
    assert result.stdout == ""


def test_plain_allsmi_theme_and_sort_on_screen_with_partitions_counted(tmux: Tmux) -> None:
    tmux.start(allsmi_exe() + ["--simulate", "mixed", "--interval", "0.5", "--theme", "textual-light",
                               "--sort", "power"], 100, 30)
    screen = tmux.wait_for(r"sort power")
    assert "38 devices + 3 partitions" in tmux.wait_for(r"38 devices \+ 3 partitions"), screen
    tmux.keys("q")


def _pane(tmux: Tmux, fmt: str) -> str:
    return tmux.run("display-message", "-p", "-t", "t", fmt, check=False).stdout.strip()


def _wait_dead(tmux: Tmux, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _pane(tmux, "#{pane_dead}") == "1":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("signame", ["TERM", "HUP"])
def test_sigterm_and_sighup_restore_the_terminal(tmux: Tmux, tmp_path: Path, signame: str) -> None:
    import signal
    pidfile = tmp_path / "pid"
    command = shlex.join(allsmi_exe() + ["--simulate", "mixed", "--interval", "0.5"])
    log = tmp_path / "pane.log"
    # The app starts after a short sleep, so the pane's output is logged from its first byte.
    tmux.start(["sh", "-c", f"echo $$ > {shlex.quote(str(pidfile))}; sleep 1; exec {command}"], 100, 30)
    tmux.run("set-option", "-w", "-t", "t", "remain-on-exit", "on")
    tmux.run("pipe-pane", "-t", "t", "-o", f"cat >> {shlex.quote(str(log))}")
    tmux.wait_for(r"\d+°C")
    assert _pane(tmux, "#{alternate_on}") == "1"
    os.kill(int(pidfile.read_text()), getattr(signal, f"SIG{signame}"))
    assert _wait_dead(tmux), f"SIG{signame} did not end the dashboard"
    # Ended by exiting (tmux 3.3 does not always report the status in time), not by the signal:
    # 0 after SIGTERM, 129 after SIGHUP (the terminal is gone, as far as the dashboard knows).
    expected = "0" if signame == "TERM" else "129"
    assert _pane(tmux, "#{pane_dead_signal}") == "" and _pane(tmux, "#{pane_dead_status}") in (expected, "")
    assert _pane(tmux, "#{alternate_on}") == "0", "alternate screen left on"
    assert _pane(tmux, "#{mouse_any_flag}#{mouse_button_flag}#{mouse_standard_flag}") == "000", \
        "mouse reporting left on"
    out = log.read_bytes()
    for on, off, what in ((b"\x1b[?25l", b"\x1b[?25h", "cursor left hidden"),
                          (b"\x1b[?1049h", b"\x1b[?1049l", "alternate screen left on"),
                          (b"\x1b[?1000h", b"\x1b[?1000l", "mouse reporting left on")):
        assert on in out and out.rfind(off) > out.rfind(on), what


def test_q_exits_at_once_while_prometheus_trickles(tmux: Tmux, tmp_path: Path) -> None:
    import threading

    from .hostile import Server
    stop = threading.Event()
    server = Server(lambda h: h.trickle(stop, 0.5))
    try:
        pidfile = tmp_path / "pid"
        command = shlex.join(allsmi_exe() + ["view", "--prometheus", server.url, "--timeout", "60"])
        tmux.start(["sh", "-c", f"echo $$ > {shlex.quote(str(pidfile))}; exec {command}"], 120, 30)
        tmux.run("set-option", "-w", "-t", "t", "remain-on-exit", "on")
        tmux.wait_for(r"allsmi cluster")
        assert wait_for_requests(server)
        tmux.keys("q")
        assert _wait_dead(tmux, 10), "the process did not exit while a fetch was pending"
        assert _pane(tmux, "#{pane_dead_status}") in ("0", "")
    finally:
        stop.set()
        server.close()


def wait_for_requests(server: "object", timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.requests:  # type: ignore[attr-defined]
            return True
        time.sleep(0.1)
    return False


def test_term_dumb_gets_a_plain_table(tmux: Tmux, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    command = shlex.join(allsmi_exe() + ["--simulate", "mixed"])
    tmux.start(["sh", "-c", f"TERM=dumb {command} > /dev/tty 2>&1; echo EXIT=$?; sleep 30"], 200, 60)
    screen = tmux.wait_for(r"EXIT=\d+")
    assert "EXIT=0" in screen and "TERM=dumb" in screen
    assert "NVIDIA H100 80GB HBM3" in screen
    assert _pane(tmux, "#{alternate_on}") == "0"
    del out

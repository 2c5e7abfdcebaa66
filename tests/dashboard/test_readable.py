"""The dashboard readable at every width, with the names real fleets have (tests/dashboard/readable.py):
captured from a real terminal (tmux) at 80x24, 120x40 and 200x60.

* an index is never cut (1064 and 4064 stay apart);
* a long host name is cut with an ellipsis in the devices and cluster views, so state, age and
  the other columns stay on screen; a Prometheus ``instance`` of 109 characters too;
* a label with a newline or a carriage return leaves its row whole (a space instead);
* the processes panel keeps ``util`` and ``command`` before a long device name, and every cut
  text on screen ends with ``…``;
* a terminal too narrow for every device column says which are hidden.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from typing import Iterator

import pytest

from ..conftest import allsmi_exe, require_tool
from .closing import fake_prometheus
from .hostile import Handler, Server
from .readable import GROUP, HOSTNAME, INDEXES, NAMESPACE, POD, USER, hostile_body

pytestmark = pytest.mark.timeout(180)
SIZES = ((80, 24), (120, 40), (200, 60))
LONG_INSTANCE = "prometheus-scrape-target-" + "x" * 70 + ".example.com:9477"  # 109 characters


class Terminal:
    """A private tmux server running one command in a WxH window."""

    def __init__(self, tmux: str) -> None:
        self.tmux, self.name = tmux, f"allsmi-readable-{os.getpid()}-{time.monotonic_ns()}"

    def run(self, *args: str) -> str:
        return subprocess.run([self.tmux, "-L", self.name, *args], capture_output=True, text=True,
                              timeout=20).stdout

    def start(self, command: list[str], width: int, height: int) -> None:
        env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        subprocess.run([self.tmux, "-L", self.name, "-f", "/dev/null", "new-session", "-d", "-s", "t",
                        "-x", str(width), "-y", str(height), shlex.join(command)],
                       check=True, timeout=20, env={**env, "TERM": "xterm-256color",
                                                    "ALLSMI_CONFIG": "/dev/null"})

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "t", *keys)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.run("capture-pane", "-p", "-t", "t")
            if re.search(pattern, text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"{pattern!r} never appeared; screen was:\n{text}")

    def close(self) -> None:
        self.run("kill-server")


#: The devices view drawn: the last device row to its end (health last), the details panel
#: and the processes panel's header. A capture taken while the screen is still being drawn
#: holds half a row, or no panel yet.
ROW_4064_DRAWN = r"(?s)(?=.*4064[^\n]*\bok\b)(?=.*\bpid\b)(?=.*active 0% \(sm_active\))"


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal(require_tool("tmux", "tmux"))
    try:
        yield term
    finally:
        term.close()


@pytest.fixture(scope="module")
def hostile_host() -> Iterator[str]:
    body = hostile_body()
    server = Server(lambda h: Handler.send_body(h, body))
    try:
        yield server.url
    finally:
        server.close()


def _device_rows(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if re.match(r"^\s*\d{4}\s", line)]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_devices_view_with_hostile_names(terminal: Terminal, hostile_host: str,
                                         size: tuple[int, int]) -> None:
    width, height = size
    terminal.start(allsmi_exe() + ["view", "--hosts", hostile_host, "--interval", "0.5"], width, height)
    terminal.wait_for(r"Hosts|host")
    terminal.keys("d")
    screen = terminal.wait_for(ROW_4064_DRAWN)
    rows = _device_rows(screen)
    # Every index whole, each on its own row; no "…64".
    assert sorted(int(r.split()[0]) for r in rows) == list(INDEXES), screen
    assert "…64" not in screen
    for row in rows:
        # The row is whole: the newline in its label did not end it, the host is cut with an
        # ellipsis (or shown whole), the temperature and health at the end are there.
        assert re.search(r"\d+°C", row) and re.search(r"\bok\b", row), screen
        assert HOSTNAME in row or re.search(r"gpu-node\S*…", row), row
    # The label's line breaks are spaces in the details panel too.
    if height >= 40:
        assert "line one line two after-cr" in screen, screen
    # The processes panel: util and command come before a long device name.
    header = next(line for line in screen.splitlines() if re.search(r"\bpid\b", line))
    assert "util" in header and "command" in header, header
    assert re.search(r"python -m \S*…|END-OF-COMMAND", screen), screen
    # Every cut shows an ellipsis: a word on screen that is the start of a long name is the
    # whole name or ends with "…".
    for line in screen.splitlines():
        for token in line.split():
            stem = token.rstrip("…")
            for whole in (USER, GROUP, f"{NAMESPACE}/{POD}", HOSTNAME):
                if len(stem) >= 5 and whole.startswith(stem) and stem != whole:
                    assert token.endswith("…"), (token, line)
    if width == 80:
        assert "hidden: " in screen, screen
        footer = screen.rstrip("\n").splitlines()[-1]
        assert "Quit" in footer and footer.rstrip().endswith("…"), footer


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_cluster_view_caps_a_long_instance(terminal: Terminal, size: tuple[int, int]) -> None:
    width, height = size
    prom = fake_prometheus((LONG_INSTANCE, "node1:9477"))
    try:
        terminal.start(allsmi_exe() + ["view", "--prometheus", prom.url, "--interval", "0.5"],
                       width, height)
        screen = terminal.wait_for(r"node1:9477")
    finally:
        prom.close()
    # (at 80 columns cut to 12 cells, so that no column of numbers gives way)
    row = next(line for line in screen.splitlines() if re.search(r"\bprometheus-\S*…", line))
    assert "…" in row and LONG_INSTANCE not in row, row
    # state, age and devices stay on screen beside it
    assert re.search(r"…\s+ok\s+\d+ s\s+\d+", row), row


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_details_of_a_shared_device_show_every_holder_and_share(
        terminal: Terminal, hostile_host: str, size: tuple[int, int]) -> None:
    width, height = size
    terminal.start(allsmi_exe() + ["view", "--hosts", hostile_host, "--interval", "0.5"], width, height)
    terminal.wait_for(r"host")
    terminal.keys("d")
    terminal.wait_for(r"4064")
    terminal.keys("End")
    screen = terminal.wait_for(r"shared by 6 holders")
    assert "allocated by dec" in screen, screen
    if height >= 40:
        # Every holder with its allocated and used share (those below the panel's edge are
        # reached with the wheel: test_readable_keys.py), the unclaimed rest labelled.
        shares = re.findall(r"alloc\s+12\.5%\s+used\s+([\d.]+)%", screen)
        assert len(shares) >= 4, screen
        # (the used shares are the holders' util over the device's: 5/45 to 10/45)
        assert [float(s) for s in shares] == pytest.approx([100 * (5 + j) / 45 for j in range(len(shares))],
                                                           abs=0.06)
    if width >= 200:
        # The per-process util beside the holder it belongs to.
        assert re.search(r"pod tenant-00-pod\s+job 700.*util 41000 5%", screen), screen


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_activity_beside_utilization_and_what_holders_wait_on(
        terminal: Terminal, hostile_host: str, size: tuple[int, int]) -> None:
    """The busy-looking GPU (2064: 100 % utilization, 20 % of its SMs active) shows both figures,
    the activity with its source; each device says what its holders waited on (the costliest
    reason first), and the details panel gives each holder's reason with its evidence."""
    width, height = size
    terminal.start(allsmi_exe() + ["view", "--hosts", hostile_host, "--interval", "0.5"], width, height)
    terminal.wait_for(r"host")
    terminal.keys("d")
    screen = terminal.wait_for(ROW_4064_DRAWN)
    rows = {int(r.split()[0]): r for r in _device_rows(screen)}
    if width >= 120:
        header = next(line for line in screen.splitlines() if line.lstrip().startswith("#"))
        assert re.search(r"util\s+active\s+waiting", header), header
        assert re.search(r"100%\s+20% sm\s+computing", rows[2064]), rows[2064]
        assert re.search(r"N/A\s+input", rows[3064]), rows[3064]  # not reported: N/A, never 0
        assert re.search(r"35% sm\s+host \+5", rows[4064]), rows[4064]  # the costliest of 6
        assert re.search(r"0% sm\s+nothing", rows[1064]), rows[1064]
    else:
        assert "active" in screen and "waiting" in screen, screen  # named among the hidden columns
    # The details: the first device (1064) is selected; 3064 two rows down.
    assert re.search(r"active 0% \(sm_active\)", screen), screen
    if height >= 40:  # (at 24 rows the details panel ends before the holders' lines)
        assert re.search(r"waiting nothing: no process of the ho", screen), screen
    terminal.keys("Down", "Down")
    if height < 40:  # the holders' lines are below the panel's fold at 24 rows
        return
    screen = terminal.wait_for(r"waiting input: 3 of 4 ")
    if width >= 200:
        assert "waiting input: 3 of 4 processes in I/O wait, 480 MB/s read" in screen, screen

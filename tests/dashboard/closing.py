"""Closing the terminal under a running dashboard: terminals to close, fake fleets to watch.

Shared by ``tests/dashboard/test_terminal_close.py`` (a few rounds a view) and
``benchmarks/dashboard_hangup.py`` (20 rounds a view). A terminal runs the installed
``allsmi`` and is closed in one of :data:`CLOSE_METHODS`:

* ``kill-server``: the whole tmux server goes (every window closes at once);
* ``kill-session``: the tmux session is killed (``tmux kill-session``);
* ``kill-window``: the window is closed (``tmux kill-window``), as a terminal tab is;
* ``shell``: an interactive ``bash`` runs ``allsmi`` and the session is killed (a closed
  terminal emulator window, a dropped SSH session: the shell passes the hang-up on);
* ``pty-close``: no tmux; the dashboard runs on a pseudo-terminal whose controlling side is
  simply closed, as a terminal emulator does when its window is closed (the kernel hangs
  the terminal up); nobody reads the screen output in the meantime but a drain thread.

Everything listens on loopback only.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import signal
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable

from allsmi.exporter.exposition import render_snapshot
from allsmi.output import to_json

from ..conftest import allsmi_exe
from .fixtures import simulated_snapshots
from .hostile import Handler, Server

CLOSE_METHODS = ("kill-server", "kill-session", "kill-window", "shell", "pty-close")
#: Keys sent right before the terminal closes: moves, sorts, panels, zoom.
KEYS_IN_FLIGHT = ("j", "k", "p", "j", "z", "z", "k", "s", "p", "Down", "Up")
_PTY_KEYS = {"Down": "\x1b[B", "Up": "\x1b[A", "Enter": "\r", "Escape": "\x1b"}
_READY = "quit"  # the footer is drawn


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its reaper has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        found.append(here)
        try:
            tasks = os.listdir(f"/proc/{here}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                todo.extend(int(c) for c in Path(f"/proc/{here}/task/{task}/children").read_text().split())
            except OSError:
                pass  # the task ended while being listed: it has no children left to leave behind
    return found


def wait_gone(pids: list[int], timeout: float) -> float | None:
    """Seconds until every one of ``pids`` ended, ``None`` when one still runs after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not any(running(p) for p in pids):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "NO_COLOR"}, "TERM": "xterm-256color"}


class TmuxTerminal:
    """One private tmux server with one window running ``allsmi`` (its pid written to a file)."""

    def __init__(self, tmux: str, tmp: Path, name: str, method: str = "kill-server") -> None:
        self.tmux, self.tmp, self.name, self.method = tmux, tmp, name, method
        self.pidfile = tmp / f"{name}.pid"
        self.pid: int | None = None

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.tmux, "-L", self.name, *args], capture_output=True, text=True,
                              timeout=20, check=check)

    def start(self, args: list[str], *, rcfile: Path | None = None) -> int:
        """Start ``allsmi args``; its pid once the dashboard is drawn."""
        pidfile = shlex.quote(str(self.pidfile))
        inner = f"echo $$ > {pidfile}; exec {shlex.join(allsmi_exe() + args)}"
        if rcfile is not None:  # not exec'd: the wrapper records the exit status
            inner = (f"echo $$ > {pidfile}; {shlex.join(allsmi_exe() + args)}; "
                     f"echo $? > {shlex.quote(str(rcfile))}; sleep 30")
        command = ["sh", "-c", inner]
        shell = self.method == "shell"
        first = ["bash", "--norc", "--noprofile", "-i"] if shell else command
        subprocess.run([self.tmux, "-L", self.name, "-f", "/dev/null", "new-session", "-d", "-s", "t",
                        "-x", "120", "-y", "40", shlex.join(first)], check=True, timeout=20, env=_env())
        if shell:  # an interactive shell in between, as in a terminal emulator or over SSH
            self.run("send-keys", "-t", "t", shlex.join(command), "Enter")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = self.pidfile.read_text().strip() if self.pidfile.exists() else ""
            if text and _READY in self.screen():
                self.pid = int(text) if rcfile is None else _only_child(int(text))
                return self.pid
            time.sleep(0.1)
        raise AssertionError("the dashboard never came up:\n" + self.screen())

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "t").stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "t", *keys)

    def close(self) -> None:
        if self.method in ("kill-session", "shell"):
            self.run("kill-session", "-t", "t")
        elif self.method == "kill-window":
            self.run("kill-window", "-t", "t")
        self.run("kill-server")  # what is left (nothing after the above: the last window closed)

    def cleanup(self) -> None:
        self.run("kill-server")
        if self.pid is not None and running(self.pid):
            os.kill(self.pid, signal.SIGKILL)


class PtyTerminal:
    """``allsmi`` on a pseudo-terminal of this process; :meth:`close` closes its controlling side."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.pid: int | None = None
        self._seen = bytearray()
        self._lock = threading.Lock()
        self.ready = False
        """Whether the footer has been drawn."""

    def start(self, args: list[str]) -> int:
        argv = allsmi_exe() + args
        env = _env()
        pid, fd = pty.fork()
        if pid == 0:  # the child: a new session whose controlling terminal is the pty
            try:
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        _set_size(fd, 40, 120)
        threading.Thread(target=self._drain, args=(fd,), daemon=True).start()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.ready:
                return pid
            time.sleep(0.1)
        raise AssertionError("the dashboard never came up:\n" + self.screen()[-2000:])

    def _drain(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:  # closed by close(), or the child hung the terminal up: done
                return
            if not data:
                return
            with self._lock:
                self._seen += data
                # The footer is drawn once (lines are repainted only when they change), so it
                # is looked for as it arrives, not in the kept tail.
                if not self.ready and _READY in self._plain(self._seen):
                    self.ready = True
                del self._seen[:-20000]

    @staticmethod
    def _plain(raw: bytes | bytearray) -> str:
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode("utf-8", "replace"))

    def screen(self) -> str:
        with self._lock:
            return self._plain(self._seen)

    def keys(self, *keys: str) -> None:
        assert self.fd is not None
        os.write(self.fd, "".join(_PTY_KEYS.get(k, k) for k in keys).encode())

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def cleanup(self) -> None:
        self.close()
        if self.pid is not None:
            if running(self.pid):
                os.kill(self.pid, signal.SIGKILL)
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass  # already reaped


def _set_size(fd: int, rows: int, cols: int) -> None:
    import fcntl
    import struct
    import termios
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _only_child(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def make_terminal(method: str, tmux: str, tmp: Path) -> TmuxTerminal | PtyTerminal:
    if method == "pty-close":
        return PtyTerminal()
    return TmuxTerminal(tmux, tmp, f"allsmi-close-{os.getpid()}-{time.monotonic_ns()}", method)


def close_with_keys_in_flight(term: TmuxTerminal | PtyTerminal, args: list[str], view_keys: tuple[str, ...],
                              timeout: float = 2.0) -> tuple[float | None, list[int]]:
    """Start the dashboard, open a view, send :data:`KEYS_IN_FLIGHT` and close the terminal at
    once; seconds until every process of the dashboard ended (``None``: not within ``timeout``)
    and the processes still running then (killed afterwards)."""
    pid = term.start(args)
    if view_keys:
        term.keys(*view_keys)
    term.keys(*KEYS_IN_FLIGHT)
    tree = descendants(pid)
    term.close()
    took = wait_gone(tree, timeout)
    left = [p for p in tree if running(p)]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return took, left


# -- fake fleets ------------------------------------------------------------------------

def fake_host() -> Server:
    """One node's ``/api/v1/snapshot``, the simulated mixed node."""
    body = to_json(simulated_snapshots(1)[0]).encode()
    return Server(lambda h: Handler.send_body(h, body))


_NAMES = re.compile(r'__name__=~?"([^"]+)"')
_INSTANCE = re.compile(r'instance=~"([^"]+)"')


def fake_prometheus(instances: tuple[str, ...] = ("node0:9477", "node1:9477")) -> Server:
    """A Prometheus whose instant queries answer the simulated mixed node's series, exported
    by each of ``instances``: enough for the fleet view, the node view and the idle view."""
    from prometheus_client.parser import text_string_to_metric_families
    snap = simulated_snapshots(1)[0]
    series: list[dict[str, str]] = []
    values: list[str] = []
    for family in text_string_to_metric_families(render_snapshot(snap)):
        for sample in family.samples:
            for k, instance in enumerate(instances):
                labels = {**sample.labels, "__name__": sample.name, "instance": instance, "job": "allsmi"}
                for key in ("uuid", "parent_uuid"):  # each node its own devices
                    if labels.get(key):
                        labels[key] = f"{labels[key]}-n{k}"
                series.append(labels)
                values.append(repr(float(sample.value)))
    devices = str(len(snap.devices))

    def respond(handler: Any) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("query", [""])[0]
        at = time.time()
        result: list[dict[str, Any]] = []
        if query == "count by (instance) (allsmi_device_info)":
            result = [{"metric": {"instance": i}, "value": [at, devices]} for i in instances]
        elif (names := _NAMES.search(query)) and not query.startswith(("label_replace", "count")):
            wanted = set(names.group(1).split("|"))
            only = _INSTANCE.search(query)
            pattern = re.compile(only.group(1)) if only else None
            negate = "instance!~" in query
            for labels, value in zip(series, values):
                if labels["__name__"] not in wanted:
                    continue
                if pattern is not None and bool(pattern.fullmatch(labels["instance"])) == negate:
                    continue
                result.append({"metric": labels, "value": [at, value]})
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        Handler.send_body(handler, json.dumps(body).encode())
    return Server(respond)


#: The dashboards and their views: (mode, view) -> (CLI args after the fleet's URL, keys
#: that open the view). ``{url}`` is the fake host's or fake Prometheus' address.
VIEWS: dict[tuple[str, str], tuple[list[str], tuple[str, ...]]] = {
    ("node", "devices"): (["--simulate", "mixed"], ()),
    ("node", "groups"): (["--simulate", "mixed"], ("g",)),
    ("node", "idle"): (["--simulate", "mixed"], ("i",)),
    ("node", "processes"): (["--simulate", "mixed"], ("p",)),
    ("node", "help"): (["--simulate", "mixed"], ("?",)),
    ("hosts", "cluster"): (["view", "--hosts", "{url}"], ("c",)),
    ("hosts", "node"): (["view", "--hosts", "{url}"], ("c", "Enter")),
    ("hosts", "devices"): (["view", "--hosts", "{url}"], ("d",)),
    ("hosts", "groups"): (["view", "--hosts", "{url}"], ("g",)),
    ("hosts", "idle"): (["view", "--hosts", "{url}"], ("i",)),
    ("hosts", "processes"): (["view", "--hosts", "{url}"], ("d", "p")),
    ("prometheus", "cluster"): (["view", "--prometheus", "{url}"], ("c",)),
    ("prometheus", "node"): (["view", "--prometheus", "{url}"], ("c", "Enter")),
    ("prometheus", "devices"): (["view", "--prometheus", "{url}"], ("d",)),
    ("prometheus", "groups"): (["view", "--prometheus", "{url}"], ("g",)),
    ("prometheus", "idle"): (["view", "--prometheus", "{url}"], ("i",)),
    ("prometheus", "processes"): (["view", "--prometheus", "{url}"], ("d", "p")),
}


def view_args(mode: str, view: str, urls: Callable[[str], str], interval: float = 0.2) -> tuple[list[str], tuple[str, ...]]:
    args, keys = VIEWS[(mode, view)]
    url = urls(mode) if mode != "node" else ""
    return [a.replace("{url}", url) for a in args] + ["--interval", f"{interval:g}"], keys

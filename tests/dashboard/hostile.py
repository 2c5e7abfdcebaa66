"""Hostile inputs for the dashboard tests: a markup/escape corpus and HTTP servers that misbehave."""

from __future__ import annotations

import http.server
import json
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Iterator

from allsmi.schema import BackendStatus, ProcessSample, Snapshot

#: Strings that must be shown literally: Rich markup, OSC title/hyperlink, CSI, C1, bell.
CORPUS = (
    "[/]", "node[/]", "[bold red]x[/]", "[link=https://evil.example]click[/link]",
    "\x1b]0;pwned\x07", "\x1b[2J", "\x1b[31mred", "\x9b31m", "\x1b]8;;https://evil.example\x1b\\a",
    "python x.py [/] --oops",
)
#: The literal pieces that must appear on screen (markup not interpreted).
LITERALS = ("[/]", "[bold red]x[/]", "[link=https://evil.example]click[/link]")


def hostile_snapshot(base: Snapshot, tag: str = "") -> Snapshot:
    """``base`` with every displayed text field holding a piece of :data:`CORPUS`."""
    devices = []
    for i, dev in enumerate(base.devices):
        bad = CORPUS[i % len(CORPUS)]
        procs = (ProcessSample(pid=1000 + i, user=f"u{bad}", command=f"python x.py [/] --oops {bad}",
                               memory_bytes=1 << 30),)
        devices.append(replace(dev, name=f"{dev.name}{bad}", bus_id=f"{dev.bus_id}{bad}",
                               driver_version=f"d{bad}", firmware_version=f"f{bad}",
                               resource_group=f"g[bold red]x[/]{i % 3}",
                               labels={"team": f"[link=https://evil.example]click[/link]{bad}"},
                               processes=procs if dev.processes is not None else None))
    backends = tuple(BackendStatus(name=f"{b.name}[/]", status="error", message=f"boom {CORPUS[4]}")
                     for b in base.backends[:1])
    return replace(base, host=replace(base.host, hostname=f"node[/]{tag}\x1b]0;title\x07"),
                   devices=tuple(devices), backends=backends)


class Handler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with ``respond(handler)``; records what it was asked."""

    respond: Callable[["Handler"], None]
    requests: list[dict[str, str]]

    def do_GET(self) -> None:  # noqa: N802
        type(self).requests.append({"path": self.path, **{k: v for k, v in self.headers.items()}})
        try:
            type(self).respond(self)  # type: ignore[misc]
        except (BrokenPipeError, ConnectionResetError):
            pass

    def send_body(self, body: bytes, status: int = 200, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def trickle(self, stop: threading.Event, step: float = 0.2) -> None:
        """Headers at once, then one byte every ``step`` seconds until ``stop``."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000000")
        self.end_headers()
        self.wfile.write(b"{")
        while not stop.wait(step):
            self.wfile.write(b" ")
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


class Server:
    """A threaded HTTP server on loopback answering with ``respond``."""

    def __init__(self, respond: Callable[[Handler], None]) -> None:
        handler = type("H", (Handler,), {"respond": staticmethod(respond), "requests": []})
        self.handler = handler
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def requests(self) -> list[dict[str, str]]:
        return self.handler.requests

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serving(respond: Callable[[Handler], None]) -> Iterator[Server]:
    server = Server(respond)
    try:
        yield server
    finally:
        server.close()


def json_body(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


def wait_until(condition: Callable[[], bool], timeout: float = 20.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return False



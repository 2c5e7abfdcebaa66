"""The cluster view against real ``allsmi serve`` processes and local HTTP servers on loopback."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources.cluster import (ClusterSource, Endpoint, FetchError, HostfileError, fetch_snapshot,
                                      parse_endpoint, read_hostfile)
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.output import to_json
from allsmi.schema import Snapshot

from ..conftest import allsmi_exe
from ..prometheus_server import free_port
from .conftest import screen_text

pytestmark = pytest.mark.timeout(120)


def wait_until(condition, timeout: float = 20.0, step: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return False


class ServeProcess:
    """``allsmi serve --simulate mixed`` on a free loopback port; always reaped."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            allsmi_exe() + ["serve", "--simulate", "mixed", "--listen", f"127.0.0.1:{self.port}",
                            "--interval", "0.5"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)

    def ready(self) -> bool:
        try:
            fetch_snapshot(parse_endpoint(self.url), 1.0)
            return True
        except FetchError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def two_servers() -> Iterator[list[ServeProcess]]:
    servers = [ServeProcess(), ServeProcess()]
    try:
        for server in servers:
            assert wait_until(server.ready, 30), "allsmi serve did not come up"
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.mark.alone
async def test_cluster_view_survives_a_host_going_away(two_servers: list[ServeProcess]) -> None:
    urls = [s.url for s in two_servers]
    source = ClusterSource(urls, interval=0.5, timeout=1.0, max_backoff=2.0)
    app = DashboardApp(source)
    async with app.run_test(size=(160, 45)) as pilot:
        async def settle(check, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                app.poll()
                if check():
                    return True
                await pilot.pause(0.1)
            return False

        assert await settle(lambda: all(h.snapshot is not None for h in app.hosts))
        hosts = app.query_one("#host-table", DiffTable)
        assert len(hosts.row_keys) == 2
        text = screen_text(app)
        physical = sum(1 for h in app.hosts for d in h.snapshot.devices if d.parent is None)
        assert "hosts 2/2 up" in text and f"{physical} devices" in text
        # Each host's devices are its own (same simulated ids on both hosts must not merge).
        assert len(app.all_refs()) == 2 * len(app.hosts[0].snapshot.devices)

        two_servers[1].stop()
        gone = f"host:127.0.0.1:{two_servers[1].port}"
        assert await settle(lambda: app.hosts[1].error is not None)
        await pilot.pause()
        assert str(hosts.get_row(gone)[1]) == "down" and "unreachable" in str(hosts.get_row(gone)[-1])
        assert "hosts 1/2 up" in screen_text(app)
        # The screen keeps answering while the dead host is retried in the background.
        started = time.monotonic()
        await pilot.press("g")
        assert app.view == "groups"
        await pilot.press("c")
        assert app.view == "cluster"
        assert time.monotonic() - started < 2.0
        # The live host keeps updating.
        first = app.hosts[0].snapshot
        assert await settle(lambda: app.hosts[0].snapshot is not first)
        # Drill down to the dead host: its last devices are shown as stale.
        hosts.focus()
        await pilot.press("down", "enter")
        assert app.view == "devices" and app.filter.host == f"127.0.0.1:{two_servers[1].port}"
        assert str(app.device_table.get_cell(app.shown[0].key, "health")) == "stale"
        await pilot.press("q")
    assert not app.is_running


class _Handler(http.server.BaseHTTPRequestHandler):
    body: bytes = b""
    status = 200
    gzip_it = False
    delay = 0.0
    need_auth: str | None = None
    hits = 0

    def do_GET(self) -> None:  # noqa: N802
        type(self).hits += 1
        time.sleep(self.delay)
        if self.need_auth and self.headers.get("Authorization") != self.need_auth:
            self.send_response(401)
            self.end_headers()
            return
        body = gzip.compress(self.body) if self.gzip_it else self.body
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        if self.gzip_it:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tiny_server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_reads_plain_and_gzip_and_names_failures(tiny_server, sim_snapshots: list[Snapshot]) -> None:  # type: ignore[no-untyped-def]
    url, handler = tiny_server
    handler.body = to_json(sim_snapshots[0]).encode()
    snap = fetch_snapshot(parse_endpoint(url), 2.0)
    assert snap.devices == sim_snapshots[0].devices
    handler.gzip_it = True
    assert fetch_snapshot(parse_endpoint(url + "/api/v1/snapshot"), 2.0).devices == snap.devices
    handler.gzip_it = False
    handler.status = 503
    with pytest.raises(FetchError, match="not ready"):
        fetch_snapshot(parse_endpoint(url), 2.0)
    handler.status, handler.body = 200, b"<html>"
    with pytest.raises(FetchError, match="not JSON"):
        fetch_snapshot(parse_endpoint(url), 2.0)
    handler.body = json.dumps({"schema_version": 99}).encode()
    with pytest.raises(FetchError, match="not a snapshot"):
        fetch_snapshot(parse_endpoint(url), 2.0)
    handler.body = to_json(sim_snapshots[0]).encode()
    handler.delay = 1.5
    with pytest.raises(FetchError, match="timed out"):
        fetch_snapshot(parse_endpoint(url), 0.3)
    handler.delay = 0.0
    handler.need_auth = "Basic YWxpY2U6czNjcmV0"  # alice:s3cret
    with pytest.raises(FetchError, match="401"):
        fetch_snapshot(parse_endpoint(url), 2.0)
    authed = url.replace("http://", "http://alice:s3cret@")
    assert fetch_snapshot(parse_endpoint(authed), 2.0).devices == snap.devices
    with pytest.raises(FetchError, match="refused"):
        fetch_snapshot(parse_endpoint(f"127.0.0.1:{free_port()}"), 2.0)


def test_backoff_doubles_up_to_the_cap_and_resets_on_success() -> None:
    now = [100.0]
    failing = [True]

    def fetch(endpoint: Endpoint, timeout: float) -> Snapshot:
        if failing[0]:
            raise FetchError("connection refused")
        from .fixtures import simulated_snapshots
        return simulated_snapshots(1)[0]

    source = ClusterSource(["127.0.0.1:1"], interval=1.0, max_backoff=5.0, clock=lambda: now[0],
                           fetch=fetch)
    delays = []
    for _ in range(5):
        source.refresh(lambda: False)
        (host,) = source.hosts()
        assert host.error == "connection refused" and host.snapshot is None
        delays.append(host.retry_at - now[0])
        source.refresh(lambda: False)  # not due yet: no new attempt
        assert source.hosts()[0].retry_at == host.retry_at
        now[0] = host.retry_at
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    failing[0] = False
    source.refresh(lambda: False)
    (host,) = source.hosts()
    assert host.error is None and host.retry_at is None and host.snapshot is not None
    assert host.name == "node-a" and host.key == "127.0.0.1:1"


def test_concurrency_is_bounded_and_every_host_is_served() -> None:
    running = [0]
    peak = [0]
    lock = threading.Lock()
    done: set[str] = set()

    def fetch(endpoint: Endpoint, timeout: float) -> Snapshot:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
            done.add(endpoint.key)
        raise FetchError("down")

    urls = [f"10.0.0.{i}:9477" for i in range(1, 21)]
    source = ClusterSource(urls, interval=0.1, timeout=1.0, max_concurrency=4, fetch=fetch)
    source.refresh(lambda: False)
    assert wait_until(lambda: len(done) == 20, 10)
    assert peak[0] <= 4 and source.in_flight_peak <= 4
    assert peak[0] == 4, "the bound should be used, not serialize everything"


def test_refresh_returns_promptly_when_cancelled() -> None:
    def fetch(endpoint: Endpoint, timeout: float) -> Snapshot:
        time.sleep(5)
        raise FetchError("slow")

    source = ClusterSource(["10.0.0.1:9477"], interval=1.0, timeout=5.0, fetch=fetch)
    started = time.monotonic()
    source.refresh(lambda: time.monotonic() - started > 0.2)
    assert time.monotonic() - started < 1.0
    assert source.hosts()[0].error is None  # still in flight, not yet failed


def test_endpoints_and_hostfiles(tmp_path: Path) -> None:
    assert parse_endpoint("gpu1:9477") == Endpoint("http://gpu1:9477", "gpu1:9477")
    assert parse_endpoint("https://gpu1:9477/allsmi/api/v1/snapshot").url == "https://gpu1:9477/allsmi"
    assert parse_endpoint("http://[::1]:9477").key == "[::1]:9477"
    assert parse_endpoint("http://u:p%40ss@h:1").authorization == "Basic dTpwQHNz"
    for bad in ("ftp://x:1", "http://", "h:notaport"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("# rack 1\nhttp://gpu1:9477\n\n gpu2:9477  # spare\n")
    assert read_hostfile(hostfile) == ["http://gpu1:9477", "gpu2:9477"]
    hostfile.write_text("gpu1:9477\nftp://nope\n")
    with pytest.raises(HostfileError, match="line 2"):
        read_hostfile(hostfile)
    hostfile.write_text("# nothing\n")
    with pytest.raises(HostfileError, match="no hosts"):
        read_hostfile(hostfile)
    with pytest.raises(HostfileError, match="cannot read"):
        read_hostfile(tmp_path / "missing.txt")

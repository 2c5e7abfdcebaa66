"""Slow and hostile clients against ``allsmi serve``, over real sockets.

The scraper and the attackers share 127.0.0.1, as they would behind a NAT:
a per-address bound alone would lock the scraper out, so these tests check
that a client sending a complete request promptly is served anyway.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from typing import Iterator

import pytest

from ..conftest import cpu_to_itself
from .server import Serve, fetch, serving
from .support import values

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200


class SlowLoris:
    """``count`` connections, each sending one more byte of a never-ending request head every
    ``every`` seconds; a connection the server closes is opened again (a persistent attacker)."""

    def __init__(self, port: int, count: int = 100, every: float = 2.0) -> None:
        self.port, self.count, self.every = port, count, every
        self.socks: list[socket.socket | None] = [None] * count
        self.sent = [0] * count
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, i: int) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            sock.setblocking(False)
        except OSError:
            sock = None
        self.socks[i], self.sent[i] = sock, 0

    def start(self) -> "SlowLoris":
        for i in range(self.count):
            self._open(i)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every / self.count):
            for i in range(self.count):
                if self._stop.is_set():
                    return
                sock = self.socks[i]
                try:
                    if sock is None:
                        raise OSError
                    sock.send(REQUEST[self.sent[i] % len(REQUEST):][:1])
                    self.sent[i] += 1
                except OSError:
                    if sock is not None:
                        sock.close()
                    self.reconnects += 1
                    self._open(i)
                time.sleep(self.every / self.count)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.socks:
            if sock is not None:
                sock.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Serve]:
    yield from serving(["--simulate", "mixed", "--interval", "0.5"])


@pytest.mark.alone(whole=False)  # (among the first tests; the CPU held alone while timed)
def test_scrapes_answer_fast_while_100_slow_loris_connections_are_open(server: Serve) -> None:
    server.wait_ready()
    attack = SlowLoris(server.port, count=100, every=2.0).start()
    try:
        # Past the 5 s head deadline the attackers are cut and come back (never, without it).
        deadline = time.monotonic() + 20
        while attack.reconnects < 50 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert attack.reconnects >= 50, "slow heads must be cut at the whole-request deadline"
        with cpu_to_itself():  # (the scrapes' latency, not the wait above, needs the CPU alone)
            for _ in range(10):
                started = time.perf_counter()
                resp = fetch(server.base + "/metrics", timeout=10)
                elapsed = time.perf_counter() - started
                assert resp.status == 200, resp.body[:200]
                assert values(resp.text, "allsmi_device_info")
                assert elapsed < 1.0, f"scrape took {elapsed:.2f} s with 100 slow-loris connections"
                time.sleep(0.2)
    finally:
        attack.stop()


def test_a_dribbling_request_head_is_cut_at_the_whole_request_deadline(server: Serve) -> None:
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", server.port), timeout=1) as sock:
        started = time.monotonic()
        closed_after = None
        for byte in REQUEST:  # one byte every 0.5 s: each read is quick, the whole is not
            try:
                sock.send(bytes([byte]))
                if sock.recv(1024) == b"":
                    closed_after = time.monotonic() - started
                    break
            except socket.timeout:
                continue
            except OSError:
                closed_after = time.monotonic() - started
                break
            time.sleep(0.5)
            if time.monotonic() - started > 30:
                break
    assert closed_after is not None, "the server kept a dribbling connection open"
    assert 4.0 <= closed_after <= 10.0, closed_after


def test_the_oldest_head_reader_of_an_address_is_evicted_for_a_new_one(server: Serve) -> None:
    server.wait_ready()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
    try:
        # More connections from one address than it may hold: the oldest were closed.
        time.sleep(0.5)
        idle[0].settimeout(3)
        assert idle[0].recv(1) == b""
        idle[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        idle[-1].settimeout(5)
        assert idle[-1].recv(1024).startswith(b"HTTP/1.1 200")
        assert fetch(server.base + "/metrics").status == 200
    finally:
        for sock in idle:
            sock.close()


def test_keep_alive_and_pipelined_requests(server: Serve) -> None:
    server.wait_ready()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        for _ in range(3):
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read() == b"OK\n"
    finally:
        conn.close()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 404" in data


def test_oversized_head_and_garbage_get_errors_not_a_hang(server: Serve) -> None:
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        try:
            sock.sendall(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 100_000)
        except OSError:
            pass
        assert sock.recv(1024).startswith(b"HTTP/1.1 431")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 400")
    assert fetch(server.base + "/healthz").status == 200

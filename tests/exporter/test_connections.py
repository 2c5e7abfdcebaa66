"""The connection loop's bounds with small limits, over real loopback sockets."""

from __future__ import annotations

import errno
import resource
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from allsmi.exporter.authqueue import FairQueue
from allsmi.exporter.bounds import max_open_for_fd_limit
from allsmi.exporter.connections import ConnectionLoop, Limits, Reply

BIG = b"x" * (64 << 20)  # more than loopback socket buffers hold: the write stays pending


def _reply(head: bytes, client: Any, fast: bool) -> Reply | None:
    body = BIG if head.startswith(b"GET /big") else b"ok"
    if head.startswith(b"GET /slow") and fast:
        return None  # answered on the pool
    return Reply([b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body), body], False)


@pytest.fixture
def loop_factory() -> Iterator[Callable[[Limits], tuple[ConnectionLoop, int]]]:
    loops: list[ConnectionLoop] = []

    def make(limits: Limits) -> tuple[ConnectionLoop, int]:
        listener = socket.create_server(("127.0.0.1", 0))
        loop = ConnectionLoop(listener, _reply, limits=limits)
        threading.Thread(target=loop.serve_forever, daemon=True).start()
        loops.append(loop)
        return loop, listener.getsockname()[1]

    yield make
    for loop in loops:
        loop.stop()
        loop.listener.close()
        loop.close()


def _get(port: int, path: str = "/", timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data or not (data.endswith(b"ok") or b"503" in data):
            chunk = sock.recv(1024)
            if not chunk:
                break
            data += chunk
        return data


def _wait(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_whole_head_deadline_and_idle_keep_alive(loop_factory: Any) -> None:
    loop, port = loop_factory(Limits(header_timeout=0.5, idle_timeout=1.0))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(b"GET / HTT")
        assert sock.recv(10) == b""
        assert 0.4 <= time.monotonic() - started < 3
    assert loop.timed_out == 1
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert sock.recv(1024).endswith(b"ok")
        started = time.monotonic()
        assert sock.recv(10) == b""  # kept alive, then closed when idle
        assert 0.8 <= time.monotonic() - started < 3


def test_empty_lines_alone_are_cut_at_the_whole_request_deadline(loop_factory: Any) -> None:
    """Empty lines before a request line are ignored (RFC 9112 section 2.2), not answered, and
    dribbling them extends nothing."""
    loop, port = loop_factory(Limits(header_timeout=0.5))
    with socket.create_connection(("127.0.0.1", port), timeout=0.1) as sock:
        started, received, closed_after = time.monotonic(), b"", None
        while closed_after is None and time.monotonic() - started < 3:
            try:
                sock.sendall(b"\r\n")
                chunk = sock.recv(1024)
            except socket.timeout:
                continue
            except OSError:
                chunk = b""
            received += chunk
            if not chunk:
                closed_after = time.monotonic() - started
    assert received == b"" and closed_after is not None and 0.4 <= closed_after < 2.5, \
        (received, closed_after)
    assert loop.timed_out == 1


def test_an_empty_line_on_a_kept_alive_connection_does_not_start_a_request(
        loop_factory: Any) -> None:
    """A CRLF after a request leaves the connection waiting for the next one: it is not cut at
    the head deadline, and the request that follows is answered."""
    loop, port = loop_factory(Limits(header_timeout=0.3, idle_timeout=2.0))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert sock.recv(1024).endswith(b"ok")
        sock.sendall(b"\r\n")
        time.sleep(0.6)  # past the head deadline, well within the idle one
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert sock.recv(1024).endswith(b"ok")
    assert loop.timed_out == 0


def test_requests_needing_the_pool_are_answered(loop_factory: Any) -> None:
    _, port = loop_factory(Limits())
    assert _get(port, "/slow").endswith(b"ok")


def test_at_max_open_the_longest_stalled_writer_makes_room_for_a_new_connection(
        loop_factory: Any) -> None:
    # Clients that never read their response must not lock others out (issue 19, item 3).
    loop, port = loop_factory(Limits(max_open=3, write_timeout=30))
    stuck = []
    for _ in range(3):  # each asks for 64 MiB and reads none of it
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET /big HTTP/1.1\r\n\r\n")
        stuck.append(sock)
        _wait(lambda: loop.open_connections().get("writing") == len(stuck))
    try:
        assert _get(port).endswith(b"ok")
        assert loop.evicted == 1 and loop.refused == 0
        _wait(lambda: loop.open_connections().get("writing") == 2)
    finally:
        for sock in stuck:
            sock.close()


def test_at_max_open_a_head_reader_is_evicted_for_a_new_connection(loop_factory: Any) -> None:
    loop, port = loop_factory(Limits(max_open=3, max_reading=64, max_reading_per_client=64))
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        _wait(lambda: sum(loop.open_connections().values()) == 3)
        assert _get(port).endswith(b"ok")
        assert loop.evicted >= 1
    finally:
        for sock in idle:
            sock.close()


def test_a_slow_response_reader_is_cut_at_the_write_deadline(loop_factory: Any) -> None:
    loop, port = loop_factory(Limits(write_timeout=0.5))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /big HTTP/1.1\r\n\r\n")
        _wait(lambda: loop.timed_out == 1)
        assert loop.open_connections() == {}


def _boom_reply(head: bytes, client: Any, fast: bool) -> Reply | None:
    if head.startswith(b"GET /boom"):
        return Reply([b"HTTP/1.1 200 OK\r\n\r\n", 12345], False)  # type: ignore[list-item]
    return _reply(head, client, fast)


def test_an_exception_in_the_loop_is_logged_and_the_loop_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    loop = ConnectionLoop(listener, _boom_reply, limits=Limits())
    thread = threading.Thread(target=loop.serve_forever, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        with caplog.at_level("ERROR", logger="allsmi.exporter.connections"):
            assert _get(port, "/boom") == b""  # that connection is closed...
            _wait(lambda: loop.loop_errors == 1)
            assert _get(port).endswith(b"ok")  # ...and the loop serves the next one
        assert "the HTTP connection loop failed" in caplog.text and "TypeError" in caplog.text
        assert thread.is_alive()
    finally:
        loop.stop()
        listener.close()
        loop.close()


def test_repeated_loop_exceptions_end_serve_forever_with_the_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    loop = ConnectionLoop(listener, _boom_reply, limits=Limits(max_loop_errors=3))
    raised: list[BaseException] = []

    def run() -> None:
        try:
            loop.serve_forever()
        except BaseException as exc:  # noqa: BLE001
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        for _ in range(4):
            _get(port, "/boom", timeout=2)
        thread.join(10)
        assert not thread.is_alive() and isinstance(raised[0], TypeError)
    finally:
        loop.stop()
        listener.close()
        loop.close()


@pytest.mark.parametrize("soft, expected", [(20, 16), (100, 36), (256, 192), (1024, 896),
                                             (65536, 57344), (1 << 22, 65536)])
def test_max_open_is_derived_from_the_descriptor_limit(soft: int, expected: int) -> None:
    assert max_open_for_fd_limit(soft) == expected
    assert Limits.for_this_process().max_open == max_open_for_fd_limit(
        resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def test_the_password_check_queue_serves_addresses_in_turn() -> None:
    release = threading.Event()
    done: list[str] = []
    refused: list[str] = []

    def job(item: str) -> None:
        release.wait(10)
        done.append(item)

    queue = FairQueue(job, refused.append, workers=1, max_queued=8, max_queued_per_client=6)
    try:
        assert queue.submit("10.0.0.1", "a0")
        _wait(lambda: queue.waiting() == 0)  # a0 is being checked
        accepted = [queue.submit("10.0.0.1", f"a{i}") for i in range(1, 10)]
        assert accepted == [True] * 6 + [False] * 3  # a1-a6 wait; a7-a9: over its share
        assert queue.submit("10.0.0.2", "b0") and queue.submit("10.0.0.2", "b1")
        assert queue.submit("10.0.0.3", "c0")  # the queue is full: a6 gives way, not c0
        assert refused == ["a6"]
        release.set()
        _wait(lambda: len(done) == 9)
        assert done == ["a0", "a1", "b0", "c0", "a2", "b1", "a3", "a4", "a5"]
    finally:
        release.set()
        queue.close()


def test_serve_exits_1_when_its_http_loop_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never a process that stays up with nobody answering /metrics, /ready and /healthz.
    from click.testing import CliRunner

    from allsmi.cli.group import cli

    def broken(self: ConnectionLoop) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(ConnectionLoop, "serve_forever", broken)
    monkeypatch.setenv("ALLSMI_CONFIG", "/dev/null")
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    interval = sys.getswitchinterval()
    started = time.monotonic()
    try:
        result = CliRunner().invoke(cli, ["serve", "--simulate", "mixed", "--listen", "127.0.0.1:0"])
    finally:  # serve installs its own signal handlers and switch interval: give pytest its own back
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        sys.setswitchinterval(interval)
    assert result.exit_code == 1, result.output
    assert "the HTTP server stopped (RecursionError" in result.output
    assert time.monotonic() - started < 30


class _OutOfDescriptors(socket.socket):
    """A listener whose ``accept`` fails with EMFILE while ``failing`` is set."""

    failing = True
    calls = 0

    def accept(self) -> tuple[socket.socket, Any]:
        if self.failing:
            self.calls += 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


def test_emfile_on_accept_backs_off_and_logs_once_per_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    listener = _OutOfDescriptors(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    loop = ConnectionLoop(listener, _reply, limits=Limits(accept_backoff=0.2, log_every=60))
    threading.Thread(target=loop.serve_forever, daemon=True).start()
    try:
        with caplog.at_level("WARNING", logger="allsmi.exporter.connections"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as waiting:
                time.sleep(1.5)  # the listener stays readable all along
                assert 2 <= listener.calls <= 12, listener.calls  # 0.2 s apart, not a tight loop
                warnings = [r for r in caplog.records if "accept failed" in r.getMessage()]
                assert len(warnings) == 1 and "Too many open files" in warnings[0].getMessage()
                listener.failing = False  # descriptors are back: the waiting client is served
                waiting.sendall(b"GET / HTTP/1.1\r\n\r\n")
                assert waiting.recv(1024).endswith(b"ok")
    finally:
        loop.stop()
        listener.close()
        loop.close()


def test_addresses_whose_check_failed_are_served_after_the_others() -> None:
    """Issue 32, item 11: a flood from many addresses, one request each, filled the queue
    fairly and a valid scraper from a new address got 503 or waited for every address."""
    release = threading.Event()
    done: list[str] = []
    refused: list[str] = []

    def job(item: str) -> None:
        release.wait(10)
        done.append(item)

    queue = FairQueue(job, refused.append, workers=1, max_queued=4, max_queued_per_client=4)
    try:
        flooders = [f"10.0.1.{i}" for i in range(5)]
        for client in flooders:
            queue.failed(client)  # each failed a check already
        assert queue.submit(flooders[0], "f0")
        _wait(lambda: queue.waiting() == 0)  # f0 is being checked
        assert all(queue.submit(c, f"f{i}") for i, c in enumerate(flooders[1:], 1))  # full
        assert queue.submit("10.0.0.9", "scraper")  # a suspect's request gives way
        assert refused == ["f1"]
        release.set()
        _wait(lambda: len(done) == 5)
        assert done[:2] == ["f0", "scraper"], done  # next after the check under way
    finally:
        release.set()
        queue.close()

"""Request framing by h11 (issue 32, item 7), over raw loopback sockets against ``allsmi serve``.

Each malformed head below was accepted by the hand-written framing: the
duplicate or spaced ``Content-Length`` ones kept the connection open and
answered the "body" as a second request (request smuggling). Each must now
get ``400`` and a closed connection, and the bytes after it must never be
answered.
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import time
from typing import Iterator

import pytest

from .server import Serve, serving

SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"  # the "body" of the heads below
N = str(len(SMUGGLED)).encode()

MALFORMED = {
    "duplicate Content-Length": b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                                b"Content-Length: " + N + b"\r\n\r\n" + SMUGGLED,
    "space before the colon": b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length : " + N + b"\r\n\r\n"
                              + SMUGGLED,
    "tab before the colon": b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length\t: " + N + b"\r\n\r\n"
                            + SMUGGLED,
    "no Host": b"GET /metrics HTTP/1.1\r\n\r\n" + SMUGGLED,
    "two Host headers": b"GET /metrics HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n" + SMUGGLED,
    "a bare CR": b"GET /metrics HTTP/1.1\r\nHost: x\rX-A: b\r\n\r\n" + SMUGGLED,
    "a NUL in a value": b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n" + SMUGGLED,
    "HTTP/1.10": b"GET /metrics HTTP/1.10\r\nHost: x\r\n\r\n" + SMUGGLED,
    "Content-Length and Transfer-Encoding": b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                            b"Content-Length: " + N + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
                                            + SMUGGLED,
    "not HTTP": b"\x16\x03\x01 not http at all\r\n\r\n" + SMUGGLED,
    "a request line of spaces": b" \r\n\r\n" + SMUGGLED,
    "empty lines, then a request line of spaces": b"\r\n\n \r\n\r\n" + SMUGGLED,
    "a % not followed by two hex digits": b"GET /metr%zzics HTTP/1.1\r\nHost: x\r\n\r\n" + SMUGGLED,
}


@pytest.fixture(scope="module")
def server() -> Iterator[Serve]:
    yield from serving(["--simulate", "mixed", "--interval", "0.5"])


def exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` and read until the server closes (a timeout fails: it kept it open)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                raise AssertionError(f"the connection was kept open after {received[:200]!r}")
            if not chunk:
                return received
            received += chunk


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_each_malformed_head_gets_400_and_a_closed_connection(server: Serve, case: str) -> None:
    server.wait_ready()
    received = exchange(server.port, MALFORMED[case])
    assert received.startswith(b"HTTP/1.1 400 "), received[:200]
    assert received.count(b"HTTP/1.1 ") == 1, f"the bytes after the head were answered: {received!r}"
    assert b"\r\nConnection: close\r\n" in received


def test_a_percent_encoded_path_is_the_path_it_encodes(server: Serve) -> None:
    """As Go's net/http (Prometheus' own exporters) reads a target: ``/%6detrics`` is
    ``/metrics``; an encoded ``?`` is part of the path, not a query (so no page of ours)."""
    server.wait_ready()
    for target, status in ((b"/%6detrics", b"200"), (b"/%68ealthz", b"200"),
                           (b"/healthz%3Fx=1", b"404"), (b"/metrics%2F", b"404")):
        received = exchange(server.port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n"
                            b"Connection: close\r\n\r\n")
        assert received.startswith(b"HTTP/1.1 " + status + b" "), (target, received[:200])
        if target == b"/%6detrics":
            assert b"allsmi_device_info" in received


def test_http_2_request_line_is_refused_and_closed(server: Serve) -> None:
    server.wait_ready()
    received = exchange(server.port, b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n" + SMUGGLED)
    assert received.startswith(b"HTTP/1.1 505 ") and received.count(b"HTTP/1.1 ") == 1


def test_a_request_with_a_body_is_answered_and_closed_never_its_body(server: Serve) -> None:
    server.wait_ready()
    received = exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: " + N + b"\r\n\r\n"
                        + SMUGGLED)
    assert received.startswith(b"HTTP/1.1 200 ") and received.count(b"HTTP/1.1 ") == 1


def read_one(stream: "io.BufferedReader") -> tuple[bytes, bytes]:
    """One response (head, body) read from a kept-open connection's reader."""
    lines = []
    while True:
        line = stream.readline()
        assert line, f"closed before a whole head: {lines!r}"
        if line == b"\r\n":
            break
        lines.append(line)
    head = b"".join(lines)
    length = int(next(line.split(b":")[1] for line in lines
                      if line.lower().startswith(b"content-length:")))
    body = stream.read(length)
    assert len(body) == length
    return head, body


def test_http_1_0_keep_alive_is_said_and_honoured(server: Serve) -> None:
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock, \
            sock.makefile("rb") as stream:
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            head, body = read_one(stream)
            assert head.startswith(b"HTTP/1.1 200 ") and body == b"OK\n"
            assert b"\r\nConnection: keep-alive\r\n" in head
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")  # no keep-alive: answered, then closed
        head, body = read_one(stream)
        assert b"\r\nConnection: close\r\n" in head
        assert stream.read() == b""


def test_http_1_1_keeps_alive_without_saying_it(server: Serve) -> None:
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
        stream = sock.makefile("rb")
        for _ in range(2):
            head, body = read_one(stream)
            assert body == b"OK\n" and b"Connection:" not in head


def test_other_methods_get_405(server: Serve) -> None:
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        stream = sock.makefile("rb")
        head, _ = read_one(stream)
    assert head.startswith(b"HTTP/1.1 405 ") and b"\r\nAllow: GET, HEAD" in head


def test_the_exporter_frames_requests_with_h11() -> None:
    code = ("import sys, allsmi.exporter.http as h; "
            "from allsmi.exporter.request import parse_head, BadRequest; "
            "assert 'h11' in sys.modules; "
            "parse_head(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'); "
            "import h11; h11.Connection = None; "  # the parser is h11's: without it, nothing parses
            "parse_head(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "TypeError" in result.stderr, result.stderr


# -- empty lines before a request line: ignored (RFC 9112 section 2.2), within the head's bounds --

CLOSE = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("empty", [b"\r\n", b"\n", b"\r\n\n\r\n"], ids=["CRLF", "LF", "three"])
def test_empty_lines_before_the_request_line_are_ignored(server: Serve, empty: bytes) -> None:
    server.wait_ready()
    received = exchange(server.port, empty + CLOSE)
    assert received.startswith(b"HTTP/1.1 200 ") and received.endswith(b"\r\n\r\nOK\n"), received


def test_empty_lines_between_kept_alive_requests_are_ignored(server: Serve) -> None:
    """A CRLF after a request (as some clients send after a body): in the same write as the
    next request (pipelined), and on its own while the connection waits for the next one."""
    server.wait_ready()
    keep = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock, \
            sock.makefile("rb") as stream:
        sock.sendall(keep + b"\r\n" + keep)
        for _ in range(2):
            head, body = read_one(stream)
            assert head.startswith(b"HTTP/1.1 200 ") and body == b"OK\n", head
        sock.sendall(b"\r\n")
        time.sleep(0.05)  # read by the server on its own, before the request
        sock.sendall(b"\n" + CLOSE)
        head, body = read_one(stream)
        assert head.startswith(b"HTTP/1.1 200 ") and body == b"OK\n", head
        assert stream.read() == b""


def test_a_flood_of_empty_lines_counts_against_the_head_size_bound(server: Serve) -> None:
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        try:
            sock.sendall(b"\r\n" * 40_000 + CLOSE)  # 80 KB: more than the 64 KiB a head may take
        except OSError:
            pass
        assert sock.recv(1024).startswith(b"HTTP/1.1 431 ")


def _whole_answer(received: bytes) -> bytes:
    """The body of the one answer in ``received``, checked against its ``Content-Length``."""
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    assert len(body) == length, f"the answer was cut: {len(body)} of {length} bytes"
    return body


@pytest.mark.parametrize("case", ["a large body on a GET", "pipelined after Connection: close",
                                  "a large body on a POST", "a head above the size bound"])
def test_an_answer_before_a_close_arrives_whole_whatever_the_client_still_sends(
        server: Serve, case: str) -> None:
    """Input the server never reads (a body, requests after ``Connection: close``, the rest of an
    oversized head) must not reset the connection before the client has the answer: closing a
    socket with unread input makes the kernel send RST and drop the answer's unsent part (a
    300 KB /metrics answer arrived cut at about 128 KB, then "connection reset")."""
    server.wait_ready()
    get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
    data = {
        "a large body on a GET": get + b"Content-Length: 1000000\r\n\r\n" + b"a" * 1_000_000,
        "pipelined after Connection: close": get + b"Connection: close\r\n\r\n" + get * 20_000,
        "a large body on a POST": b"POST /metrics HTTP/1.1\r\nHost: x\r\n"
                                  b"Content-Length: 1000000\r\n\r\n" + b"a" * 1_000_000,
        "a head above the size bound": get + b"X-A: " + b"a" * 1_000_000 + b"\r\n\r\n",
    }[case]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # the answer waits on us
        sender = __import__("threading").Thread(target=lambda: _send_all(sock, data))
        sender.start()
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                raise AssertionError(f"reset after {len(received)} bytes: {received[:80]!r}")
            if not chunk:
                break
            received += chunk
        sender.join()
    assert received.count(b"HTTP/1.1 ") == 1, received[:300]
    status = received.split(b" ", 2)[1]
    assert status == {"a large body on a POST": b"405", "a head above the size bound": b"431"}.get(
        case, b"200"), received[:300]
    body = _whole_answer(received)
    if status == b"200":
        assert body.rstrip().endswith(b"_created " + body.rstrip().rsplit(b" ", 1)[1])


def _send_all(sock: socket.socket, data: bytes) -> None:
    """Send ``data``; the server may close before taking all of it (it answered already)."""
    try:
        sock.sendall(data)
    except OSError:
        pass

"""What ``allsmi serve`` answers depends on what the client asked for, as RFC 9110 and 9112 say.

* The format of ``/metrics`` follows the q-values of ``Accept``: Prometheus (2.49 and later)
  lists its ``scrape_protocols`` in the order configured, with falling q, and one configured
  to prefer the text format must get it. The exporter answered OpenMetrics to any ``Accept``
  that named it, whatever its q.
* A request target in absolute form (``GET http://host:9477/metrics``), which a server must
  accept (RFC 9112 section 3.2.2), asks for its path. It was answered 404.
"""

from __future__ import annotations

import socket
from typing import Iterator

import pytest

from .server import Serve, serving
from .support import series

# Prometheus' config.ScrapeProtocolsHeaders, and its scrape.acceptHeader: the protocols in the
# configured order, each with a q one tenth lower than the one before, then */*.
PROTOCOLS = {
    "PrometheusProto": "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                       "encoding=delimited",
    "OpenMetricsText1.0.0": "application/openmetrics-text;version=1.0.0",
    "OpenMetricsText0.0.1": "application/openmetrics-text;version=0.0.1",
    "PrometheusText0.0.4": "text/plain;version=0.0.4",
}


def accept_header(protocols: list[str]) -> str:
    weight = len(PROTOCOLS) + 1
    values = []
    for protocol in protocols:
        values.append(f"{PROTOCOLS[protocol]};q=0.{weight}")
        weight -= 1
    return ",".join(values + [f"*/*;q=0.{weight}"])


@pytest.fixture(scope="module")
def server() -> Iterator[Serve]:
    yield from serving(["--simulate", "mixed", "--interval", "0.5"])


@pytest.mark.parametrize("protocols,openmetrics", [
    (["OpenMetricsText1.0.0", "OpenMetricsText0.0.1", "PrometheusText0.0.4"], True),  # the default
    (["PrometheusProto", "OpenMetricsText1.0.0", "PrometheusText0.0.4"], True),  # no protobuf here
    (["PrometheusText0.0.4", "OpenMetricsText1.0.0"], False),
    (["PrometheusProto", "PrometheusText0.0.4", "OpenMetricsText1.0.0"], False),
    (["PrometheusText0.0.4"], False),
])
def test_the_scrape_protocols_order_decides_the_format(server: Serve, protocols: list[str],
                                                       openmetrics: bool) -> None:
    server.wait_ready()
    resp = server.get("/metrics", {"Accept": accept_header(protocols)})
    assert resp.status == 200
    kind = "application/openmetrics-text" if openmetrics else "text/plain"
    assert resp.headers["content-type"].startswith(kind + "; version=")
    assert resp.text.endswith("# EOF\n") == openmetrics
    assert series(resp.text, openmetrics=openmetrics)


@pytest.mark.parametrize("accept,openmetrics", [
    ("application/openmetrics-text", True),
    ("text/plain, application/openmetrics-text", True),  # a tie: the richer format
    ("application/openmetrics-text;q=0.5, text/plain;q=0", True),
    ("application/openmetrics-text;q=0.5, */*", False),  # anything else at 1: text is
    ("application/openmetrics-text;q=0.5, text/*;q=0.9", False),
    ("application/openmetrics-text;q=0.9, text/*;q=0.5, */*", True),  # text/* rules text/plain
    ("application/openmetrics-text;q=0", False),
    ("application/openmetrics-text;q=x", False),  # not a q: not asked for
    ("*/*", False),  # curl, browsers
    ("", False),
])
def test_accept_q_values_choose_the_format(server: Serve, accept: str, openmetrics: bool) -> None:
    server.wait_ready()
    resp = server.get("/metrics", {"Accept": accept} if accept else {})
    kind = "application/openmetrics-text" if openmetrics else "text/plain"
    assert resp.status == 200 and resp.headers["content-type"].startswith(kind)


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(1 << 20):
            received += chunk
    return received


@pytest.mark.parametrize("method,target,status,body_starts", [
    ("GET", "http://127.0.0.1:{port}/metrics?debug=1", 200, b"# HELP allsmi_device_info "),
    ("GET", "HTTP://localhost:{port}/healthz", 200, b"OK\n"),
    ("HEAD", "https://example.invalid/ready", 200, b""),
    ("GET", "http://127.0.0.1:{port}", 200, b"<!DOCTYPE html>"),  # no path: the index
    ("GET", "http://127.0.0.1:{port}?x=1", 200, b"<!DOCTYPE html>"),
    ("GET", "http://127.0.0.1:{port}/nope", 404, b"Not Found"),
])
def test_absolute_form_targets_ask_for_their_path(server: Serve, method: str, target: str,
                                                  status: int, body_starts: bytes) -> None:
    server.wait_ready()
    target = target.format(port=server.port)
    answer = _exchange(server.port, f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    f"Connection: close\r\n\r\n".encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
    assert body.startswith(body_starts)
    if method == "HEAD":
        assert body == b""

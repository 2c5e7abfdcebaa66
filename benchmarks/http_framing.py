#!/usr/bin/env python3
"""Per-request CPU of the exporter's HTTP framing: allsmi's responder against h11 alone.

``allsmi serve`` finds the end of a request head (``allsmi.exporter.request.head_end``),
parses it with h11 (``parse_head``: a fresh ``h11.Connection`` per head), routes it and
writes the response head itself (issue 32; until then the standard library's
``http.server`` parsed the head). This script times one ``GET /healthz`` (Prometheus'
request headers; a 3-byte body, so that the framing is all that is measured) answered by:

* ``allsmi``: ``MetricsServer``'s responder, as the loop calls it (finding the head's end,
  parsing, routing, building the response head);
* ``h11``: ``h11.Connection`` receiving the same bytes, yielding the request and its end,
  and serializing a response with the same headers and body (h11's own floor, no routing).

Usage::

    python benchmarks/http_framing.py [--requests 20000]

Run it from an older checkout too (``git archive``) to compare with an earlier parser.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import describe  # noqa: E402

REQUEST = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:9477\r\nUser-Agent: Prometheus/2.53.0\r\n"
           b"Accept: application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3"
           b"\r\nAccept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n")


def allsmi_per_request(n: int) -> float:
    try:
        from allsmi.exporter.request import head_end
    except ImportError:  # before issue 32: the loop's own head_end
        from allsmi.exporter.connections import head_end  # type: ignore[attr-defined,no-redef]
    from allsmi.exporter.exposition import Exposition
    from allsmi.exporter.http import MetricsServer

    server = MetricsServer("127.0.0.1", 0, Exposition())
    try:
        started = time.perf_counter()
        for _ in range(n):
            buf = bytearray(REQUEST)
            end = head_end(buf)
            reply = server.respond(bytes(buf[:end]), ("127.0.0.1", 5), True)
            assert reply is not None and reply.chunks[0].startswith(b"HTTP/1.1 200")
        return (time.perf_counter() - started) / n
    finally:
        server.server_close()


def h11_per_request(n: int) -> float:
    import h11

    headers = [("Server", "allsmi"), ("Date", "Thu, 26 Nov 2026 08:00:00 GMT"),
               ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "3"),
               ("Vary", "Accept, Accept-Encoding")]
    conn = h11.Connection(h11.SERVER)
    started = time.perf_counter()
    for _ in range(n):
        conn.receive_data(REQUEST)
        request = conn.next_event()
        assert isinstance(request, h11.Request) and request.target == b"/healthz"
        assert isinstance(conn.next_event(), h11.EndOfMessage)
        out = conn.send(h11.Response(status_code=200, headers=headers))
        out += conn.send(h11.Data(data=b"OK\n"))
        out += conn.send(h11.EndOfMessage())
        assert out.startswith(b"HTTP/1.1 200")
        conn.start_next_cycle()
    return (time.perf_counter() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        import h11
    except ImportError:
        sys.exit("needs h11: pip install h11")
    print(f"machine: {describe()}; h11 {h11.__version__}")
    ours = [allsmi_per_request(args.requests) for _ in range(args.rounds)]
    theirs = [h11_per_request(args.requests) for _ in range(args.rounds)]
    a, b = statistics.median(ours) * 1e6, statistics.median(theirs) * 1e6
    print(f"allsmi responder, per request:        {a:.1f} us (median of {args.rounds})")
    print(f"h11 {h11.__version__} receive + send, per request: {b:.1f} us")
    print(f"ratio h11 / allsmi: {b / a:.2f}")


if __name__ == "__main__":
    main()

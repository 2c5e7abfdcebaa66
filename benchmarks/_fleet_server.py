#!/usr/bin/env python3
"""Many simulated hosts from one process, for ``benchmarks/fleet.py``.

One real ``allsmi serve --simulate mixed`` (the *source*) is polled every
``--refresh`` seconds; its ``/metrics`` and ``/api/v1/snapshot`` bodies are
served again for every host name under ``/hosts/NAME/metrics`` and
``/hosts/NAME/api/v1/snapshot`` (the snapshot with NAME as its hostname).
Prometheus gives each host its own ``instance`` label, so N hosts cost one
collection and N cheap HTTP answers: 1000 hosts fit on 2 cores.

Hand-written HTTP on asyncio, not ``http.server``: one thread per connection
would spend the cores the benchmark is measuring. Only what Prometheus and
``allsmi view --hosts`` send is understood: GET, keep-alive, gzip.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import threading
import time
import urllib.request


class Bodies:
    """The source's latest bodies, refreshed in a thread; per-host snapshot JSON on demand."""

    def __init__(self, source: str, refresh: float) -> None:
        self.source = source.rstrip("/")
        self.refresh = refresh
        self.metrics = b""
        self.metrics_gz = b""
        self._snapshot: dict | None = None
        self._per_host: dict[str, tuple[bytes, bytes]] = {}
        self._lock = threading.Lock()
        self.ready = threading.Event()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._open = opener.open

    def poll_forever(self) -> None:
        while True:
            try:
                with self._open(self.source + "/metrics", timeout=10) as resp:
                    metrics = resp.read()
                with self._open(self.source + "/api/v1/snapshot", timeout=10) as resp:
                    snapshot = json.loads(resp.read())
            except OSError:
                time.sleep(0.2)
                continue
            with self._lock:
                self.metrics = metrics
                self.metrics_gz = gzip.compress(metrics, 5)
                self._snapshot = snapshot
                self._per_host = {}
            self.ready.set()
            time.sleep(self.refresh)

    def snapshot_for(self, host: str) -> tuple[bytes, bytes]:
        with self._lock:
            cached = self._per_host.get(host)
            if cached is None:
                doc = dict(self._snapshot or {})
                doc["host"] = dict(doc.get("host") or {}, hostname=host)
                raw = json.dumps(doc).encode()
                cached = self._per_host[host] = (raw, gzip.compress(raw, 5))
            return cached


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bodies: Bodies) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = (lines[0].split(" ") + ["", "", ""])[:3]
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines[1:] if line)}
            gz = "gzip" in headers.get("accept-encoding", "")
            status, ctype, body, encoded = "404 Not Found", "text/plain", b"not found\n", False
            parts = path.split("?")[0].strip("/").split("/")
            if method == "GET" and len(parts) >= 3 and parts[0] == "hosts":
                rest = "/".join(parts[2:])
                if rest == "metrics":
                    status, ctype = "200 OK", "text/plain; version=0.0.4; charset=utf-8"
                    body, encoded = (bodies.metrics_gz, True) if gz else (bodies.metrics, False)
                elif rest == "api/v1/snapshot":
                    raw, packed = bodies.snapshot_for(parts[1])
                    status, ctype = "200 OK", "application/json"
                    body, encoded = (packed, True) if gz else (raw, False)
            extra = "Content-Encoding: gzip\r\n" if encoded else ""
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{extra}"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
            if headers.get("connection", "").lower() == "close":
                break
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(port: int, bodies: Bodies) -> None:
    server = await asyncio.start_server(lambda r, w: handle(r, w, bodies), "127.0.0.1", port,
                                        backlog=2048)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="URL of the real allsmi serve")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--refresh", type=float, default=5.0)
    args = parser.parse_args()
    bodies = Bodies(args.source, args.refresh)
    threading.Thread(target=bodies.poll_forever, daemon=True).start()
    bodies.ready.wait(60)
    print("ready", flush=True)
    asyncio.run(serve(args.port, bodies))


if __name__ == "__main__":
    main()

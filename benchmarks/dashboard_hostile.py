#!/usr/bin/env python3
"""The dashboard's resident memory under hostile hosts (issue 26): run it, it prints a table.

``python benchmarks/dashboard_hostile.py --seconds 600`` runs the installed ``allsmi view``
in a private tmux server (120x40) against, in turn:

* ``churn``: one host answering 4096 devices under new ids on every poll (``--hosts``);
* ``prometheus``: a Prometheus answering 900,000 device series for one instance (the count
  query says so; asked for every device anyway it streams about 180 MiB);
* ``steady``: 50 hosts x 34 devices (``--hosts``), the simulated mixed node's snapshot.

and samples the dashboard's RSS every 5 s. Everything listens on loopback only.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _serve(respond: Callable[[Any], None]) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = type("H", (http.server.BaseHTTPRequestHandler,), {
        "do_GET": lambda self: respond(self), "log_message": lambda self, *a: None})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def _send(handler: Any, body: bytes) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def churn_host() -> Callable[[Any], None]:
    from allsmi.output import snapshot_dict
    from tests.dashboard.fixtures import simulated_snapshots
    doc = snapshot_dict(simulated_snapshots(1)[0])
    template = next(d for d in doc["devices"] if d.get("parent") is None)
    counter = [0]

    def respond(handler: Any) -> None:
        counter[0] += 1
        devices = [{**template, "id": f"churn-{counter[0]}-{i}", "uuid": f"churn-{counter[0]}-{i}",
                    "index": i} for i in range(4096)]
        _send(handler, json.dumps({**doc, "devices": devices}).encode())
    return respond


def steady_host() -> Callable[[Any], None]:
    from allsmi.output import to_json
    from tests.dashboard.fixtures import simulated_snapshots
    body = to_json(simulated_snapshots(1)[0]).encode()
    return lambda handler: _send(handler, body)


def big_prometheus() -> Callable[[Any], None]:
    one = json.dumps({"metric": {"__name__": "allsmi_device_info", "instance": "big:9477",
                                 "uuid": "GPU-%08d", "model": "H100", "vendor": "nvidia",
                                 "index": "0"}, "value": [time.time(), "1"]}) + ","
    chunk = "".join(one % i for i in range(10000)).encode()

    def respond(handler: Any) -> None:
        promql = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("query", [""])[0]
        result: list[dict[str, Any]] = []
        if promql.startswith("count by (instance)"):
            result = [{"metric": {"instance": "big:9477"}, "value": [time.time(), "900000"]}]
        elif promql.startswith("{") and "allsmi_device_info" in promql:
            handler.send_response(200)
            handler.end_headers()
            handler.close_connection = True
            handler.wfile.write(b'{"status":"success","data":{"resultType":"vector","result":[')
            try:
                for _ in range(90):
                    handler.wfile.write(chunk)
                handler.wfile.write(b'{"metric":{},"value":[0,"1"]}]}}')
            except OSError:
                pass
            return
        _send(handler, json.dumps({"status": "success",
                                   "data": {"resultType": "vector", "result": result}}).encode())
    return respond


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(name: str, args: list[str], seconds: float) -> tuple[float, float, float]:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed"
    sock = f"allsmi-bench-{os.getpid()}-{name}"
    pidfile = Path(f"/tmp/{sock}.pid")
    allsmi = str(Path(sys.executable).with_name("allsmi"))
    inner = f"echo $$ > {pidfile}; exec {allsmi} view {' '.join(args)} --interval 1"
    subprocess.run([tmux, "-L", sock, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "120",
                    "-y", "40", "sh", "-c", inner], check=True, env={**os.environ, "TERM": "xterm-256color"})
    try:
        while not pidfile.exists() or not pidfile.read_text().strip():
            time.sleep(0.1)
        pid = int(pidfile.read_text())
        samples = []
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            time.sleep(5)
            samples.append(rss_mib(pid))
        half = samples[len(samples) // 2:]
        return max(samples), samples[-1], max(half) - min(half)
    finally:
        subprocess.run([tmux, "-L", sock, "kill-server"], check=False)
        pidfile.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--only", choices=("churn", "prometheus", "steady"), action="append")
    opts = parser.parse_args()
    print("| case | peak RSS | last RSS | spread over the 2nd half |\n| --- | ---: | ---: | ---: |")
    for name in opts.only or ("churn", "prometheus", "steady"):
        if name == "churn":
            httpd, url = _serve(churn_host())
            args = ["--hosts", url]
        elif name == "prometheus":
            httpd, url = _serve(big_prometheus())
            args = ["--prometheus", url]
        else:
            httpd, url = _serve(steady_host())
            args = ["--hosts", ",".join(f"{url}/h{i}" for i in range(50))]
        try:
            peak, last, spread = run(name, args, opts.seconds)
        finally:
            httpd.shutdown()
        print(f"| {name} | {peak:.0f} MiB | {last:.0f} MiB | {spread:.1f} MiB |", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The dashboard's resident memory under hostile hosts (issue 26): run it, it prints a table.

``python benchmarks/dashboard_hostile.py --seconds 600`` runs the installed ``allsmi view``
in a private tmux server (120x40) against, in turn:

* ``churn``: one host answering 4096 devices under new ids on every poll (``--hosts``);
* ``prometheus``: a Prometheus answering 900,000 device series for one instance (the count
  query says so; asked for every device anyway it streams about 180 MiB);
* ``prometheus-lie``: the same answer, but the count query claims 34 devices, so the
  dashboard asks for them and gets the 180 MiB;
* ``steady``: 50 hosts x 34 devices (``--hosts``), the simulated mixed node's snapshot.

Every answer carries the time of the poll, so each poll is a new snapshot that the history
records (an unchanged timestamp would be recorded once).

and samples the dashboard's RSS every ``--sample`` seconds (5). It prints, per case, the
minimum, median and maximum RSS over the whole run and the least-squares slope (MiB per
minute) after a warm-up: the history window for ``steady`` (``600 / interval`` points, so
600 s at ``--interval 1``) plus 30 s, and the 120 s grace for gone devices plus 30 s for the
others. ``--csv DIR`` writes every sample (seconds since start, RSS in MiB) to
``DIR/<case>-<hosts>.csv``. ``--hosts-count N`` sets how many hosts ``steady`` polls (the
cost of a device is the RSS slope between runs at different counts). Everything listens on
loopback only.
"""

from __future__ import annotations

import argparse
import math
import statistics
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


#: Requests answered by the fake servers of this run.
POLLS = [0]


def _serve(respond: Callable[[Any], None]) -> tuple[http.server.ThreadingHTTPServer, str]:
    def do_get(self: Any) -> None:
        POLLS[0] += 1
        respond(self)
    handler = type("H", (http.server.BaseHTTPRequestHandler,), {
        "do_GET": do_get, "log_message": lambda self, *a: None})
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
        _send(handler, json.dumps({**doc, "timestamp": _now(), "devices": devices}).encode())
    return respond


def _now() -> str:
    """A snapshot's ``timestamp`` for now: every poll is a new snapshot that the history records."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def steady_host() -> Callable[[Any], None]:
    from allsmi.output import to_json
    from tests.dashboard.fixtures import simulated_snapshots
    snap = simulated_snapshots(1)[0]
    text = to_json(snap)
    stamp = json.dumps(json.loads(text)["timestamp"])
    assert text.count(stamp) == 1
    ids = {d.id for d in snap.devices} | {d.uuid for d in snap.devices if d.uuid}
    bodies: dict[str, str] = {}

    def body_of(path: str) -> str:
        # Each host its own devices (ids and uuids end with the host's path), as in a real fleet.
        if path not in bodies:
            tag = path.strip("/").replace("/", "-") or "h"
            bodies[path] = text
            for ident in sorted(ids, key=len, reverse=True):
                bodies[path] = bodies[path].replace(json.dumps(ident), json.dumps(f"{ident}-{tag}"))
        return bodies[path]

    def respond(handler: Any) -> None:
        _send(handler, body_of(handler.path).replace(stamp, json.dumps(_now())).encode())
    return respond


def big_prometheus(claimed: int = 900000) -> Callable[[Any], None]:
    one = json.dumps({"metric": {"__name__": "allsmi_device_info", "instance": "big:9477",
                                 "uuid": "GPU-%08d", "model": "H100", "vendor": "nvidia",
                                 "index": "0"}, "value": [time.time(), "1"]}) + ","
    chunk = "".join(one % i for i in range(10000)).encode()

    def respond(handler: Any) -> None:
        promql = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("query", [""])[0]
        result: list[dict[str, Any]] = []
        if promql.startswith("count by (instance)"):
            result = [{"metric": {"instance": "big:9477"}, "value": [time.time(), str(claimed)]}]
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


class Result:
    """The RSS samples of one run: ``(seconds since start, MiB, polls of each host so far)``.
    The warm-up ends ``warmup`` seconds after start, or, with ``window`` points, 30 s after
    each host had been polled ``window`` times (the history window is full; a loaded machine
    polls less often than the interval asks)."""

    def __init__(self, samples: list[tuple[float, float, float]], warmup: float,
                 window: int | None = None) -> None:
        self.samples = samples
        if window is not None:
            full = [t for t, _, polls in samples if polls >= window]
            warmup = full[0] + 30 if full else math.inf
        self.warmup = warmup
        values = [v for _, v, _ in samples]
        self.low, self.median, self.high = min(values), statistics.median(values), max(values)
        after = [(t, v) for t, v, _ in samples if t >= warmup]
        self.slope = slope_per_minute(after) if len(after) >= 3 else None
        self.settled = statistics.median(v for _, v in after) if after else None
        third = len(after) // 3
        # Robust to the spikes of an answer in flight: the median of the last third of the
        # samples after warm-up less the median of the first third.
        self.drift = (statistics.median(v for _, v in after[-third:])
                      - statistics.median(v for _, v in after[:third])) if third else None

    def row(self, name: str, devices: str) -> str:
        settled = "-" if self.settled is None else f"{self.settled:.1f} MiB"
        slope = "-" if self.slope is None else f"{self.slope:+.3f} MiB/min"
        drift = "-" if self.drift is None else f"{self.drift:+.1f} MiB"
        start = "window never full" if math.isinf(self.warmup) else f"{self.warmup:.0f} s"
        return (f"| {name} | {devices} | {self.low:.1f} MiB | {self.median:.1f} MiB | {self.high:.1f} MiB "
                f"| {start} | {settled} | {slope} | {drift} |")


def warmup_of(name: str) -> float:
    """The history window (600 s whatever the interval) for ``steady``, the 120 s grace of
    gone devices for the others; 30 s more for each."""
    return (600 if name == "steady" else 120) + 30


def window_of(name: str, interval: float) -> int | None:
    """Points in the history window for ``steady`` (``600 / interval``), else ``None``."""
    return round(600 / interval) if name == "steady" else None


def devices_of(name: str, hosts: int) -> str:
    return {"churn": "4096 new", "prometheus": "900,000 series",
            "prometheus-lie": "900,000 series, 34 claimed", "steady": f"{hosts} x 34"}[name]


def report(folder: Path, interval: float) -> None:
    """The table again from the samples a run wrote with ``--csv``."""
    for path in sorted(folder.glob("*.csv")):
        name, _, hosts = path.stem.rpartition("-")
        rows = [line.split(",") for line in path.read_text().splitlines() if line]
        samples = [(float(r[0]), float(r[1]), float(r[2]) if len(r) > 2 else 0.0) for r in rows]
        window = window_of(name, interval) if rows and len(rows[0]) > 2 else None
        if samples:
            span = f"{name} ({samples[-1][0]:.0f} s)"
            print(Result(samples, warmup_of(name), window).row(span, devices_of(name, int(hosts))))


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, MiB)`` points, in MiB per minute."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return 60 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var if var else 0.0


def run(name: str, args: list[str], seconds: float, sample: float, warmup: float,
        csv: Path | None = None, hosts: int = 1, window: int | None = None) -> Result:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed"
    sock = f"allsmi-bench-{os.getpid()}-{name}"
    pidfile = Path(f"/tmp/{sock}.pid")
    allsmi = str(Path(sys.executable).with_name("allsmi"))
    inner = f"echo $$ > {pidfile}; exec {allsmi} view {' '.join(args)}"
    subprocess.run([tmux, "-L", sock, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "120",
                    "-y", "40", "sh", "-c", inner], check=True, env={**os.environ, "TERM": "xterm-256color"})
    try:
        while not pidfile.exists() or not pidfile.read_text().strip():
            time.sleep(0.1)
        pid = int(pidfile.read_text())
        samples: list[tuple[float, float, float]] = []
        start = time.monotonic()
        while (now := time.monotonic() - start) < seconds:
            time.sleep(sample)
            rss = rss_mib(pid)
            if not rss:
                raise SystemExit(f"{name}: the dashboard (pid {pid}) ended after {now:.0f} s")
            samples.append((time.monotonic() - start, rss, POLLS[0] / hosts))
            if csv is not None:
                with csv.open("a", encoding="utf-8") as out:
                    out.write(f"{samples[-1][0]:.1f},{rss:.1f},{samples[-1][2]:.1f}\n")
        return Result(samples, warmup, window)
    finally:
        subprocess.run([tmux, "-L", sock, "kill-server"], check=False)
        pidfile.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--only", choices=("churn", "prometheus", "prometheus-lie", "steady"), action="append")
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--interval", type=float, default=1.0, help="the dashboard's --interval")
    parser.add_argument("--hosts-count", type=int, default=50, help="hosts polled by 'steady'")
    parser.add_argument("--csv", type=Path, help="write each run's samples under this folder")
    parser.add_argument("--report", type=Path, help="print the table from the samples in this folder")
    opts = parser.parse_args()
    header = ("| case | devices a poll | min RSS | median | max | warm-up until | median after warm-up "
              "| slope after warm-up | drift after warm-up |\n"
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    if opts.report is not None:
        print(header)
        report(opts.report, opts.interval)
        return
    from benchmarks._machine import describe
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {describe()}; "
          f"load average at start {load}; {opts.seconds:.0f} s a case, RSS every {opts.sample:g} s")
    print(header)
    for name in opts.only or ("churn", "prometheus", "prometheus-lie", "steady"):
        if name == "churn":
            httpd, url = _serve(churn_host())
            args = ["--hosts", url]
        elif name.startswith("prometheus"):
            httpd, url = _serve(big_prometheus(34 if name == "prometheus-lie" else 900000))
            args = ["--prometheus", url]
        else:
            httpd, url = _serve(steady_host())
            args = ["--hosts", ",".join(f"{url}/h{i}" for i in range(opts.hosts_count))]
        devices = devices_of(name, opts.hosts_count)
        warmup = warmup_of(name)
        csv = None
        if opts.csv is not None:
            opts.csv.mkdir(parents=True, exist_ok=True)
            csv = opts.csv / f"{name}-{opts.hosts_count if name == 'steady' else 1}.csv"
            csv.write_text("")
        try:
            POLLS[0] = 0
            res = run(name, args + ["--interval", f"{opts.interval:g}"], opts.seconds,
                      opts.sample, warmup, csv, opts.hosts_count if name == "steady" else 1,
                      window_of(name, opts.interval))
        finally:
            httpd.shutdown()
        print(res.row(name, devices), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A month of a simulated fleet in VictoriaMetrics: the month's bill from the hourly roll-ups.

Writes last month's counters (every day of it, one point per 5 minutes) for ``--hosts``
simulated hosts of ``--devices`` devices each (default 1000 x 37, the issue's target) into a
fresh VictoriaMetrics (Debian's ``victoria-metrics``, 13-month retention) through its import
API (``/api/v1/import``, JSON lines), with the truth known from the generator; rolls the month
up with ``vmalert -replay.*`` over the shipped ``deploy/prometheus/allsmi-rules.yml`` (group
``allsmi-billing-hourly``); then times ``allsmi export --prometheus URL --period last-month``
(from the roll-ups) and, with ``--raw``, the same from the raw counters (``--no-rollups``), and
checks the totals against the truth.

The generator: every device is observed all month (300 s a step); it is allocated in two hours
of three (staggered by host and device), busy at 50 % while allocated, drawing 400 W allocated
and 100 W otherwise; hosts fall in four resource groups priced at 2 EUR a device-hour. The
counters start at 0 at the month's first sample, so the truth over the month is each counter's
value at its last sample.

Reports: import time, replay time, the export's wall time (median of ``--runs``), its error
against the truth per column, the store's disk use (``du`` of its data directory) and memory
(VictoriaMetrics' peak resident set, ``VmHWM``).

Usage: ``python benchmarks/fleet_month.py [--hosts 1000] [--devices 37] [--runs 3] [--raw]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _machine import describe  # noqa: E402

RULES = ROOT / "deploy" / "prometheus" / "allsmi-rules.yml"
STEP = 300
GROUPS = ("training", "inference", "research", "batch")
PRICE = 2.0
# counter name (allsmi_device_NAME_total) -> the generator's curve
COUNTERS = {"observed_seconds": "observed", "allocated_seconds": "allocated",
            "busy_seconds": "busy", "energy_joules": "energy"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def last_month() -> tuple[int, int]:
    first = dt.datetime.now(dt.timezone.utc).replace(day=1, hour=0, minute=0, second=0,
                                                      microsecond=0)
    start = (first - dt.timedelta(days=1)).replace(day=1)
    return int(start.timestamp()), int(first.timestamp())


class Generator:
    """The month's JSON lines (``/api/v1/import``: one line per series with all its samples).

    A device is allocated in two hours of three, staggered by ``(host + device) % 3``, so every
    counter follows one of three curves: each curve's values (integers) and the timestamps are
    formatted once and every series line is its labels around them. Only what the roll-ups of
    ``allsmi-billing-hourly`` read for these devices is written: the observed, allocated, busy
    and energy counters, ``allsmi_device_info``, and each host's group labels and price.
    """

    def __init__(self, start: int, end: int) -> None:
        steps = (end - start) // STEP + 1
        self.samples_per_series = steps
        stamps = range(start * 1000, end * 1000 + 1, STEP * 1000)
        self.stamps = ",".join(map(str, stamps)).encode()
        self.curves: list[dict[str, bytes]] = []
        self.last: list[dict[str, float]] = []
        self.ones = ",".join(["1"] * steps).encode()
        self.prices = ",".join([repr(PRICE)] * steps).encode()
        for phase in range(3):
            counters: dict[str, list[int]] = {"observed": [0], "allocated": [0], "busy": [0],
                                              "energy": [0]}
            for k in range(1, steps):
                held = (k // 12 + phase) % 3 != 0  # two hours of three
                counters["observed"].append(counters["observed"][-1] + STEP)
                counters["allocated"].append(counters["allocated"][-1] + (STEP if held else 0))
                counters["busy"].append(counters["busy"][-1] + (STEP // 2 if held else 0))
                counters["energy"].append(counters["energy"][-1] + (400 if held else 100) * STEP)
            self.curves.append({name: ",".join(map(str, values)).encode()
                                for name, values in counters.items()})
            self.last.append({name: float(values[-1]) for name, values in counters.items()})

    def _line(self, labels: dict[str, str], values: bytes) -> bytes:
        return b"".join((b'{"metric":', json.dumps(labels).encode(), b',"values":[', values,
                         b'],"timestamps":[', self.stamps, b"]}\n"))

    def truth(self, hosts: int, devices: int, truth: dict[str, float]) -> None:
        """Adds the fleet's totals to ``truth`` without generating it (``--skip-import``)."""
        for host in range(hosts):
            for dev in range(devices):
                for name, value in self.last[(host + dev) % 3].items():
                    truth[name] += value

    def host(self, host: int, devices: int, truth: dict[str, float]) -> tuple[bytes, int]:
        """One host's lines (one request body) and its number of series; adds to ``truth``."""
        group = GROUPS[host % len(GROUPS)]
        instance = f"host{host:04d}:9477"
        common = {"instance": instance, "job": "allsmi", "resource_group": group}
        parts = [self._line({"__name__": "allsmi_resource_group_info", **common}, self.ones),
                 self._line({"__name__": "allsmi_resource_group_price_per_device_hour",
                             **common, "currency": "EUR"}, self.prices)]
        for dev in range(devices):
            base = {**common, "uuid": f"GPU-{host:04d}-{dev:02d}", "vendor": "nvidia",
                    "model": "NVIDIA H100 80GB HBM3"}
            phase = (host + dev) % 3
            curves = self.curves[phase]
            for name in COUNTERS:
                parts.append(self._line({"__name__": f"allsmi_device_{name}_total", **base},
                                        curves[COUNTERS[name]]))
            parts.append(self._line({"__name__": "allsmi_device_info", **base}, self.ones))
            for name, value in self.last[phase].items():
                truth[name] += value
        return b"".join(parts), len(parts)


def rss_peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def du_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def post(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=600) as resp:  # noqa: S310 - loopback only
        resp.read()


def wait(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not answer")


def export(url: str, runs: int, raw: bool, workdir: Path) -> tuple[list[float], dict, str]:  # type: ignore[type-arg]
    walls, doc, err = [], {}, ""
    for _ in range(runs):
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--prometheus", url,
                              "--period", "last-month", "--group-by", "resource_group",
                              "--format", "json", "--timeout", "600",
                              *(["--no-rollups"] if raw else [])],
                             capture_output=True, text=True, timeout=3600, cwd=workdir,
                             env={**os.environ, "XDG_CONFIG_HOME": str(workdir)})
        walls.append(time.monotonic() - started)
        if out.returncode != 0:
            raise SystemExit(f"export failed ({out.returncode}): {out.stderr}")
        doc, err = json.loads(out.stdout), out.stderr
    return walls, doc, err


def errors(doc: dict, truth: dict[str, float]) -> dict[str, float]:  # type: ignore[type-arg]
    got = {"observed": 0.0, "allocated": 0.0, "busy": 0.0, "energy": 0.0, "cost": 0.0}
    for row in doc["rows"]:
        got["observed"] += row["observed_device_hours"] * 3600
        got["allocated"] += (row["allocated_device_hours"] or 0) * 3600
        got["busy"] += (row["used_device_hours"] or 0) * 3600
        got["energy"] += (row["energy_kwh"] or 0) * 3.6e6
        got["cost"] += row["cost"] or 0
    want = {**truth, "cost": truth["allocated"] / 3600 * PRICE}
    return {k: (got[k] - want[k]) / want[k] for k in want}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=37)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--raw", action="store_true", help="also time --no-rollups")
    parser.add_argument("--connections", type=int, default=3,
                        help="import requests in flight at once (one host each)")
    parser.add_argument("--progress", type=int, default=0, metavar="N",
                        help="print the import rate to stderr every N hosts")
    parser.add_argument("--skip-import", action="store_true",
                        help="the store in --workdir already holds the month (an earlier run "
                             "with the same --hosts and --devices): replay and bill it again")
    parser.add_argument("--workdir", type=Path,
                        help="keep the store here (default: a temporary directory, removed)")
    args = parser.parse_args()
    vm_bin, vmalert_bin = shutil.which("victoria-metrics"), shutil.which("vmalert")
    if not vm_bin or not vmalert_bin:
        raise SystemExit("needs victoria-metrics and vmalert (apt-get install victoria-metrics)")
    start, end = last_month()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="allsmi-fleet-month-"))
    workdir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    port = free_port()
    store = f"http://127.0.0.1:{port}"
    vm = subprocess.Popen([vm_bin, f"-storageDataPath={workdir / 'vmdata'}",
                           f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=13",
                           "-dedup.minScrapeInterval=1ms", "-search.latencyOffset=0s",
                           "-search.maxPointsPerTimeseries=100000",
                           "-search.maxQueryDuration=3600s", "-search.maxSamplesPerQuery=1000000000000",
                           "-search.maxUniqueTimeseries=10000000", "-loggerLevel=ERROR"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(f"{store}/health")
        truth = {"observed": 0.0, "allocated": 0.0, "busy": 0.0, "energy": 0.0}
        began = time.monotonic()
        generator = Generator(start, end)
        samples = 0
        if args.skip_import:
            generator.truth(args.hosts, args.devices, truth)
            samples = (args.hosts * (2 + 5 * args.devices)) * generator.samples_per_series
        with ThreadPoolExecutor(max_workers=args.connections) as pool:
            pending: list[Future[None]] = []
            for host in range(0 if args.skip_import else args.hosts):
                body, series = generator.host(host, args.devices, truth)
                samples += series * generator.samples_per_series
                pending.append(pool.submit(post, f"{store}/api/v1/import", body))
                while len(pending) > args.connections:  # a few bodies in memory at a time
                    pending.pop(0).result()
                if args.progress and (host + 1) % args.progress == 0:
                    rate = samples / (time.monotonic() - began)
                    print(f"{host + 1} hosts, {samples:,} samples, {rate:,.0f}/s, "
                          f"load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
            for done in pending:
                done.result()
        post(f"{store}/internal/force_flush", b"")
        imported = time.monotonic() - began
        if args.skip_import:
            imported = float("nan")
        print(f"imported {samples:,} samples in {imported:.0f} s", file=sys.stderr, flush=True)
        began = time.monotonic()
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        iso = lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime(fmt)  # noqa: E731
        # only the hourly group: the others run every minute and are not needed for bills
        doc_rules = yaml.safe_load(RULES.read_text())
        billing = [g for g in doc_rules["groups"] if g["name"] == "allsmi-billing-hourly"]
        (workdir / "billing.yml").write_text(yaml.safe_dump({"groups": billing}))
        replay = subprocess.run(
            [vmalert_bin, f"-rule={workdir / 'billing.yml'}", f"-datasource.url={store}",
             f"-remoteWrite.url={store}", f"-replay.timeFrom={iso(start + 3600)}",
             f"-replay.timeTo={iso(end)}", "-datasource.queryStep=1h",
             "-replay.rulesDelay=0s", "-replay.disableProgressBar",
             # A day per request: vmalert queues a request's results for writing and drops
             # what does not fit its queue (a month of 14,800 devices did not fit 2 million).
             "-replay.maxDatapointsPerQuery=24",
             f"-remoteWrite.maxQueueSize={max(2_000_000, 8 * 25 * args.hosts * args.devices)}",
             "-remoteWrite.maxBatchSize=50000",
             "-remoteWrite.concurrency=4", "-remoteWrite.flushInterval=1s",
             "-loggerLevel=ERROR"],
            capture_output=True, text=True, timeout=7200)
        if replay.returncode != 0 or "queue is full" in replay.stderr:
            raise SystemExit(f"replay failed: {replay.stderr[-2000:]}")
        post(f"{store}/internal/force_flush", b"")
        replayed = time.monotonic() - began
        print(f"replayed in {replayed:.0f} s", file=sys.stderr, flush=True)
        time.sleep(2)
        walls, doc, err = export(store, args.runs, False, workdir)
        result = {
            "machine": describe(), "hosts": args.hosts, "devices_per_host": args.devices,
            "days": (end - start) // 86400, "samples_imported": samples,
            "import_s": None if args.skip_import else round(imported, 1),
            "import_samples_per_s": None if args.skip_import else round(samples / imported),
            "replay_s": round(replayed, 1),
            "export_rollups_median_s": round(statistics.median(walls), 2),
            "export_rollups_runs_s": [round(w, 2) for w in walls],
            "source_data": doc.get("source_data"),
            "error_vs_truth": {k: f"{v:+.4%}" for k, v in errors(doc, truth).items()},
            "store_peak_rss_mib": round(rss_peak_mib(vm.pid), 1),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        }
        if args.raw:
            raw_walls, raw_doc, _ = export(store, 1, True, workdir)
            result["export_raw_s"] = round(raw_walls[0], 2)
            result["raw_error_vs_truth"] = {k: f"{v:+.4%}" for k, v in errors(raw_doc, truth).items()}
        vm.terminate()  # a clean stop writes every in-memory part: then the disk is measured
        vm.wait(120)
        result["store_disk_mib"] = round(du_mib(workdir / "vmdata"), 1)
        print(json.dumps(result, indent=2))
        print(err.strip(), file=sys.stderr)
    finally:
        if vm.poll() is None:
            vm.terminate()
            vm.wait(30)
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

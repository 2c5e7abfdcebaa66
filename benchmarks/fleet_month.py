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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def last_month() -> tuple[int, int]:
    first = dt.datetime.now(dt.timezone.utc).replace(day=1, hour=0, minute=0, second=0,
                                                      microsecond=0)
    start = (first - dt.timedelta(days=1)).replace(day=1)
    return int(start.timestamp()), int(first.timestamp())


def series_lines(host: int, devices: int, start: int, end: int,
                 truth: dict[str, float]) -> list[bytes]:
    """JSON lines for one host's devices over ``[start, end]``, adding to ``truth``."""
    stamps = list(range(start, end + 1, STEP))
    ms = [t * 1000 for t in stamps]
    group = GROUPS[host % len(GROUPS)]
    instance = f"host{host:04d}:9477"
    lines: list[bytes] = []
    for group_metric, value in (("allsmi_resource_group_info", 1.0),
                                ("allsmi_resource_group_price_per_device_hour", PRICE)):
        labels = {"__name__": group_metric, "instance": instance, "job": "allsmi",
                  "resource_group": group}
        if group_metric.endswith("_hour"):
            labels["currency"] = "EUR"
        lines.append(json.dumps({"metric": labels, "values": [value] * len(ms),
                                 "timestamps": ms}).encode())
    for dev in range(devices):
        base = {"instance": instance, "job": "allsmi", "uuid": f"GPU-{host:04d}-{dev:02d}",
                "resource_group": group, "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3"}
        observed, allocated, busy, energy = [0.0], [0.0], [0.0], [0.0]
        for k in range(1, len(stamps)):
            held = (k // 12 + host + dev) % 3 != 0  # two hours of three
            observed.append(observed[-1] + STEP)
            allocated.append(allocated[-1] + (STEP if held else 0))
            busy.append(busy[-1] + (0.5 * STEP if held else 0))
            energy.append(energy[-1] + (400.0 if held else 100.0) * STEP)
        for name, values in (("allsmi_device_observed_seconds_total", observed),
                             ("allsmi_device_allocated_seconds_total", allocated),
                             ("allsmi_device_busy_seconds_total", busy),
                             ("allsmi_device_energy_joules_total", energy),
                             ("allsmi_device_info", [1.0] * len(ms))):
            lines.append(json.dumps({"metric": {"__name__": name, **base}, "values": values,
                                     "timestamps": ms}).encode())
        truth["observed"] += observed[-1]
        truth["allocated"] += allocated[-1]
        truth["busy"] += busy[-1]
        truth["energy"] += energy[-1]
    return lines


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
    args = parser.parse_args()
    vm_bin, vmalert_bin = shutil.which("victoria-metrics"), shutil.which("vmalert")
    if not vm_bin or not vmalert_bin:
        raise SystemExit("needs victoria-metrics and vmalert (apt-get install victoria-metrics)")
    start, end = last_month()
    workdir = Path(tempfile.mkdtemp(prefix="allsmi-fleet-month-"))
    port = free_port()
    store = f"http://127.0.0.1:{port}"
    vm = subprocess.Popen([vm_bin, f"-storageDataPath={workdir / 'vmdata'}",
                           f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=13",
                           "-dedup.minScrapeInterval=1ms", "-search.latencyOffset=0s",
                           "-search.maxPointsPerTimeseries=100000", "-loggerLevel=ERROR"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(f"{store}/health")
        truth = {"observed": 0.0, "allocated": 0.0, "busy": 0.0, "energy": 0.0}
        began = time.monotonic()
        samples = 0
        for host in range(args.hosts):
            lines = series_lines(host, args.devices, start, end, truth)
            samples += len(lines) * ((end - start) // STEP + 1)
            post(f"{store}/api/v1/import", b"\n".join(lines))
        post(f"{store}/internal/force_flush", b"")
        imported = time.monotonic() - began
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
             "-replay.rulesDelay=0s", "-replay.disableProgressBar", "-loggerLevel=ERROR"],
            capture_output=True, text=True, timeout=7200)
        if replay.returncode != 0:
            raise SystemExit(f"replay failed: {replay.stderr[-2000:]}")
        post(f"{store}/internal/force_flush", b"")
        replayed = time.monotonic() - began
        time.sleep(2)
        walls, doc, err = export(store, args.runs, False, workdir)
        result = {
            "machine": describe(), "hosts": args.hosts, "devices_per_host": args.devices,
            "days": (end - start) // 86400, "samples_imported": samples,
            "import_s": round(imported, 1), "replay_s": round(replayed, 1),
            "export_rollups_median_s": round(statistics.median(walls), 2),
            "export_rollups_runs_s": [round(w, 2) for w in walls],
            "source_data": doc.get("source_data"),
            "error_vs_truth": {k: f"{v:+.4%}" for k, v in errors(doc, truth).items()},
            "store_peak_rss_mib": round(rss_peak_mib(vm.pid), 1),
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
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

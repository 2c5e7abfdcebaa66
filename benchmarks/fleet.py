#!/usr/bin/env python3
"""A fleet of N simulated hosts through a real Prometheus: the cluster view and the export.

For each N (default 100, 300, 1000) this starts a real Prometheus (Debian's
``prometheus``) scraping N hosts served by ``benchmarks/_fleet_server.py``
(one real ``allsmi serve --simulate mixed`` fanned out under
``/hosts/NAME/...``, 37 devices a host), loads the shipped recording rules
when ``deploy/prometheus/allsmi-rules.yml`` exists, waits until every target
has been scraped a few times, then measures:

* one full refresh of the cluster view over ``--prometheus`` (the dashboard's
  own ``PrometheusSource.refresh``: queries, JSON decoding, building the
  rows), the first refresh apart (it also waits for the same-device join), then median and
  p95 of ``--runs`` refreshes; target p95 < 2 s at 1000 hosts;
* ``allsmi export --prometheus URL`` over the last hour (subprocess, median of
  3); target < 30 s at 1000 hosts. Prometheus holds only the minutes this
  benchmark ran, so the range functions see fewer samples than a real hour;
* Prometheus' own CPU (seconds used while measuring) and resident memory.

With ``--stores prometheus,victoriametrics`` (the default) each N is measured twice in the same
run: once on Prometheus, once on VictoriaMetrics (Debian's ``victoria-metrics``) scraping the
same hosts itself (``-promscrape.config``, the same file_sd targets) with ``vmalert``
evaluating the same recording rules and writing them back; its CPU and memory are
VictoriaMetrics' and vmalert's together.

Then the direct ``--hosts`` mode at 256 hosts (``ClusterSource.refresh``, every
host's ``/api/v1/snapshot`` fetched and parsed); target < 2 s a refresh
(all-smi, the closest peer, claims 256+ hosts at 3-6 s a refresh; it is not
measured here: it has no Prometheus mode to compare).

Each store row gives the load average (1, 5 and 15 minutes) before and after its refreshes:
the machine is shared, and the figures mean little without it.

Usage: ``python benchmarks/fleet.py [--hosts 100,300,1000] [--runs 10]
[--stores prometheus,victoriametrics] [--every-runs 2] [--export-runs 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _machine import describe  # noqa: E402

RULES = ROOT / "deploy" / "prometheus" / "allsmi-rules.yml"
SCRAPE_INTERVAL = 15
USE_RULES = True
RULES_MODE = "all"
#: Seconds to wait for every target scraped three times and for the rules (--ready-timeout).
READY_TIMEOUT = 600.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, timeout: float = 30.0) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as response:
        return response.read()


def wait_for(what: str, check, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"fleet: timed out waiting for {what}")


def promql(url: str, query: str) -> list[dict]:
    doc = json.loads(get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"))
    return doc["data"]["result"]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.median(ordered), p95


def pair(values: tuple[float, float]) -> str:
    """``median / p95`` in seconds, ``-`` when not measured."""
    return "-" if values[0] != values[0] else f"{values[0]:.2f} s / {values[1]:.2f} s"


def seconds(value: float) -> str:
    return "-" if value != value else f"{value:.1f} s"


def timed(refresh, runs: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        refresh(lambda: False)
        times.append(time.perf_counter() - t0)
    return times


def host_name(i: int) -> str:
    return f"node{i:04d}"


def rule_files(workdir: Path) -> list[Path]:
    """The rules the store evaluates (``--rules``): ``all``, the shipped file (it holds the fleet
    view's group); ``fleet-view``, that group alone (what the cluster view reads); ``none``.
    Never the fleet view's group twice: the same group loaded twice is evaluated twice."""
    if RULES_MODE == "none":
        return []
    if RULES_MODE == "all" and RULES.exists():
        return [RULES]
    from allsmi.dashboard.sources.promsummary import recording_rules

    (workdir / "fleet-rules.yml").write_text(json.dumps(  # JSON is YAML
        {"groups": [{"name": "allsmi-fleet-view", "rules": recording_rules()}]}))
    return [workdir / "fleet-rules.yml"]


def write_config(workdir: Path, n: int, fleet_port: int) -> None:
    """``prometheus.yml`` (file_sd targets, one per host) and the rules, in ``workdir``."""
    targets = [{"targets": [f"127.0.0.1:{fleet_port}"],
                "labels": {"instance": host_name(i), "__metrics_path__": f"/hosts/{host_name(i)}/metrics"}}
               for i in range(n)]
    (workdir / "targets.json").write_text(json.dumps(targets))
    files = [str(f) for f in rule_files(workdir)]
    rules = f"rule_files: {json.dumps(files)}\n"
    (workdir / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL}s\n  scrape_timeout: 10s\n"
        f"  evaluation_interval: {SCRAPE_INTERVAL}s\n{rules}"
        "scrape_configs:\n  - job_name: allsmi\n    file_sd_configs:\n"
        f"      - files: ['{workdir / 'targets.json'}']\n")


def start_prometheus(workdir: Path, n: int, fleet_port: int) -> tuple[subprocess.Popen, str]:
    write_config(workdir, n, fleet_port)
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("Prometheus to start", lambda: get(url + "/-/ready", 2) is not None, 60)
    except BaseException:
        proc.kill()
        raise
    return proc, url


def start_victoriametrics(workdir: Path, n: int, fleet_port: int
                          ) -> tuple[list[subprocess.Popen], str]:
    """VictoriaMetrics scraping the same targets as :func:`start_prometheus` (the same
    ``prometheus.yml``), and vmalert evaluating the same rules, results written back."""
    write_config(workdir, n, fleet_port)
    port = free_port()
    vm = subprocess.Popen(
        [shutil.which("victoria-metrics") or "victoria-metrics",
         f"-storageDataPath={workdir / 'vmdata'}", f"-httpListenAddr=127.0.0.1:{port}",
         "-retentionPeriod=13", f"-promscrape.config={workdir / 'prometheus.yml'}",
         "-promscrape.config.strictParse=false",  # rule_files, evaluation_interval: vmalert's
         # The fleet-view rule reads every device series; on a busy 2-core machine it can take
         # longer than VictoriaMetrics' default 30 s limit (then it answers 422 and records nothing).
         "-search.maxQueryDuration=120s",
         "-loggerLevel=WARN"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("VictoriaMetrics to start", lambda: get(url + "/health", 2) is not None, 60)
    except BaseException:  # never leave a store running behind a failed start
        vm.kill()
        raise
    procs = [vm]
    files = rule_files(workdir)
    if files:
        procs.append(subprocess.Popen(
            [shutil.which("vmalert") or "vmalert", *(f"-rule={f}" for f in files),
             f"-datasource.url={url}", f"-remoteWrite.url={url}",
             f"-evaluationInterval={SCRAPE_INTERVAL}s", f"-httpListenAddr=127.0.0.1:{free_port()}",
             f"-notifier.url=http://127.0.0.1:{free_port()}", "-loggerLevel=ERROR"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs, url


def load_average() -> str:
    return " / ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure_prometheus(n: int, fleet_port: int, runs: int, allsmi: str,
                       store: str = "prometheus", every_runs: int = 2,
                       export_runs: int = 3) -> dict[str, float]:
    from allsmi.dashboard.sources.prometheus import PrometheusSource

    with tempfile.TemporaryDirectory(prefix="allsmi-fleet-") as tmp:
        started = time.time()
        if store == "victoriametrics":
            procs, url = start_victoriametrics(Path(tmp), n, fleet_port)
        else:
            proc, url = start_prometheus(Path(tmp), n, fleet_port)
            procs = [proc]
        try:
            # Every target up and scraped at least three times (so rates and increases exist).
            wait_for(f"{n} targets scraped", lambda: (
                (r := promql(url, "count(count_over_time(up[10m]) >= 3)")) and int(float(r[0]["value"][1])) >= n),
                READY_TIMEOUT)
            if USE_RULES:
                wait_for("the recording rules", lambda: promql(url, "count(instance:allsmi_devices:totals)"),
                         READY_TIMEOUT)
            series = [line for line in get(url + "/metrics").decode().splitlines()
                      if line.startswith("prometheus_tsdb_head_series ")]
            cpu0, wall0 = sum(cpu_seconds(p.pid) for p in procs), time.monotonic()
            load_before = load_average()
            source = PrometheusSource(url, interval=1.0, timeout=60.0)
            # The first refresh also waits for the same-device join (later ones find it in the
            # background): timed apart, so that the median and p95 are the steady refresh.
            first = timed(source.refresh, 1)[0]
            refresh = timed(source.refresh, runs)
            print(f"  {store}: first refresh {first:.2f} s; then " + ", ".join(f"{t:.2f}" for t in refresh),
                  file=sys.stderr, flush=True)
            load_after = load_average()
            shown = len(source.hosts())
            detailed = source.detailed
            source.focus([host_name(n // 2)])
            opened = timed(source.refresh, runs)
            if not any(h.snapshot is not None for h in source.hosts()):  # say why, keep the figures
                errors = sorted({h.error for h in source.hosts() if h.error})[:3]
                print(f"  {store}: the opened host has no devices after {runs} refreshes: {errors}",
                      file=sys.stderr, flush=True)
            source.close()
            every = [float("nan")]
            if every_runs:
                everything = PrometheusSource(url, interval=1.0, timeout=120.0, device_budget=10**9)
                every = timed(everything.refresh, every_runs)
                everything.close()
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
            export = [float("nan")]
            for _ in range(export_runs):
                t0 = time.perf_counter()
                done = subprocess.run([allsmi, "export", "--prometheus", url, "--since", since,
                                       "--timeout", "120"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, check=False)
                export = [x for x in export if x == x] + [time.perf_counter() - t0]
                if done.returncode not in (0, 3):
                    raise SystemExit(f"export failed: {done.stderr.decode()[-500:]}")
            prom_cpu = (sum(cpu_seconds(p.pid) for p in procs) - cpu0) / (time.monotonic() - wall0)
            return {"hosts_shown": shown, "refresh": quantiles(refresh), "detailed": detailed, "first": first,
                    "opened": quantiles(opened), "every": quantiles(every), "export": statistics.median(export),
                    "prom_cpu": prom_cpu, "prom_rss": sum(rss_mib(p.pid) for p in procs),
                    "series": float(series[0].split()[1]) if series else float("nan"),
                    "load": f"{load_before} -> {load_after}",
                    "minutes": (time.time() - started) / 60}
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)


def measure_hosts(n: int, fleet_port: int, runs: int) -> tuple[float, float, int]:
    from allsmi.dashboard.sources.cluster import ClusterSource

    urls = [f"http://127.0.0.1:{fleet_port}/hosts/{host_name(i)}" for i in range(n)]
    source = ClusterSource(urls, interval=0.0, timeout=10.0)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        source.refresh(lambda: False)
        times.append(time.perf_counter() - t0)
    ok = sum(1 for h in source.hosts() if h.snapshot is not None and h.error is None)
    median, p95 = quantiles(times)
    return median, p95, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="100,300,1000", help="comma-separated fleet sizes")
    parser.add_argument("--direct-hosts", type=int, default=256, help="hosts for the --hosts mode")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-rules", action="store_true", help="measure without recording rules")
    parser.add_argument("--rules", choices=("all", "fleet-view", "none"), default="all",
                        help="rules the store evaluates: the shipped file, its fleet-view group alone, none")
    parser.add_argument("--every-runs", type=int, default=2,
                        help="refreshes of the old every-device query (0: not measured)")
    parser.add_argument("--ready-timeout", type=float, default=600.0,
                        help="seconds to wait for the store to have scraped every host three times")
    parser.add_argument("--export-runs", type=int, default=3, help="exports timed (0: not measured)")
    parser.add_argument("--stores", default="prometheus,victoriametrics",
                        help="the --prometheus sources measured for each N, in the same run")
    args = parser.parse_args()
    stores = [x.strip() for x in args.stores.split(",") if x.strip()]
    if not stores or set(stores) - {"prometheus", "victoriametrics"}:
        raise SystemExit("fleet: --stores takes prometheus and/or victoriametrics")
    if "victoriametrics" in stores and not shutil.which("victoria-metrics"):
        raise SystemExit("fleet: victoria-metrics not found (apt-get install victoria-metrics)")
    global USE_RULES, READY_TIMEOUT, RULES_MODE
    RULES_MODE = "none" if args.no_rules else args.rules
    USE_RULES = RULES_MODE != "none"
    READY_TIMEOUT = args.ready_timeout
    if not shutil.which("prometheus"):
        raise SystemExit("fleet: prometheus not found (apt-get install prometheus)")
    allsmi = str(Path(sys.executable).with_name("allsmi"))
    source_port, fleet_port = free_port(), free_port()
    env = dict(os.environ, ALLSMI_SIMULATE_SPEED="1")
    source = subprocess.Popen([allsmi, "serve", "--simulate", "mixed", "--listen",
                               f"127.0.0.1:{source_port}", "--interval", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    fleet = subprocess.Popen([sys.executable, str(HERE / "_fleet_server.py"), "--source",
                              f"http://127.0.0.1:{source_port}", "--port", str(fleet_port)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        if fleet.stdout is None or fleet.stdout.readline().strip() != "ready":
            raise SystemExit("fleet: the fleet server did not start")
        print(f"Machine: {describe()}; Prometheus scrape interval {SCRAPE_INTERVAL} s; "
              f"rules: {RULES_MODE}; {args.runs} refreshes each\n")
        print("| store | hosts | devices | head series | first refresh | cluster view refresh, median / p95 | "
              "with one host opened | every device (before) | export, last hour | "
              "store CPU while measured | store RSS | load average (1/5/15 min) before -> after |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for n, store in ((int(x), st) for x in args.hosts.split(",") for st in stores):
            try:
                r = measure_prometheus(n, fleet_port, args.runs, allsmi, store, args.every_runs, args.export_runs)
            except SystemExit as exc:  # this store never got ready: say so, measure the next
                print(f"| {store} | {n} | {n * 37} | not measured: {exc} (load average {load_average()}) |",
                      flush=True)
                continue
            med, p95 = r["refresh"]
            mode = "all devices" if r["detailed"] else "totals"
            name = "VictoriaMetrics + vmalert" if store == "victoriametrics" else "Prometheus"
            series = "-" if r["series"] != r["series"] else f"{r['series']:.0f}"
            print(f"| {name} | {n} | {n * 37} | {series} | {r['first']:.2f} s | {med:.2f} s / {p95:.2f} s ({mode}) | "
                  f"{r['opened'][0]:.2f} s / {r['opened'][1]:.2f} s | "
                  f"{pair(r['every'])} | {seconds(r['export'])} | "
                  f"{r['prom_cpu'] * 100:.0f}% of a core | {r['prom_rss']:.0f} MiB | {r['load']} |", flush=True)
        med, p95, ok = measure_hosts(args.direct_hosts, fleet_port, max(3, args.runs // 2))
        print(f"\nDirect `--hosts` mode, {args.direct_hosts} hosts ({ok} answered): refresh median "
              f"{med:.2f} s, p95 {p95:.2f} s (all-smi's claim for 256+ hosts: 3-6 s)")
    finally:
        for proc in (fleet, source):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()

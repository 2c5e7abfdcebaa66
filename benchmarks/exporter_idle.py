#!/usr/bin/env python3
"""Idle CPU of ``allsmi serve`` beside nvitop-exporter, and what each part of a cycle costs.

Both exporters read the same 8 fake H100s (the test suite's fake libnvidia-ml under the real
pynvml, through ``benchmarks/_fake_nvml_run.py``) at a 1 s interval, all running at once and
measured over the same windows (medians of the windows; ``/proc/PID/stat`` utime + stime).
``--baseline-python`` adds another allsmi install (e.g. the previous commit's virtual
environment) to the same windows, ``--variant NAME=CONFIG`` the same install with another config
file (``[backends.nvidia] gpm = false``: what GPM sampling costs, issue 31). ``--scrape-every S`` scrapes every server's ``/metrics``
every S seconds during the windows (Prometheus' default is 15 s; 0, the default, is idle:
nobody scrapes). ``--switches`` adds each server's context switches a second (voluntary and
involuntary, summed over its threads from ``/proc/PID/task/*/status``, over the same windows):
each is a wake-up of a thread.

``--itemise`` runs the collection cycle in this process instead (the same fake library,
``allsmi serve``'s collector and exposition, ``--cycles`` cycles back to back) and prints the
process CPU time of a whole cycle and of each part of it: the backends, attribution and host
(the cycle without the exposition), the exposition's counters, the families, and the text
format, which is rendered only when someone scrapes (issue 36); then ``--idle-cycles`` cycles
1 s apart, as ``serve`` runs them, by thread: idle in between, the process runs cold, and each
cycle costs more than back to back (with a bare thread's wake-up from a 1 s sleep beside it).

Usage::

    python benchmarks/exporter_idle.py [--seconds 120] [--windows 4] [--scrape-every 0]
        [--python .venv/bin/python] [--baseline-python /tmp/base/.venv/bin/python]
        [--nvitop-site DIR] [--switches]
    python benchmarks/exporter_idle.py --itemise [--cycles 300] [--idle-cycles 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fake_nvml_run import install_fake  # noqa: E402
from _machine import describe  # noqa: E402
from startup import ENV, HARNESS, NVITOP, idle_cpu  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def nvitop_site(site: Path | None) -> Path:
    """The nvitop / nvitop-exporter 1.7.2 site (``pip install --target``), made once."""
    site = site or Path(tempfile.gettempdir()) / "allsmi-nvitop-site"
    if not (site / "nvitop_exporter").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--target", str(site), *NVITOP], check=True, env=ENV, stdout=subprocess.DEVNULL)
    return site


def _scraper(urls: list[str], every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        for url in list(urls):
            try:
                urllib.request.urlopen(url, timeout=5).read()
            except OSError:
                pass


def measure(args: argparse.Namespace) -> None:
    site = nvitop_site(args.nvitop_site)
    empty = tempfile.mkdtemp(prefix="allsmi-idle-cwd-")

    def fake(python: str, *program: str) -> list[str]:
        return [python, HARNESS, "8", str(site), "--", *program]

    serve = ["allsmi", "serve", "--listen", "127.0.0.1:{port}", "--interval", "1"]
    servers = {"allsmi serve": fake(args.python, *serve)}
    if args.baseline_python:
        servers["allsmi serve (baseline)"] = fake(args.baseline_python, *serve)
    for variant in args.variant:  # NAME=CONFIG: the same install with another config file
        name, _, config = variant.partition("=")
        servers[f"allsmi serve ({name})"] = fake(args.python, *serve, "--config", config)
    servers["nvitop-exporter"] = fake(args.python, "nvitop-exporter", "--bind-address", "127.0.0.1",
                                      "--port", "{port}", "--interval", "1", "--hostname", "bench")
    stop = threading.Event()
    import startup
    real_cpu_seconds = startup._cpu_seconds
    counted: dict[int, list[tuple[float, int, int]]] = {}  # per pid, at each CPU reading

    def cpu_seconds(pid: int) -> float:
        counted.setdefault(pid, []).append((time.monotonic(), *switches(pid)))
        return real_cpu_seconds(pid)

    startup._cpu_seconds = cpu_seconds  # type: ignore[assignment]
    try:
        cpu = idle_cpu_scraped(servers, args.seconds / args.windows, args.windows, empty,
                               args.scrape_every, stop)
    finally:
        startup._cpu_seconds = real_cpu_seconds  # type: ignore[assignment]
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    what = "idle (nobody scrapes)" if args.scrape_every <= 0 else \
        f"scraped every {args.scrape_every:g} s"
    print(f"Machine: {describe()}\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"8 fake H100, 1 s interval, {what}; all running at once, median of {args.windows} "
          f"windows of {args.seconds / args.windows:g} s; load average {load}\n")
    print("| exporter | CPU, % of one core | ratio to nvitop-exporter |")
    print("|---|---:|---:|")
    peer = cpu["nvitop-exporter"]
    for name, value in cpu.items():
        print(f"| {name} | {value:.3f} % | {value / peer:.2f}x |" if peer else f"| {name} | {value:.3f} % | - |")
    if args.switches:  # the servers' pids in the order their CPU was first read: cpu's order
        print("\n| exporter | voluntary context switches a second | involuntary |")
        print("|---|---:|---:|")
        for name, readings in zip(cpu, counted.values()):
            windows = list(zip(readings[::2], readings[1::2]))  # (before, after) each window
            voluntary, involuntary = ([(b[i] - a[i]) / (b[0] - a[0]) for a, b in windows]
                                      for i in (1, 2))
            print(f"| {name} | {statistics.median(voluntary):.2f} | "
                  f"{statistics.median(involuntary):.2f} |")


def switches(pid: int) -> tuple[int, int]:
    """The process's voluntary and involuntary context switches, summed over its threads. A
    server that is gone ends the benchmark (a reading of 0 would pass for a quiet one)."""
    voluntary = involuntary = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError as exc:
        raise SystemExit(f"exporter_idle: server {pid} is gone: {exc}") from exc
    for task in tasks:
        try:
            lines = Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines()
        except OSError:  # a thread that ended between the listing and the read
            continue
        for line in lines:
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


def idle_cpu_scraped(servers: dict[str, list[str]], seconds: float, windows: int, cwd: str,
                     every: float, stop: threading.Event) -> dict[str, float]:
    """:func:`startup.idle_cpu`, with a thread scraping every server every ``every`` seconds
    (its URLs read from the listening sockets the servers were given)."""
    if every <= 0:
        return idle_cpu(servers, seconds, windows, cwd)
    import startup
    urls: list[str] = []
    real_port = startup._port

    def port() -> int:
        chosen = real_port()
        urls.append(f"http://127.0.0.1:{chosen}/metrics")
        return chosen

    startup._port = port  # type: ignore[assignment]
    thread = threading.Thread(target=_scraper, args=(urls, every, stop), daemon=True)
    thread.start()  # it reads ``urls`` as the servers are started
    try:
        return idle_cpu(servers, seconds, windows, cwd)
    finally:
        stop.set()
        startup._port = real_port  # type: ignore[assignment]


def itemise(cycles: int, idle_cycles: int) -> None:
    """Process CPU per cycle of each part of ``allsmi serve``'s collection cycle, in-process."""
    sys.path.insert(0, str(REPO))
    install_fake(8)
    from allsmi.cli.common import build_collector, settings
    from allsmi.exporter.exposition import Exposition
    from allsmi.exporter.textformat import LabelBlocks, render_text

    def per_cycle(step: object) -> float:
        started = time.process_time()
        for _ in range(cycles):
            step()  # type: ignore[operator]
        return 1000 * (time.process_time() - started) / cycles

    collector = build_collector(settings(None, None, 1.0, None, parent={}))
    exposition = Exposition()
    try:
        for _ in range(5):
            collector.collect_once()
        # with and without the exposition subscribed, alternated: medians of 5 rounds each
        rounds: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(5):
            for subscribed in (False, True):
                collector._subscribers[:] = [exposition.on_snapshot] if subscribed else []
                rounds[subscribed].append(per_cycle(collector.collect_once))
        bare, whole = statistics.median(rounds[False]), statistics.median(rounds[True])
        snap = collector.latest
        assert snap is not None
        counters = per_cycle(lambda: exposition.counters.update(snap))
        families = per_cycle(lambda: exposition.metrics(snap).collect())
        built = list(exposition.metrics(snap).collect())
        text = per_cycle(lambda: render_text(built, LabelBlocks()))
        scraped = per_cycle(lambda: (exposition.on_snapshot(snap), exposition.current))
        collector._subscribers[:] = [exposition.on_snapshot]
        spaced = spaced_cycles(collector.collect_once, idle_cycles)
    finally:
        collector.close()
    wake = wake_up_cost(max(10, idle_cycles))
    print(f"Machine: {describe()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
          f"8 fake H100, allsmi serve's collector and exposition in one process, {cycles} cycles "
          f"back to back (process CPU time, every thread)\n")
    print("| part | ms of CPU per cycle |")
    print("|---|---:|")
    for name, value in (
            ("whole cycle, nobody scraping (backends + attribution + host + exposition)", whole),
            ("  the cycle without the exposition (backends, attribution, host, groups)", bare),
            ("  the exposition's share (counters, holder counters)", whole - bare),
            ("counters alone (device, holder, backend)", counters),
            ("metric families (built only for a scrape)", families),
            ("text format 0.0.4 (rendered only for a scrape)", text),
            ("a cycle's exposition when every cycle is scraped (rendered ahead)", scraped)):
        print(f"| {name} | {value:.3f} |")
    print(f"\nThe same cycle {idle_cycles} times, 1 s apart as `serve` runs it (the process idles "
          f"in between, and its caches go cold), by thread (/proc/self/task/*/schedstat)\n")
    print("| thread | ms of CPU per cycle |")
    print("|---|---:|")
    for name, value in spaced.items():
        print(f"| {name} | {value:.3f} |")
    print(f"| (a bare thread's wake-up from a 1 s sleep, for scale) | {wake:.3f} |")
    print(f"\nShares of the CPU of {cycles} cycles, every thread profiled (cProfile on the thread "
          f"CPU clock; functions' inclusive time, so the 'of which' rows are inside the row above)\n")
    print("| part | share of the cycle's CPU |")
    print("|---|---:|")
    for name, value in shares(cycles).items():
        print(f"| {name} | {value:.0f} % |")


def _thread_cpu() -> dict[str, int]:
    """Each thread of this process: its name and CPU time so far (ns, ``schedstat``); the
    main thread runs the cycles here, as the ``allsmi-collector`` thread does in ``serve``."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    names[threading.main_thread().native_id] = "MainThread (the collector's cycle)"
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                out[names.get(int(tid), f"thread {tid}")] = int(stat.read().split()[0])
        except OSError:
            pass  # a thread that ended
    return out


def spaced_cycles(cycle: object, count: int) -> dict[str, float]:
    """ms of CPU per cycle of ``count`` cycles 1 s apart, by thread and in all."""
    before = _thread_cpu()
    for _ in range(count):
        time.sleep(1.0)
        cycle()  # type: ignore[operator]
    after = _thread_cpu()
    spent = {name: (ns - before.get(name, 0)) / 1e6 / count for name, ns in after.items()}
    spent = {name: ms for name, ms in spent.items() if ms >= 0.001}
    return {"every thread": sum(spent.values()), **spent}


def wake_up_cost(count: int) -> float:
    """ms of CPU a thread spends waking from ``time.sleep(1)`` (the kernel's and the VM's part
    of every wake-up: what a cycle pays once per thread it wakes)."""
    spent: list[float] = []

    def sleeper() -> None:
        start = time.thread_time()
        for _ in range(count):
            time.sleep(1.0)
        spent.append((time.thread_time() - start) * 1000 / count)

    thread = threading.Thread(target=sleeper, name="sleeper")
    thread.start()
    thread.join()
    return spent[0]


#: The parts of a cycle whose share ``--itemise`` reports (function names as cProfile keys them;
#: a part of several functions, none inside another, adds them up).
PARTS = {
    "NVIDIA reads (per GPU, on the backend's reader threads)": (("backend.py", "_read_gpu"),),
    "  of which NVML calls through pynvml and the fake library": (
        ("devices.py", "call"), ("calls.py", "utilization"), ("calls.py", "memory_v2"),
        ("calls.py", "temperature_v"), ("calls.py", "uint"),
        ("calls.py", "clock_event_reasons")),
    "  of which building DeviceSample (schema cleaning)": (("backend.py", "_device"),),
    "  of which per-process reads": (("processes.py", "read_processes"),),
    "attribution (who holds each device)": (("collector.py", "_attribute"),),
    "resource groups": (("groups.py", "assign_groups"),),
    "host (CPU, memory)": (("host.py", "sample"),),
    "the exposition's counters": (("exposition.py", "on_snapshot"),),
}


def shares(cycles: int) -> dict[str, float]:
    """Each part's share of the CPU of ``cycles`` cycles, every thread profiled (cProfile with
    a thread CPU clock; its overhead inflates absolute times, not the shares much)."""
    import cProfile
    import pstats
    import threading as th
    profiles: list[cProfile.Profile] = []

    def hook(*_: object) -> None:
        profile = cProfile.Profile(time.thread_time)
        profiles.append(profile)
        profile.enable()

    th.setprofile(hook)
    from allsmi.cli.common import build_collector, settings
    from allsmi.exporter.exposition import Exposition
    collector = build_collector(settings(None, None, 1.0, None, parent={}))
    collector.subscribe(Exposition().on_snapshot)
    main = cProfile.Profile(time.thread_time)
    try:
        for _ in range(5):
            collector.collect_once()
        for profile in profiles:
            profile.clear()
        main.enable()
        for _ in range(cycles):
            collector.collect_once()
        main.disable()
    finally:
        th.setprofile(None)  # type: ignore[arg-type]
        collector.close()
    # Each reader thread ends first: a call still pending in a profile (a thread waiting for
    # work) would be closed on this thread's CPU clock, not its own, and count as work.
    for thread in th.enumerate():
        if thread is not th.current_thread():
            thread.join(5)
    stats = pstats.Stats(main)
    for profile in profiles:
        try:
            profile.disable()
            stats.add(profile)
        except (TypeError, ValueError):
            pass  # a thread that never ran profiled code
    table = stats.stats  # type: ignore[attr-defined]
    out = {}
    for name, functions in PARTS.items():
        out[name] = 100 * sum(ct for (f, _, fn), (_, _, _, ct, _) in table.items()
                              for file, func in functions
                              if f.endswith(file) and (fn == func or fn.endswith("." + func)))
    total = sum(tt for (_, _, tt, _, _) in table.values())
    return {name: value / total for name, value in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--scrape-every", type=float, default=0.0)
    parser.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"))
    parser.add_argument("--baseline-python")
    parser.add_argument("--nvitop-site", type=Path)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=CONFIG",
                        help="another allsmi serve of the same install with this config file "
                             "(e.g. gpm-off=FILE holding [backends.nvidia] gpm = false)")
    parser.add_argument("--switches", action="store_true")
    parser.add_argument("--itemise", action="store_true")
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--idle-cycles", type=int, default=30,
                        help="--itemise: also this many cycles 1 s apart, by thread")
    args = parser.parse_args()
    # The servers run in an empty directory: a relative path (``.venv/bin/python``) is made
    # absolute here (not resolved: a virtual environment's python is found by its own path).
    args.python = os.path.abspath(args.python)
    if args.baseline_python:
        args.baseline_python = os.path.abspath(args.baseline_python)
    if args.nvitop_site:
        args.nvitop_site = args.nvitop_site.absolute()
    args.variant = [f"{name}={os.path.abspath(config)}" for name, _, config
                    in (v.partition("=") for v in args.variant)]
    if args.itemise:
        itemise(args.cycles, args.idle_cycles)
    else:
        measure(args)


if __name__ == "__main__":
    main()

"""The NVIDIA backend on a real GPU, side by side with ``nvidia-smi``: the evidence behind
``docs/hardware-validation.md``.

Run on a machine with an NVIDIA driver, allsmi installed and (for the load phase) PyTorch::

    python benchmarks/nvidia_hardware.py --out DIR [--load-seconds 90] [--cycles 50]
        [--startup-runs 21 --idle-seconds 90] [--no-readings]

It writes ``DIR/report.md`` and the raw outputs beside it:

1. versions: ``nvidia-smi --version``, pynvml, Python, allsmi;
2. allsmi's backend and ``nvidia-smi --query-gpu`` read at the same moment (two threads), every
   field side by side, at idle and under load;
3. the load: two PyTorch processes on GPU 0 doing bf16 matrix products, one busy all the time and
   one about 10 % of the time (time-slicing). Both tools' process lists with their memory, and
   allsmi's per-process utilization beside ``nvidia-smi pmon``;
4. the energy counter: joules counted over an interval against the mean of the power readings;
5. the cost of one sampling cycle (in process) and of a one-shot ``allsmi snapshot --format json``
   against one ``nvidia-smi --query-gpu`` call and ``nvitop --once`` where nvitop is installed;
6. one scrape of ``allsmi serve --processes``;
7. with ``--startup-runs N``: ``allsmi snapshot`` against ``nvitop --once`` and ``nvidia-smi``
   (interleaved, compiled bytecode), and with ``--idle-seconds S`` the idle CPU of ``allsmi serve``
   beside ``nvitop-exporter`` (``benchmarks/startup.py``'s measurements).

Every step is independent: one that fails is written into the report with its error, and the
others still run. Nothing here is a test: the pass/fail cross-check is
``tests/hardware/test_nvidia_smi_crosscheck.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

QUERY = ("index", "uuid", "name", "pci.bus_id", "driver_version", "utilization.gpu",
         "memory.used", "memory.total", "temperature.gpu", "power.draw", "power.limit",
         "clocks.sm", "fan.speed")
# (nvidia-smi field, allsmi attribute, scale from allsmi's unit to nvidia-smi's)
PAIRS = (("uuid", "uuid", None), ("name", "name", None), ("pci.bus_id", "bus_id", None),
         ("driver_version", "driver_version", None), ("utilization.gpu", "utilization_percent", 1),
         ("memory.used", "memory_used_bytes", 2**-20), ("memory.total", "memory_total_bytes", 2**-20),
         ("temperature.gpu", "temperature_celsius", 1), ("power.draw", "power_watts", 1),
         ("power.limit", "power_limit_watts", 1), ("clocks.sm", "clock_mhz", 1),
         ("fan.speed", "fan_percent", 1))
LOAD = r"""
import sys, time, torch
duty, seconds = float(sys.argv[1]), float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
(a @ b).sum().item()
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    start = time.time()
    while time.time() - start < duty * 0.2:
        c = a @ b
        torch.cuda.synchronize()
    time.sleep(max(0.0, (1.0 - duty) * 0.2))
"""


def run(argv: list[str], timeout: float = 60.0) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}... exited {done.returncode}: {done.stderr.strip()[:500]}")
    return done.stdout


def smi_query(fields: tuple[str, ...] = QUERY) -> list[dict[str, str]]:
    out = run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    return [dict(zip(fields, (cell.strip() for cell in line.split(", "))))
            for line in out.splitlines() if line.strip()]


def side_by_side(backend: Any) -> tuple[str, list[Any]]:
    """Both tools at the same moment (two threads); a Markdown table, one row per field and GPU."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        ours_f = pool.submit(backend.sample)
        theirs_f = pool.submit(smi_query)
        ours, theirs = list(ours_f.result()), theirs_f.result()
    by_uuid = {dev.uuid: dev for dev in ours if dev.parent is None}
    lines = ["| GPU | field | nvidia-smi | allsmi | difference |", "|---|---|---:|---:|---:|"]
    for row in theirs:
        dev = by_uuid.get(row["uuid"])
        if dev is None:
            lines.append(f"| {row['index']} | (not seen by allsmi) | {row['uuid']} | | |")
            continue
        for field, attribute, scale in PAIRS:
            mine = getattr(dev, attribute)
            theirs_text = row[field]
            if scale is None:
                same = str(mine).upper() == theirs_text.upper()
                lines.append(f"| {row['index']} | {field} | {theirs_text} | {mine} | "
                             f"{'same' if same else 'DIFFERENT'} |")
                continue
            mine_text = "None" if mine is None else f"{mine * scale:.2f}"
            try:
                diff = f"{mine * scale - float(theirs_text):+.2f}" if mine is not None else "-"
            except ValueError:
                diff = "-"
            lines.append(f"| {row['index']} | {field} | {theirs_text} | {mine_text} | {diff} |")
    return "\n".join(lines), ours


def processes(ours: list[Any], out: Path) -> str:
    apps = run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                "--format=csv,noheader,nounits"])
    try:
        pmon = run(["nvidia-smi", "pmon", "-c", "1", "-s", "um"], timeout=30)
    except Exception as exc:  # pmon is missing on some drivers: say so in the report
        pmon = f"(nvidia-smi pmon failed: {exc})"
    (out / "pmon.txt").write_text(pmon)
    theirs = {}
    for line in apps.splitlines():
        cells = [c.strip() for c in line.split(", ")]
        if len(cells) == 4:
            theirs[int(cells[1])] = cells
    lines = ["| pid | nvidia-smi memory MiB | allsmi memory MiB | allsmi utilization % | command |",
             "|---:|---:|---:|---:|---|"]
    seen = set()
    for dev in ours:
        for proc in dev.processes or ():
            seen.add(proc.pid)
            smi = theirs.get(proc.pid)
            mem = "None" if proc.memory_bytes is None else f"{proc.memory_bytes / 2**20:.0f}"
            lines.append(f"| {proc.pid} | {smi[3] if smi else '(not listed)'} | {mem} | "
                         f"{proc.utilization_percent} | {(proc.command or '')[:60]} |")
    for pid, cells in theirs.items():
        if pid not in seen:
            lines.append(f"| {pid} | {cells[3]} | (not listed) | | {cells[2][:60]} |")
    return "\n".join(lines) + "\n\n`nvidia-smi pmon -c 1 -s um`:\n\n```\n" + pmon.strip() + "\n```"


def energy(backend: Any, seconds: float = 6.0) -> str:
    first = {d.uuid: d for d in backend.sample() if d.parent is None}
    start = time.monotonic()
    powers: dict[str, list[float]] = {uuid: [] for uuid in first}
    while time.monotonic() - start < seconds:
        time.sleep(0.25)
        for dev in backend.sample():
            if dev.uuid in powers and dev.power_watts is not None:
                powers[dev.uuid].append(dev.power_watts)
    last = {d.uuid: d for d in backend.sample() if d.parent is None}
    elapsed = time.monotonic() - start
    lines = ["| GPU | joules counted / s | mean of power readings W | readings |", "|---|---:|---:|---:|"]
    for uuid, dev in first.items():
        if dev.energy_joules is None or last[uuid].energy_joules is None:
            lines.append(f"| {dev.index} | None (no energy counter) | | |")
            continue
        rate = (last[uuid].energy_joules - dev.energy_joules) / elapsed
        mean = statistics.fmean(powers[uuid]) if powers[uuid] else float("nan")
        lines.append(f"| {dev.index} | {rate:.1f} | {mean:.1f} | {len(powers[uuid])} |")
    return "\n".join(lines)


def timings(backend: Any, cycles: int) -> str:
    cycle = []
    for _ in range(cycles):
        start = time.perf_counter()
        backend.sample()
        cycle.append(time.perf_counter() - start)

    def wall(argv: list[str], runs: int = 7) -> float:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            run(argv)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    smi = wall(["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"])
    snap = wall([sys.executable, "-m", "allsmi", "snapshot", "--format", "json"])
    bare = wall([sys.executable, "-c", "pass"])
    lines = [f"- one sampling cycle of the backend (in process, {cycles} cycles): median "
             f"{statistics.median(cycle) * 1e3:.2f} ms, max {max(cycle) * 1e3:.2f} ms",
             f"- `nvidia-smi --query-gpu=<13 fields>` (one call, median of 7): {smi * 1e3:.0f} ms",
             f"- `allsmi snapshot --format json` (a new process, median of 7): {snap * 1e3:.0f} ms "
             f"({snap / smi:.2f}x nvidia-smi)",
             f"- `python -c pass`: {bare * 1e3:.0f} ms"]
    try:
        nv = wall([sys.executable, "-m", "nvitop", "--once"])
        lines.append(f"- `nvitop --once` (median of 7): {nv * 1e3:.0f} ms; allsmi {snap / nv:.2f}x nvitop")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        lines.append(f"- nvitop not compared: {exc}")
    return "\n".join(lines)


def extra_fields(backend: Any) -> str:
    """The power and memory variants a driver may report, beside what allsmi reads."""
    fields = ("uuid", "power.draw", "power.draw.average", "power.draw.instant", "memory.used",
              "memory.reserved", "memory.free", "enforced.power.limit", "clocks.max.sm", "pstate")
    lines = []
    for field in fields[1:]:
        try:
            rows = smi_query(("uuid", field))
        except RuntimeError as exc:
            lines.append(f"- `{field}`: not queryable here ({str(exc)[:120]})")
            continue
        lines.append(f"- `{field}`: " + ", ".join(f"{row['uuid'][:12]}... {row[field]}" for row in rows))
    devices = [d for d in backend.sample() if d.parent is None]
    lines.append("- allsmi, just after: " + "; ".join(
        f"{d.uuid[:12]}... power {d.power_watts} W, limit {d.power_limit_watts} W, used "
        f"{None if d.memory_used_bytes is None else round(d.memory_used_bytes / 2**20)} MiB, details "
        f"{json.dumps(dict(d.details), default=str)[:300]}" for d in devices))
    return "\n".join(lines)


def crosscheck() -> str:
    """tests/hardware (the pass/fail cross-check), run from here as a subprocess."""
    tests = Path(__file__).resolve().parents[1] / "tests" / "hardware"
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "--import-mode=append", "-m",
                           "hardware", "-q", "-rA", str(tests)], capture_output=True, text=True,
                          timeout=180, check=False)
    return f"exit {done.returncode}\n\n```\n{(done.stdout + done.stderr).strip()[-4000:]}\n```"


def scrape(out: Path) -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "allsmi", "serve", "--listen", f"127.0.0.1:{port}",
                               "--processes", "--interval", "1"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        body = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                    body = reply.read().decode()
                if "allsmi_device_power_watts{" in body:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        (out / "metrics.txt").write_text(body)
        keep = [line for line in body.splitlines() if not line.startswith("#") and any(
            line.startswith(name) for name in ("allsmi_device_", "allsmi_process_", "allsmi_holder_",
                                               "allsmi_backend_up"))]
        return "```\n" + "\n".join(keep[:60]) + "\n```"
    finally:
        stop(server)


def stop(server: subprocess.Popen[Any]) -> None:
    """Ask a server to end (SIGTERM), kill it after 10 s."""
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()


def startup_and_idle(runs: int, idle: float) -> str:
    """One-shot start-up of ``allsmi snapshot`` beside ``nvitop --once`` and ``nvidia-smi``
    (interleaved runs, medians of wall and CPU time), then the idle CPU of ``allsmi serve`` and
    ``nvitop-exporter`` at a 1 s interval, running at once (``benchmarks/startup.py``'s
    measurements, on the installed programs: the console scripts beside this Python or on PATH)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import startup  # noqa: E402  (benchmarks/startup.py)

    startup.ENV = dict(os.environ)  # keep PYTHONPATH: the programs may be installed with --target

    def program(name: str) -> str:
        found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
        if found is None:
            raise RuntimeError(f"{name} is not installed here")
        return found

    cwd = tempfile.mkdtemp(prefix="allsmi-startup-")
    cases = {"python -c pass": [sys.executable, "-c", "pass"],
             "allsmi snapshot --format json": [program("allsmi"), "snapshot", "--format", "json"],
             "nvitop --once": [program("nvitop"), "--once"],
             "nvidia-smi --query-gpu (13 fields)": ["nvidia-smi", f"--query-gpu={','.join(QUERY)}",
                                                    "--format=csv,noheader,nounits"]}
    for argv in cases.values():
        startup._time(argv, cwd)
    walls: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            walls[name].append(startup._time(argv, cwd, name))
    wall = {name: statistics.median(v) for name, v in walls.items()}
    cpu = {name: statistics.median(v) for name, v in startup.CPU.items()}
    lines = [f"{runs} interleaved runs each (bytecode compiled), medians:", "",
             "| command | wall | CPU (user+sys) | wall / nvitop | CPU / nvitop |", "|---|---:|---:|---:|---:|"]
    for name in cases:
        lines.append(f"| `{name}` | {wall[name] * 1e3:.0f} ms | {cpu[name] * 1e3:.0f} ms | "
                     f"{wall[name] / wall['nvitop --once']:.2f}x | {cpu[name] / cpu['nvitop --once']:.2f}x |")
    if idle > 0:
        serve = [program("allsmi"), "serve", "--listen", "127.0.0.1:{port}", "--interval", "1"]
        exporter = [program("nvitop-exporter"), "--bind-address", "127.0.0.1", "--port", "{port}",
                    "--interval", "1", "--hostname", "bench"]
        windows = max(3, int(idle // 30))
        idle_cpu = startup.idle_cpu({"allsmi serve --interval 1": serve,
                                     "nvitop-exporter --interval 1": exporter}, idle / windows, windows, cwd)
        lines += ["", f"Idle CPU, both running at once, median of {windows} windows of {idle / windows:g} s:", "",
                  "| exporter | % of one core |", "|---|---:|"]
        lines += [f"| {name} | {value:.3f} % |" for name, value in idle_cpu.items()]
    return "\n".join(lines)


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "(not installed as a distribution)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--load-seconds", type=float, default=90.0)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--no-readings", dest="readings", action="store_false",
                        help="skip the side-by-side readings, the load and the scrape (only start-up)")
    parser.add_argument("--startup-runs", type=int, default=0,
                        help="interleaved start-up runs against nvitop --once (0: skip)")
    parser.add_argument("--idle-seconds", type=float, default=0.0,
                        help="idle CPU of allsmi serve and nvitop-exporter, measured over this long (0: skip)")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    # ``python -m allsmi`` must find the installed allsmi, not a checkout's source tree (whose
    # backends are packaged from its top-level backends/ folder): run from outside it.
    os.chdir(tempfile.gettempdir())
    out.mkdir(parents=True, exist_ok=True)
    report: list[str] = ["# allsmi's NVIDIA backend on a real GPU", ""]

    def step(title: str, body: Callable[[], str]) -> None:
        started = time.monotonic()
        try:
            text = body()
        except Exception:
            text = "FAILED:\n\n```\n" + traceback.format_exc()[-3000:] + "```"
        report.extend([f"## {title}", "", text, "", f"({time.monotonic() - started:.1f} s)", ""])
        (out / "report.md").write_text("\n".join(report))
        print(f"{title}: {time.monotonic() - started:.1f} s", flush=True)

    from allsmi import __version__
    from allsmi.backends.nvidia import NvidiaBackend

    step("Versions", lambda: "```\n" + run(["nvidia-smi", "--version"]).strip()
         + f"\n\nPython {platform.python_version()}, nvidia-ml-py (pynvml) "
         f"{_version('nvidia-ml-py')}, allsmi {__version__}, {platform.platform()}\n```")
    step("nvidia-smi -q (saved)", lambda: (out / "nvidia-smi-q.xml").write_text(run(["nvidia-smi", "-q", "-x"]))
         and "saved as nvidia-smi-q.xml")
    if args.startup_runs > 0:
        step("Start-up and idle CPU against nvitop", lambda: startup_and_idle(args.startup_runs, args.idle_seconds))
    if not args.readings:
        return
    backend = NvidiaBackend()
    try:
        backend.open()
    except Exception as exc:  # no driver, no GPU: the steps above are in the report, say why
        step("The NVIDIA backend", lambda: f"FAILED to open: {exc}")
        raise SystemExit(f"nvidia_hardware: the NVIDIA backend did not open ({exc}); "
                         f"the report so far: {out / 'report.md'}") from None
    backend.sample()
    step("Idle: the same moment, field by field", lambda: side_by_side(backend)[0])
    step("Idle: what else nvidia-smi reports", lambda: extra_fields(backend))
    step("Idle: sampling cost", lambda: timings(backend, args.cycles))
    step("One-shot snapshot (saved)", lambda: (out / "snapshot-idle.json").write_text(
        run([sys.executable, "-m", "allsmi", "snapshot", "--format", "json"])) and "saved as snapshot-idle.json")
    loads: list[subprocess.Popen[str]] = []
    if shutil.which("nvidia-smi"):
        for duty in ("1.0", "0.1"):
            loads.append(subprocess.Popen([sys.executable, "-c", LOAD, duty, str(args.load_seconds)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"}))
    try:
        def started() -> str:
            for proc in loads:
                line = proc.stdout.readline() if proc.stdout else ""
                if "ready" not in line:
                    raise RuntimeError(f"load did not start: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(4)  # let utilization (a sampled average) and power settle
            return f"{len(loads)} load processes: pids {[proc.pid for proc in loads]}"

        step("Load", started)
        holder: dict[str, list[Any]] = {}

        def loaded() -> str:
            table, ours = side_by_side(backend)
            holder["ours"] = ours
            return table

        step("Under load: the same moment, field by field", loaded)
        step("Under load: what else nvidia-smi reports", lambda: extra_fields(backend))
        step("Under load: tests/hardware cross-check", crosscheck)
        step("Under load: processes", lambda: processes(holder.get("ours") or list(backend.sample()), out))
        step("Under load: energy counter against power", lambda: energy(backend))
        step("Under load: sampling cost", lambda: timings(backend, args.cycles))
        step("Under load: snapshot (saved)", lambda: (out / "snapshot-load.json").write_text(
            run([sys.executable, "-m", "allsmi", "snapshot", "--format", "json"])) and "saved as snapshot-load.json")
        step("Under load: one scrape of `allsmi serve --processes`", lambda: scrape(out))
    finally:
        for proc in loads:
            proc.kill()
        backend.close()
    print(json.dumps({"report": str(out / "report.md")}))


if __name__ == "__main__":
    main()

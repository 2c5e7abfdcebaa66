"""Dashboard benchmark: CPU and resident memory at a 1 s refresh, and key-press-to-frame latency.

Usage: python benchmarks/dashboard.py [--seconds 30] [--rounds 3] [--nvitop-site PATH] [--skip-cpu]
       python benchmarks/dashboard.py --together WINDOWS [--seconds 60] [--nvitop-site PATH]
           [--baseline-python PYTHON]

``--together`` runs allsmi, nvitop and the Textual floor (and a baseline install's allsmi) all
at once, each in its own terminal, and compares their CPU over the same windows: the ratio to
nvitop then sees the same load, which measuring them in turn does not. It also runs the floor
with the fake-NVML harness loaded (pynvml and the fake libnvidia-ml, which allsmi and nvitop
carry under the harness and the plain floor does not), to show allsmi's own share.

1. CPU (percent of one core) of the whole dashboard process in a real
   terminal (tmux, 200x60) at ``--interval 1``, measured with psutil over
   ``--seconds`` after a warm-up, reported as the median of 5-second slices,
   with the resident memory (RSS) of the process tree sampled at each slice,
   and the same medians as milliseconds of CPU per refresh cycle:
   * allsmi and nvitop on the same 8 fake H100s (the test suite's fake
     libnvidia-ml behind the real pynvml; nvitop only if ``--nvitop-site``
     points at a site-packages holding nvitop, e.g. a throw-away venv);
   * the Textual floor: a minimal Textual app redrawing a 40-line text table every
     second (``benchmarks/_textual_floor.py``), in the same terminal; allsmi, nvitop
     and the floor are measured in turn, ``--rounds`` times, and the medians reported
     (target: allsmi's CPU at most nvitop's, its RSS at most the floor's + 8 MiB);
   * allsmi ``--simulate`` with 8 and with 512 devices, and the collector
     alone on the same 512-device scenario (what the UI itself adds is the
     difference).
2. The memory floor: RSS of fresh interpreters after importing nothing, Textual's App,
   the dashboard, everything a running dashboard imports (the module list is read from
   one, run 10 s in a terminal), pynvml, and the fake-NVML harness; and from these, what
   each MiB of allsmi's RSS above the running floor is.
3. Key press to next frame with 1024 simulated devices (collector running
   at 1 s): the app runs headless in this process; every frame is still
   composed and turned into terminal output (the step headless mode skips),
   and the time from sending a sort key to that frame is recorded.

Prints medians, the machine and its load; see docs/benchmarks/dashboard.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from _progress import progress  # noqa: E402
PYTHON = sys.executable
ALLSMI = str(Path(PYTHON).with_name("allsmi"))
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


# -- scenarios --------------------------------------------------------------------------

def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def scenario(path: Path, counts: dict[str, int]) -> Path:
    """The built-in mixed node with ``counts`` devices per backend and no MIG partitions."""
    base = tomllib.loads((REPO / "backends" / "simulated" / "scenarios" / "mixed.toml").read_text())
    lines = [f"name = {_toml_value(path.stem)}", f"seed = {base['seed']}",
             f"epoch = {_toml_value(base['epoch'])}", f"users = {_toml_value(base['users'])}",
             f"commands = {_toml_value(base['commands'])}"]
    for device in base["devices"]:
        if counts.get(device["backend"], 0) <= 0:
            continue
        lines.append("\n[[devices]]")
        for key, value in {**device, "count": counts[device["backend"]]}.items():
            lines.append(f"{key} = {_toml_value(value)}")
    path.write_text("\n".join(lines) + "\n")
    return path


# -- CPU in a terminal ---------------------------------------------------------------------

def _tree_cpu(pid: int) -> float:
    return _tree(pid)[0]


def _tree(pid: int) -> tuple[float, int]:
    """(CPU seconds, resident bytes) of ``pid`` and its children."""
    total, rss = 0.0, 0
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
                rss += proc.memory_info().rss
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return total, rss


def measure_cpu(command: list[str], seconds: float, warmup: float = 6.0, width: int = 200,
                height: int = 50, tty: bool = True) -> tuple[float, float, float]:
    """(median of 5 s slices, mean) CPU percent of one core of ``command``'s process tree,
    and the median of its resident memory (MiB) sampled at each slice."""
    tmux = shutil.which("tmux")
    server = f"allsmi-bench-{os.getpid()}-{time.monotonic_ns()}"  # a fresh tmux server each time
    proc: subprocess.Popen[bytes] | None = None
    if tty:
        if tmux is None:
            raise SystemExit("tmux is needed (apt-get install tmux)")
        subprocess.run([tmux, "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "b",
                        "-x", str(width), "-y", str(height), shlex.join(command)],
                       check=True, env={**os.environ, "TERM": "xterm-256color"})
        pid = int(subprocess.run([tmux, "-L", server, "display", "-p", "-t", "b", "#{pane_pid}"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    else:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = proc.pid
    try:
        time.sleep(warmup)
        slices, rss = [], []
        start_cpu, start = _tree_cpu(pid), time.monotonic()
        last_cpu, last = start_cpu, start
        while time.monotonic() - start < seconds:
            time.sleep(5.0)
            (cpu, resident), now = _tree(pid), time.monotonic()
            slices.append(100.0 * (cpu - last_cpu) / (now - last))
            rss.append(resident / 2**20)
            last_cpu, last = cpu, now
        return (statistics.median(slices), 100.0 * (last_cpu - start_cpu) / (last - start),
                statistics.median(rss))
    finally:
        if tty:
            subprocess.run([tmux, "-L", server, "kill-server"], check=False)  # type: ignore[list-item]
        elif proc is not None:
            proc.terminate()
            proc.wait(10)


def measure_together(commands: dict[str, list[str]], seconds: float, windows: int, width: int,
                     height: int, warmup: float = 8.0) -> dict[str, tuple[float, float]]:
    """Each command in its own terminal (tmux ``width`` x ``height``), all running at once:
    the median over ``windows`` windows of ``seconds`` of each one's CPU (percent of one core,
    the same windows for all) and its median RSS (MiB). Ratios from one run see the same load."""
    tmux = shutil.which("tmux")
    if tmux is None:
        raise SystemExit("tmux is needed (apt-get install tmux)")
    servers = {name: f"allsmi-bench-{os.getpid()}-{i}" for i, name in enumerate(commands)}
    pids: dict[str, int] = {}
    try:
        for name, command in commands.items():
            subprocess.run([tmux, "-L", servers[name], "-f", "/dev/null", "new-session", "-d", "-s",
                            "b", "-x", str(width), "-y", str(height), shlex.join(command)],
                           check=True, env={**os.environ, "TERM": "xterm-256color"})
            pids[name] = int(subprocess.run([tmux, "-L", servers[name], "display", "-p", "-t", "b",
                                             "#{pane_pid}"], capture_output=True, text=True,
                                            check=True).stdout.strip())
        time.sleep(warmup)
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        rss: dict[str, list[float]] = {name: [] for name in commands}
        with progress("dashboards side by side", total=windows) as done:
            for _ in range(windows):
                before = {name: _tree(pid)[0] for name, pid in pids.items()}
                started = time.monotonic()
                time.sleep(seconds)
                wall = time.monotonic() - started
                for name, pid in pids.items():
                    used, resident = _tree(pid)
                    cpu[name].append(100.0 * (used - before[name]) / wall)
                    rss[name].append(resident / 2**20)
                done.advance()
        return {name: (statistics.median(cpu[name]), statistics.median(rss[name])) for name in commands}
    finally:
        for server in servers.values():
            subprocess.run([tmux, "-L", server, "kill-server"], check=False, capture_output=True)


COLLECTOR_ONLY = """
import sys, time
from allsmi.backends.simulated import simulated_backends
from allsmi.collection.collector import Collector
c = Collector(simulated_backends(sys.argv[1]), interval_seconds=1.0)
c.start()
time.sleep(3600)
"""


# -- key to frame --------------------------------------------------------------------------

async def key_to_frame(devices_path: Path, presses: int = 30) -> list[float]:
    """Milliseconds from a sort key to the frame that shows the new order (1024 devices)."""
    from textual._compositor import CompositorUpdate

    from allsmi.backends.simulated import simulated_backends
    from allsmi.collection.collector import Collector
    from allsmi.dashboard.screen.app import DashboardApp
    from allsmi.dashboard.sources import NodeSource

    collector = Collector(simulated_backends(devices_path), interval_seconds=1.0)
    collector.start()
    collector.wait_for_first(30)
    app = DashboardApp(NodeSource(collector))
    frames: list[float] = []
    applied: list[float] = []
    original_display = app._display
    original_refresh = app.refresh_view

    def display(screen: Any, renderable: Any) -> None:
        if isinstance(renderable, CompositorUpdate):
            renderable.render_segments(app.console)  # the terminal output headless mode skips
            frames.append(time.perf_counter())
        original_display(screen, renderable)

    def refresh_view() -> None:
        original_refresh()
        applied.append(time.perf_counter())

    app._display = display  # type: ignore[method-assign]
    app.refresh_view = refresh_view  # type: ignore[method-assign]
    latencies: list[float] = []
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause(2.0)
            keys = ["u", "m", "w", "t", "n"]  # n: index order (i opens the idle view)
            for i in range(presses):
                key = keys[i % len(keys)]
                frames.clear()
                applied.clear()
                sent = time.perf_counter()
                await pilot.press(key)
                await pilot.pause(0.3)
                done = next((t for t in applied if t >= sent), None)
                frame = next((t for t in frames if done is not None and t >= done), None)
                if frame is not None:
                    latencies.append(1000.0 * (frame - sent))
                await pilot.pause(0.2)
            assert app.device_table.row_count >= 1024, app.device_table.row_count
    finally:
        collector.close()
    return latencies


# -- main --------------------------------------------------------------------------------------

def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, {platform.system()}"


FLOOR = """
import sys, psutil
for name in sys.argv[1:]:
    __import__(name)
print(psutil.Process().memory_info().rss)
"""


HARNESS_FLOOR = """
import runpy, sys, psutil
harness, site, modules = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = [harness, "8", site, "--", "none"]
runpy.run_path(harness, run_name="__main__")
for name in modules:
    __import__(name)
print(psutil.Process().memory_info().rss)
"""


FLOOR_WITH_HARNESS = """
import runpy, sys
harness, site, floor = sys.argv[1], sys.argv[2], sys.argv[3]
sys.argv = [harness, "8", site, "--", "none"]
runpy.run_path(harness, run_name="__main__")
sys.argv = [floor, "40"]
runpy.run_path(floor, run_name="__main__")
"""


MODULES_DUMP = """
import os, runpy, sys, threading, time
harness, site, out = sys.argv[1], sys.argv[2], sys.argv[3]
def dump():
    time.sleep(10)
    with open(out, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
    os._exit(0)
threading.Thread(target=dump, daemon=True).start()
sys.argv = [harness, "8", site, "--", "allsmi", "--interval", "1"]
runpy.run_path(harness, run_name="__main__")
"""


def running_modules(nvitop_site: str | None, tmpdir: Path) -> list[str]:
    """The allsmi, click and pynvml modules a running 8-GPU dashboard has imported (it runs
    10 s in a terminal, then writes its ``sys.modules``); the harness's own are left out."""
    out = tmpdir / "modules.txt"
    server = f"allsmi-mods-{os.getpid()}"
    command = [PYTHON, "-c", MODULES_DUMP, str(REPO / "benchmarks" / "_fake_nvml_run.py"),
               nvitop_site or "-", str(out)]
    subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "m", "-x", "200",
                    "-y", "60", shlex.join(["env", f"XDG_CONFIG_HOME={tmpdir}", *command])], check=True,
                   env={**os.environ, "TERM": "xterm-256color"})
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(0.5)
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], check=False, capture_output=True)
    names = out.read_text().split() if out.exists() else []
    return [n for n in names if n.split(".")[0] in ("allsmi", "click", "pynvml")]


def memory_floor(nvitop_site: str | None, modules: Sequence[str] = ()) -> list[tuple[str, float]]:
    """RSS (MiB) of fresh interpreters after importing nothing, Textual's App, the dashboard
    (and nvitop's UI, when it is at hand), and of Textual's App with the fake-NVML harness
    (the fake libnvidia-ml and ``pynvml``, which the 8-GPU runs carry and the floor does not)."""
    out = []
    cases = [("python + psutil", []), ("+ textual.app", ["textual.app"]),
             ("+ allsmi.dashboard.screen.app", ["allsmi.dashboard.screen.app"])]
    if modules:
        without = [m for m in modules if m.split(".")[0] != "pynvml"]
        cases.append(("+ what it runs: CLI, collector, backends, click", ["allsmi.dashboard.screen.app", *without]))
        cases.append(("+ pynvml (the NVML backend's binding)", ["allsmi.dashboard.screen.app", *modules]))
    if nvitop_site:
        cases.append(("+ nvitop.cli (for comparison)", ["nvitop.cli"]))
    for label, modules in cases:
        script = (f"import sys; sys.path.append({nvitop_site!r})\n" if nvitop_site else "") + FLOOR
        rss = [int(subprocess.run([PYTHON, "-c", script, *modules], capture_output=True, text=True,
                                  check=True).stdout) for _ in range(3)]
        out.append((label, statistics.median(rss) / 2**20))
    harness = str(REPO / "benchmarks" / "_fake_nvml_run.py")
    rss = [int(subprocess.run([PYTHON, "-c", HARNESS_FLOOR, harness, nvitop_site or "-", "textual.app"],
                              capture_output=True, text=True, check=True).stdout) for _ in range(3)]
    out.append(("textual.app + fake-NVML harness (8 GPUs, pynvml)", statistics.median(rss) / 2**20))
    return out


def breakdown(allsmi_rss: float, floor_rss: float, floors: dict[str, float]) -> list[tuple[str, float]]:
    """Where allsmi's RSS above the running Textual floor goes (MiB): the dashboard's modules
    beyond Textual's App, the other modules the running dashboard imports (CLI, collector,
    backends, click), pynvml, the fake libnvidia-ml of the harness (benchmark only), and the
    rest: the running dashboard's own state (snapshots, widgets, history, caches, threads)."""
    textual = floors["+ textual.app"]
    dashboard = floors["+ allsmi.dashboard.screen.app"]
    runs = floors.get("+ what it runs: CLI, collector, backends, click", dashboard)
    nvml = floors.get("+ pynvml (the NVML backend's binding)", runs)
    harness = floors["textual.app + fake-NVML harness (8 GPUs, pynvml)"] - textual - (nvml - runs)
    parts = [("allsmi.dashboard.screen.app beyond textual.app (imports)", dashboard - textual),
             ("CLI, collector, backends, click (imports)", runs - dashboard),
             ("pynvml (imports; nvitop carries it too)", nvml - runs),
             ("the harness's fake libnvidia-ml (benchmark only)", harness)]
    parts.append(("the running dashboard's state (the rest)",
                  allsmi_rss - floor_rss - sum(mib for _, mib in parts)))
    return parts


def _median_rows(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    return tuple(statistics.median(r[i] for r in runs) for i in range(3))  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure allsmi and nvitop on the 8 fake H100 this many times, "
                             "alternating, and report the medians")
    parser.add_argument("--nvitop-site", default=None,
                        help="site-packages directory holding nvitop (e.g. of a throw-away venv)")
    parser.add_argument("--skip-cpu", action="store_true")
    parser.add_argument("--together", type=int, default=0, metavar="WINDOWS",
                        help="instead: allsmi, nvitop and the Textual floor all running at once, "
                             "CPU over the same WINDOWS windows of --seconds each (medians)")
    parser.add_argument("--baseline-python", help="with --together: also this install's allsmi")
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--height", type=int, default=60)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    if args.together:
        together(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        eight = scenario(tmpdir / "eight.toml", {"nvidia": 8})
        big = scenario(tmpdir / "five12.toml", {"nvidia": 128, "amd": 128, "gaudi": 128, "furiosa": 64,
                                                "rebellions": 32, "tenstorrent": 32})
        huge = scenario(tmpdir / "k.toml", {"nvidia": 256, "amd": 256, "gaudi": 256, "furiosa": 128,
                                            "rebellions": 64, "tenstorrent": 64})
        fake = [PYTHON, str(REPO / "benchmarks" / "_fake_nvml_run.py"), "8", args.nvitop_site or "-", "--"]
        if not args.skip_cpu:
            rows: list[tuple[str, float, float, float]] = []
            env_cmd = ["env", f"XDG_CONFIG_HOME={tmpdir}"]
            ours, theirs, floor = [], [], []
            size = {"width": args.width, "height": args.height}
            rounds = max(1, args.rounds)
            with progress("dashboard CPU", total=rounds * (3 if args.nvitop_site else 2) + 3) as done:
                for _ in range(rounds):
                    ours.append(measure_cpu(env_cmd + fake + ["allsmi", "--interval", "1"], args.seconds,
                                            **size))
                    done.advance()
                    if args.nvitop_site:
                        theirs.append(measure_cpu(env_cmd + fake + ["nvitop", "--interval", "1"],
                                                  args.seconds, **size))
                        done.advance()
                    floor.append(measure_cpu([PYTHON, str(REPO / "benchmarks" / "_textual_floor.py"), "40"],
                                             args.seconds, **size))
                    done.advance()
                rows.append(("allsmi, 8 fake H100 (NVML path)", *_median_rows(ours)))
                if args.nvitop_site:
                    rows.append(("nvitop 8 fake H100 (same fake NVML)", *_median_rows(theirs)))
                rows.append(("Textual floor: 40-line table redrawn each 1 s", *_median_rows(floor)))
                for name, command, tty in (
                        ("allsmi --simulate, 8 devices",
                         env_cmd + [ALLSMI, "--simulate", str(eight), "--interval", "1"], True),
                        ("allsmi --simulate, 512 devices",
                         env_cmd + [ALLSMI, "--simulate", str(big), "--interval", "1"], True),
                        ("collector alone, 512 simulated devices (no UI)",
                         [PYTHON, "-c", COLLECTOR_ONLY, str(big)], False)):
                    rows.append((name, *measure_cpu(command, args.seconds, tty=tty)))
                    done.advance()
            print(f"\nCPU (percent of one core) and RSS at a 1 s refresh, tmux {args.width}x{args.height}, "
                  f"{args.seconds:.0f} s after warm-up, {max(1, args.rounds)} round(s) on the 8 fake H100:")
            for name, median, mean, rss in rows:
                print(f"  {name:<48} median {median:6.2f} %   mean {mean:6.2f} %   RSS {rss:6.1f} MiB")
            if args.nvitop_site:
                print(f"  ratio allsmi / nvitop (8 fake H100): CPU {rows[0][1] / rows[1][1]:.2f}, "
                      f"RSS {rows[0][3] / rows[1][3]:.2f}")
            floor_rss = _median_rows(floor)[2]
            print(f"  allsmi RSS above the Textual floor: {rows[0][3] - floor_rss:+.1f} MiB (target: at most +8)")
            print("\nCPU time per 1 s refresh cycle (the medians above as milliseconds of CPU a cycle):")
            for name, median, _mean, _rss in rows:
                print(f"  {name:<48} {10.0 * median:6.1f} ms")
        floors = memory_floor(args.nvitop_site, running_modules(args.nvitop_site, tmpdir))
        print("\nmemory floor (fresh interpreter, RSS after imports):")
        for label, rss in floors:
            print(f"  {label:<52} {rss:6.1f} MiB")
        if not args.skip_cpu:
            print(f"\nallsmi's RSS above the running Textual floor ({rows[0][3]:.1f} - {floor_rss:.1f} MiB):")
            for label, mib in breakdown(rows[0][3], floor_rss, dict(floors)):
                print(f"  {label:<52} {mib:+6.1f} MiB")
        latencies = asyncio.run(key_to_frame(huge))
        print(f"\nkey press -> next frame, 1024 devices, 200x50, {len(latencies)} presses: "
              f"median {statistics.median(latencies):.1f} ms, "
              f"p95 {sorted(latencies)[int(0.95 * (len(latencies) - 1))]:.1f} ms, "
              f"max {max(latencies):.1f} ms")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def together(args: argparse.Namespace) -> None:
    """``--together``: the three dashboards at once over the same windows (see
    :func:`measure_together`), the ratios to nvitop and the RSS above the floor."""
    with tempfile.TemporaryDirectory() as tmp:
        fake = [PYTHON, str(REPO / "benchmarks" / "_fake_nvml_run.py"), "8", args.nvitop_site or "-", "--"]
        env_cmd = ["env", f"XDG_CONFIG_HOME={tmp}"]
        floor = str(REPO / "benchmarks" / "_textual_floor.py")
        commands = {"allsmi": env_cmd + fake + ["allsmi", "--interval", "1"],
                    "Textual floor": [PYTHON, floor, "40"],
                    # the same floor with what the 8-GPU runs carry and it does not (pynvml and
                    # the fake libnvidia-ml): what is left above it is allsmi's own
                    "Textual floor + fake NVML": [PYTHON, "-c", FLOOR_WITH_HARNESS, fake[1],
                                                  args.nvitop_site or "-", floor]}
        if args.baseline_python:  # another install (e.g. the previous commit's), same harness
            commands["allsmi (baseline)"] = env_cmd + [args.baseline_python, *fake[1:]] + [
                "allsmi", "--interval", "1"]
        if args.nvitop_site:
            commands["nvitop"] = env_cmd + fake + ["nvitop", "--interval", "1"]
        got = measure_together(commands, args.seconds, args.together, args.width, args.height)
    print(f"\nAll running at once, tmux {args.width}x{args.height}, 8 fake H100, --interval 1; "
          f"medians of {args.together} windows of {args.seconds:g} s; load average "
          f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} at the end\n")
    print("| dashboard | CPU, % of one core | ratio to nvitop | RSS | above the Textual floor |")
    print("|---|---:|---:|---:|---:|")
    peer = got.get("nvitop", (0.0, 0.0))[0]
    floor = got["Textual floor"][1]
    for name, (cpu, rss) in got.items():
        ratio = f"{cpu / peer:.2f}x" if peer else "-"
        print(f"| {name} | {cpu:.2f} % | {ratio} | {rss:.1f} MiB | {rss - floor:+.1f} MiB |")
    carried = got["Textual floor + fake NVML"][1]
    print(f"\nallsmi above the floor carrying pynvml and the fake libnvidia-ml: "
          f"{got['allsmi'][1] - carried:+.1f} MiB")


if __name__ == "__main__":
    main()

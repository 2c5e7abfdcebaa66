"""Dashboard benchmark: CPU at a 1 s refresh, and key-press-to-frame latency.

Usage: python benchmarks/dashboard.py [--seconds 30] [--nvitop-site PATH] [--skip-cpu]

1. CPU (percent of one core) of the whole dashboard process in a real
   terminal (tmux, 200x50) at ``--interval 1``, measured with psutil over
   ``--seconds`` after a warm-up, reported as the median of 5-second slices:
   * allsmi and nvitop on the same 8 fake H100s (the test suite's fake
     libnvidia-ml behind the real pynvml; nvitop only if ``--nvitop-site``
     points at a site-packages holding nvitop, e.g. a throw-away venv);
   * allsmi ``--simulate`` with 8 and with 512 devices, and the collector
     alone on the same 512-device scenario (what the UI itself adds is the
     difference).
2. Key press to next frame with 1024 simulated devices (collector running
   at 1 s): the app runs headless in this process; every frame is still
   composed and turned into terminal output (the step headless mode skips),
   and the time from sending a sort key to that frame is recorded.

Prints medians and the machine; see docs/benchmarks/dashboard.md.
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
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
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
    base = tomllib.loads((REPO / "backends" / "scenarios" / "mixed.toml").read_text())
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
    total = 0.0
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return total


def measure_cpu(command: list[str], seconds: float, warmup: float = 6.0, width: int = 200,
                height: int = 50, tty: bool = True) -> tuple[float, float]:
    """(median of 5 s slices, mean) CPU percent of one core of ``command``'s process tree."""
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
        slices = []
        start_cpu, start = _tree_cpu(pid), time.monotonic()
        last_cpu, last = start_cpu, start
        while time.monotonic() - start < seconds:
            time.sleep(5.0)
            cpu, now = _tree_cpu(pid), time.monotonic()
            slices.append(100.0 * (cpu - last_cpu) / (now - last))
            last_cpu, last = cpu, now
        return statistics.median(slices), 100.0 * (last_cpu - start_cpu) / (last - start)
    finally:
        if tty:
            subprocess.run([tmux, "-L", server, "kill-server"], check=False)  # type: ignore[list-item]
        elif proc is not None:
            proc.terminate()
            proc.wait(10)


COLLECTOR_ONLY = """
import sys, time
from allsmi.backends.simulated import simulated_backends
from allsmi.collector import Collector
c = Collector(simulated_backends(sys.argv[1]), interval_seconds=1.0)
c.start()
time.sleep(3600)
"""


# -- key to frame --------------------------------------------------------------------------

async def key_to_frame(devices_path: Path, presses: int = 30) -> list[float]:
    """Milliseconds from a sort key to the frame that shows the new order (1024 devices)."""
    from textual._compositor import CompositorUpdate

    from allsmi.backends.simulated import simulated_backends
    from allsmi.collector import Collector
    from allsmi.dashboard.app import DashboardApp
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
            keys = ["u", "m", "w", "t", "i"]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--nvitop-site", default=None,
                        help="site-packages directory holding nvitop (e.g. of a throw-away venv)")
    parser.add_argument("--skip-cpu", action="store_true")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        eight = scenario(tmpdir / "eight.toml", {"nvidia": 8})
        big = scenario(tmpdir / "five12.toml", {"nvidia": 128, "amd": 128, "gaudi": 128, "furiosa": 64,
                                                "rebellions": 32, "tenstorrent": 32})
        huge = scenario(tmpdir / "k.toml", {"nvidia": 256, "amd": 256, "gaudi": 256, "furiosa": 128,
                                            "rebellions": 64, "tenstorrent": 64})
        fake = [PYTHON, str(REPO / "benchmarks" / "_fake_nvml_run.py"), "8", args.nvitop_site or "-", "--"]
        if not args.skip_cpu:
            rows: list[tuple[str, float, float]] = []
            env_cmd = ["env", f"XDG_CONFIG_HOME={tmpdir}"]
            rows.append(("allsmi, 8 fake H100 (NVML path)",
                         *measure_cpu(env_cmd + fake + ["allsmi", "--interval", "1"], args.seconds)))
            if args.nvitop_site:
                rows.append(("nvitop 8 fake H100 (same fake NVML)",
                             *measure_cpu(env_cmd + fake + ["nvitop", "--interval", "1"], args.seconds)))
            rows.append(("allsmi --simulate, 8 devices",
                         *measure_cpu(env_cmd + [ALLSMI, "--simulate", str(eight), "--interval", "1"],
                                      args.seconds)))
            rows.append(("allsmi --simulate, 512 devices",
                         *measure_cpu(env_cmd + [ALLSMI, "--simulate", str(big), "--interval", "1"],
                                      args.seconds)))
            rows.append(("collector alone, 512 simulated devices (no UI)",
                         *measure_cpu([PYTHON, "-c", COLLECTOR_ONLY, str(big)], args.seconds, tty=False)))
            print(f"\nCPU at a 1 s refresh, tmux 200x50, {args.seconds:.0f} s after warm-up "
                  "(percent of one core):")
            for name, median, mean in rows:  # noqa: B007
                print(f"  {name:<48} median {median:6.2f} %   mean {mean:6.2f} %")
            if args.nvitop_site:
                print(f"  ratio allsmi / nvitop (8 fake H100): {rows[0][1] / rows[1][1]:.2f}")
        latencies = asyncio.run(key_to_frame(huge))
        print(f"\nkey press -> next frame, 1024 devices, 200x50, {len(latencies)} presses: "
              f"median {statistics.median(latencies):.1f} ms, "
              f"p95 {sorted(latencies)[int(0.95 * (len(latencies) - 1))]:.1f} ms, "
              f"max {max(latencies):.1f} ms")


if __name__ == "__main__":
    main()

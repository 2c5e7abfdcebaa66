#!/usr/bin/env python3
"""Cold start of `allsmi snapshot` and idle CPU of `allsmi serve`: plain and `[all]` installs, nvitop.

Makes (or refreshes) two virtual environments from this checkout, a plain
``pip install .`` and a ``pip install '.[all]'`` (amdsmi, grpcio, protobuf,
pyarrow, bcrypt on a host with no AMD GPU, no Furiosa device, no kubelet socket
and no web config), and a site of nvitop 1.7.2 and nvitop-exporter 1.7.2
(``pip install --target``). Then, in one run:

* start-up: every command many times, interleaved so that machine noise hits
  them alike; medians and ratios to ``python -c pass`` (the aim: 3x with no
  hardware), of ``[all]`` to plain (target: within 10 %) and of allsmi to
  ``nvitop --once`` on the same 8 fake H100s (the test suite's fake
  libnvidia-ml under the real pynvml, both programs started through the same
  harness, which is timed alone too; target: at most 1x). The fake H100s answer
  GPM as Hopper GPUs do, so a snapshot's one cycle waits for its 0.1 s activity
  interval (``backends/nvidia/gpm.py``), which nvitop does not read; the same
  snapshot with ``[backends.nvidia] gpm = false`` shows what that wait costs;
* idle CPU: ``allsmi serve --interval 1`` of both installs (8 fake H100, and no
  hardware) and ``nvitop-exporter --interval 1`` on the same 8 fake H100, all
  running at once and measured over the same windows (medians of the windows;
  targets: ``[all]`` within 10 % of plain, plain at most nvitop-exporter's).

Bytecode is compiled first and ``PYTHONDONTWRITEBYTECODE`` is dropped for the
measured commands: a user's installed package has its ``.pyc`` files. Commands
run in an empty directory (nothing there shadows an installed module).
Usage: ``python benchmarks/startup.py [--runs N] [--idle SECONDS] [--workdir DIR]``
(any Python 3.10+; the environments are kept in ``--workdir`` and reinstalled
from the checkout on each run).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402
from _progress import progress  # noqa: E402


REPO = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items()
       if k not in ("PYTHONDONTWRITEBYTECODE", "ALLSMI_CONFIG", "PYTHONPATH", "VIRTUAL_ENV")}
NVITOP = ["nvitop==1.7.2", "nvitop-exporter==1.7.2"]
HARNESS = str(REPO / "benchmarks" / "_fake_nvml_run.py")


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                   check=True, env=ENV, cwd=REPO, stdout=subprocess.DEVNULL)


def prepare(workdir: Path) -> tuple[dict[str, Path], Path]:
    """``{"plain": python, "[all]": python}`` and the nvitop site, made or refreshed."""
    pythons = {}
    for name, spec in (("plain", "."), ("[all]", ".[all]")):
        venv = workdir / ("venv-" + name.strip("[]"))
        python = venv / "bin" / "python"
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            _pip(python, spec)
        else:  # the checkout as it is now, dependencies as they were
            _pip(python, "--no-deps", "--force-reinstall", ".")
        pythons[name] = python
    site = workdir / "nvitop-site"
    if not (site / "nvitop_exporter").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--target", str(site), *NVITOP], check=True, env=ENV, stdout=subprocess.DEVNULL)
    for python in pythons.values():
        subprocess.run([str(python), "-m", "compileall", "-q", str(python.parents[1] / "lib"),
                        str(site), str(REPO / "tests")], env=ENV, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
    return pythons, site


CPU: dict[str, list[float]] = {}


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(argv: list[str], cwd: str, name: str = "") -> float:
    """Wall seconds of one run; its CPU seconds (user + system) go to ``CPU[name]``, a
    figure that other work on a shared machine disturbs far less than the wall time."""
    # No timeout= here: with one, Popen.wait polls with sleeps of up to 50 ms, which
    # would quantize every measurement. A blocking waitpid measures the real exit time.
    cpu = _cpu_children()
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   stdin=subprocess.DEVNULL, env=ENV, cwd=cwd)
    wall = time.perf_counter() - started
    if name:
        CPU.setdefault(name, []).append(_cpu_children() - cpu)
    return wall


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    """The process's CPU time: the sum of its threads' run time in nanoseconds from
    ``/proc/PID/task/*/schedstat`` where the kernel keeps it (a 10 % change of an idle server's
    0.2 % is below one clock tick of a 30 s window), else utime + stime in clock ticks. The
    servers measured keep their threads (a thread that ended in a window would take its time
    out of the sum)."""
    total, found = 0, False
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
                found = True
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        pass
    if found:
        return total / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def idle_cpu(servers: dict[str, list[str]], seconds: float, windows: int, cwd: str) -> dict[str, float]:
    """Median % of a core of each server over the same ``windows`` windows of ``seconds``."""
    procs: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    try:
        for name, argv in servers.items():
            port = _port()
            argv = [a.replace("{port}", str(port)) for a in argv]
            procs[name] = (subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            stdin=subprocess.DEVNULL, env=ENV, cwd=cwd),
                           f"http://127.0.0.1:{port}/metrics")
        for name, (proc, url) in procs.items():
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"{name} exited with {proc.returncode}")
                try:
                    urllib.request.urlopen(url, timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{name} did not serve {url} within 60 s") from None
                    time.sleep(0.2)
        time.sleep(3)  # past start-up and the first cycles
        samples: dict[str, list[float]] = {name: [] for name in procs}
        with progress(f"idle CPU of {len(procs)} servers", total=windows) as done:
            for _ in range(windows):
                before = {name: _cpu_seconds(p.pid) for name, (p, _) in procs.items()}
                started = time.monotonic()
                time.sleep(seconds)
                wall = time.monotonic() - started
                for name, (p, _) in procs.items():
                    samples[name].append(100 * (_cpu_seconds(p.pid) - before[name]) / wall)
                done.advance()
        return {name: statistics.median(values) for name, values in samples.items()}
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle-CPU measurement (0: skip)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "allsmi-startup-bench")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    pythons, site = prepare(args.workdir)
    plain, full = pythons["plain"], pythons["[all]"]
    empty = tempfile.mkdtemp(prefix="allsmi-startup-cwd-")

    def allsmi(python: Path) -> str:
        return str(python.with_name("allsmi"))

    def fake(python: Path, *program: str) -> list[str]:
        return [str(python), HARNESS, "8", str(site), "--", *program]

    gpm_off = args.workdir / "gpm-off.toml"  # what the GPM interval costs (below)
    gpm_off.write_text("[backends.nvidia]\ngpm = false\n")
    cases = {
        "python -c pass": [str(plain), "-c", "pass"],
        "allsmi snapshot --format json, no hardware, plain": [allsmi(plain), "snapshot", "--format", "json"],
        "allsmi snapshot --format json, no hardware, [all]": [allsmi(full), "snapshot", "--format", "json"],
        "harness alone (fake NVML, 8 H100, no program)": fake(plain, "none"),
        "allsmi snapshot --format json, 8 fake H100, plain": fake(plain, "allsmi", "snapshot", "--format", "json"),
        "allsmi snapshot --format json, 8 fake H100, [all]": fake(full, "allsmi", "snapshot", "--format", "json"),
        "allsmi snapshot --format json, 8 fake H100, [all], GPM off": fake(
            full, "allsmi", "snapshot", "--format", "json", "--config", str(gpm_off)),
        "nvitop --once, 8 fake H100": fake(plain, "nvitop", "--once"),
    }
    for argv in cases.values():  # warm the page cache: we measure interpreter work, not disk
        _time(argv, empty)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    with progress("start-up runs", total=args.runs * len(cases)) as done:
        for _ in range(args.runs):
            for name, argv in cases.items():
                samples[name].append(_time(argv, empty, name))
                done.advance()
    med = {name: statistics.median(values) for name, values in samples.items()}
    cpu_med = {name: statistics.median(values) for name, values in CPU.items()}
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Machine: {describe()}; {args.runs} runs each, interleaved; "
          f"load average after the start-up runs {load} (1/5/15 min)\n")
    print("| command | median wall | p90 wall | ratio to `python -c pass` | median CPU (user+sys) | CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, values in samples.items():
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        print(f"| `{name}` | {med[name] * 1000:.0f} ms | {p90 * 1000:.0f} ms | "
              f"{med[name] / med['python -c pass']:.2f}x | {cpu_med[name] * 1000:.0f} ms | "
              f"{cpu_med[name] / cpu_med['python -c pass']:.2f}x |")
    harness = med["harness alone (fake NVML, 8 H100, no program)"]
    nvitop = med["nvitop --once, 8 fake H100"]
    print()
    for what in ("no hardware", "8 fake H100"):
        key = f"allsmi snapshot --format json, {what}, "
        print(f"[all] / plain, {what}: wall {med[key + '[all]'] / med[key + 'plain']:.2f}x, "
              f"CPU {cpu_med[key + '[all]'] / cpu_med[key + 'plain']:.2f}x (target: at most 1.10x)")
    cpu_nvitop = cpu_med["nvitop --once, 8 fake H100"]
    cpu_harness = cpu_med["harness alone (fake NVML, 8 H100, no program)"]
    for install in ("plain", "[all]", "[all], GPM off"):
        key = f"allsmi snapshot --format json, 8 fake H100, {install}"
        mine = med[key]
        print(f"allsmi ({install}) / nvitop --once, same harness: wall {mine / nvitop:.2f}x "
              f"(beyond the harness's own start-up: {(mine - harness) / (nvitop - harness):.2f}x), "
              f"CPU {cpu_med[key] / cpu_nvitop:.2f}x (beyond the harness: "
              f"{(cpu_med[key] - cpu_harness) / (cpu_nvitop - cpu_harness):.2f}x) (target: at most 1x)")
    if args.idle <= 0:
        return
    # windows of 30 s or more: one clock tick (10 ms) is then at most 0.03 % of a core
    windows = max(3, int(args.idle // 30))
    serve = ["serve", "--listen", "127.0.0.1:{port}", "--interval", "1"]
    servers = {
        "allsmi serve, 8 fake H100, plain": fake(plain, "allsmi", *serve),
        "allsmi serve, 8 fake H100, [all]": fake(full, "allsmi", *serve),
        "nvitop-exporter, 8 fake H100": fake(plain, "nvitop-exporter", "--bind-address", "127.0.0.1",
                                             "--port", "{port}", "--interval", "1", "--hostname", "bench"),
        "allsmi serve, no hardware, plain": [allsmi(plain), *serve],
        "allsmi serve, no hardware, [all]": [allsmi(full), *serve],
    }
    cpu = idle_cpu(servers, args.idle / windows, windows, empty)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nIdle CPU at a 1 s interval, all five running at once, median of {windows} windows of "
          f"{args.idle / windows:g} s; load average {load}\n")
    print("| exporter | CPU, % of one core |")
    print("|---|---:|")
    for name, value in cpu.items():
        print(f"| {name} | {value:.2f} % |")
    print()
    for what in ("8 fake H100", "no hardware"):
        a, p = cpu[f"allsmi serve, {what}, [all]"], cpu[f"allsmi serve, {what}, plain"]
        print(f"[all] / plain idle CPU, {what}: {a / p:.2f}x (target: at most 1.10x)")
    print(f"allsmi serve (plain) / nvitop-exporter, 8 fake H100: "
          f"{cpu['allsmi serve, 8 fake H100, plain'] / cpu['nvitop-exporter, 8 fake H100']:.2f}x")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Cold-start wall time of `allsmi snapshot --format json`, next to `python -c pass` and nvitop.

Runs each command many times, interleaved so that machine noise hits them
alike, and prints medians and the ratios: to the interpreter's own floor
(target: under 3x with no hardware) and, with ``--nvitop-site`` (a
site-packages holding nvitop, e.g. of a throw-away venv), to ``nvitop --once``
on the same 8 fake H100s (the test suite's fake libnvidia-ml under the real
pynvml; both programs started through the same harness, target: at most 1x;
the harness alone is timed too, so the ratio of the programs' own times is
printed beside the ratio of the totals).

Bytecode is compiled first and ``PYTHONDONTWRITEBYTECODE`` is dropped for the
measured commands: a user's installed package has its ``.pyc`` files, and
compiling every module on each start would measure the compiler.
Usage: ``python benchmarks/startup.py [--runs N] [--nvitop-site PATH]``, with the
Python of a regular (not editable) install of allsmi; a site for nvitop is made with
``pip install --target PATH nvitop==1.7.2``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402


REPO = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "ALLSMI_CONFIG")}


def _time(argv: list[str]) -> float:
    # No timeout= here: with one, Popen.wait polls with sleeps of up to 50 ms, which
    # would quantize every measurement. A blocking waitpid measures the real exit time.
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   stdin=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--nvitop-site", default=None,
                        help="site-packages directory holding nvitop (e.g. of a throw-away venv)")
    args = parser.parse_args()
    allsmi = str(Path(sys.executable).with_name("allsmi"))
    dirs = [str(REPO / "allsmi"), str(REPO / "backends"), str(REPO / "tests"),
            *(p for p in sys.path if p.endswith("site-packages")),
            *([args.nvitop_site] if args.nvitop_site else [])]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], env=ENV,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "allsmi snapshot --format json (no hardware)": [allsmi, "snapshot", "--format", "json"],
        "allsmi snapshot --simulate mixed --format json": [allsmi, "snapshot", "--simulate", "mixed",
                                                            "--format", "json"],
        "allsmi snapshot --simulate mixed --format csv": [allsmi, "snapshot", "--simulate", "mixed",
                                                           "--format", "csv"],
    }
    if args.nvitop_site:
        harness = [sys.executable, str(REPO / "benchmarks" / "_fake_nvml_run.py"), "8", args.nvitop_site, "--"]
        cases["harness alone (fake NVML, 8 H100, no program)"] = harness + ["none"]
        cases["allsmi snapshot --format json (8 fake H100)"] = harness + ["allsmi", "snapshot", "--format", "json"]
        cases["nvitop --once (8 fake H100)"] = harness + ["nvitop", "--once"]
    for argv in cases.values():  # warm the page cache: we measure interpreter work, not disk
        _time(argv)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            samples[name].append(_time(argv))
    floor = statistics.median(samples["python -c pass"])
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"Machine: {describe()}; {args.runs} runs each, interleaved; "
          f"load average at the end {load} (1/5/15 min)\n")
    print("| command | median | p90 | ratio to `python -c pass` |")
    print("|---|---:|---:|---:|")
    for name, values in samples.items():
        med = statistics.median(values)
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        print(f"| `{name}` | {med * 1000:.0f} ms | {p90 * 1000:.0f} ms | {med / floor:.2f}x |")
    if args.nvitop_site:
        ratio = (statistics.median(samples["allsmi snapshot --format json (8 fake H100)"])
                 / statistics.median(samples["nvitop --once (8 fake H100)"]))
        harness = statistics.median(samples["harness alone (fake NVML, 8 H100, no program)"])
        own = ((statistics.median(samples["allsmi snapshot --format json (8 fake H100)"]) - harness)
               / (statistics.median(samples["nvitop --once (8 fake H100)"]) - harness))
        print(f"\nallsmi / nvitop on the same 8 fake H100s (same harness): {ratio:.2f}x; "
              f"beyond the harness's own start-up: {own:.2f}x")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Cold-start wall time of `allsmi snapshot --format json`, next to a bare `python -c pass`.

Runs each command many times, interleaved so that machine noise hits them
alike, and prints medians and the ratio to the interpreter's own floor
(target: under 2x). Usage: ``python benchmarks/startup.py [--runs N]``.
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


def _time(argv: list[str]) -> float:
    # No timeout= here: with one, Popen.wait polls with sleeps of up to 50 ms, which
    # would quantize every measurement. A blocking waitpid measures the real exit time.
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    allsmi = str(Path(sys.executable).with_name("allsmi"))
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "allsmi snapshot --format json (no hardware)": [allsmi, "snapshot", "--format", "json"],
        "allsmi snapshot --simulate mixed --format json": [allsmi, "snapshot", "--simulate", "mixed",
                                                            "--format", "json"],
        "allsmi snapshot --simulate mixed --format csv": [allsmi, "snapshot", "--simulate", "mixed",
                                                           "--format", "csv"],
    }
    os.environ.pop("ALLSMI_CONFIG", None)
    for argv in cases.values():  # warm the page cache: we measure interpreter work, not disk
        _time(argv)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            samples[name].append(_time(argv))
    floor = statistics.median(samples["python -c pass"])
    print(f"Machine: {describe()}; {args.runs} runs each, interleaved\n")
    print("| command | median | p90 | ratio to `python -c pass` |")
    print("|---|---:|---:|---:|")
    for name, values in samples.items():
        med = statistics.median(values)
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        print(f"| `{name}` | {med * 1000:.0f} ms | {p90 * 1000:.0f} ms | {med / floor:.2f}x |")


if __name__ == "__main__":
    main()

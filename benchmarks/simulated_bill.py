#!/usr/bin/env python3
"""The demo bill: ``allsmi export --simulate mixed`` and ``allsmi idle --simulate mixed``.

Runs each command as a subprocess (as a user types it) ``--runs`` times, interleaved with the
same command of a baseline build (``--baseline``: the ``allsmi`` executable of another checkout,
e.g. the previous commit installed in its own virtual environment), and reports the median
wall time and CPU time (user + system of the child) of each, with the ratio. The bills of both
builds are compared too: the largest relative difference of the export's numeric totals (the
former replay is the reference; the simulated bill must stay within 0.5 % of it).

Usage::

    python benchmarks/simulated_bill.py --baseline /tmp/base/.venv/bin/allsmi [--runs 3]
        [--month | --month-only] [--month-runs 1] [--month-baseline] [--allsmi .venv/bin/allsmi]

``--identical`` exits 1 unless each export's CSV is byte for byte the baseline's (a change
meant to make the bill faster, not different; the month's only with ``--month-baseline``).
``--month`` adds ``--period last-month`` (30 or 31 days) of both commands, ``--month-only`` bills
the month alone; the baseline's month (minutes per run) only with ``--month-baseline``. The CPU
time counts the command's worker processes too (the bill is replayed by one per usable CPU).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import describe  # noqa: E402
from _progress import progress  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
#: The export's columns summed over all rows to compare two bills.
TOTALS = ("observed_device_hours", "allocated_device_hours", "idle_allocated_device_hours",
          "billed_device_hours", "used_device_hours", "energy_kwh", "cost", "idle_cost")


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, stdout) of one run; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def totals(text: str) -> dict[str, float]:
    sums = dict.fromkeys(TOTALS, 0.0)
    for row in csv.DictReader(io.StringIO(text)):
        for name in TOTALS:
            if row.get(name):
                sums[name] += float(row[name])
    return sums


def worst_difference(ours: dict[str, float], theirs: dict[str, float]) -> tuple[str, float]:
    diffs = {n: abs(ours[n] - theirs[n]) / abs(theirs[n]) for n in TOTALS if theirs[n]}
    name = max(diffs, key=diffs.__getitem__)
    return name, diffs[name]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allsmi", default=str(HERE / ".venv" / "bin" / "allsmi"))
    parser.add_argument("--baseline", default=None, help="the allsmi executable to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--month", action="store_true", help="also bill --period last-month")
    parser.add_argument("--month-runs", type=int, default=1)
    parser.add_argument("--month-only", action="store_true", help="bill the month alone")
    parser.add_argument("--month-baseline", action="store_true",
                        help="run the baseline's month too (minutes per run)")
    parser.add_argument("--identical", action="store_true",
                        help="exit 1 unless every export's CSV is byte for byte the baseline's "
                             "(a change meant to be faster, not different)")
    args = parser.parse_args()
    failed: list[str] = []
    builds = [("allsmi", args.allsmi)] + ([("baseline", args.baseline)] if args.baseline else [])
    cases = [] if args.month_only else [("export --simulate mixed --period yesterday", args.runs),
                                        ("idle --simulate mixed --period yesterday", args.runs)]
    if args.month or args.month_only:
        cases += [("export --simulate mixed --period last-month", args.month_runs),
                  ("idle --simulate mixed --period last-month", args.month_runs)]
    print(f"# {describe()}; load average {os.getloadavg()[0]:.1f} at the start")
    print("| command | build | wall (median) | CPU (median) | runs | bill vs baseline |")
    print("|---|---|---:|---:|---:|---|")
    for command, runs in cases:
        results: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in builds}
        outputs: dict[str, str] = {}
        with progress(command, total=runs * len(builds), unit="runs") as done:
            for _ in range(runs):
                for name, exe in builds:  # interleaved: both builds see the same load
                    done.advance()
                    if name == "baseline" and "month" in command and not args.month_baseline:
                        continue
                    wall, cpu, out = timed([exe, *command.split(), "--format", "csv"]
                                           if command.startswith("export") else [exe, *command.split()])
                    results[name].append((wall, cpu))
                    outputs[name] = out
        for name, _ in builds:
            if not results[name]:
                continue
            walls = [w for w, _ in results[name]]
            cpus = [c for _, c in results[name]]
            note = ""
            if name == "allsmi" and "baseline" in outputs and command.startswith("export"):
                field, diff = worst_difference(totals(outputs["allsmi"]), totals(outputs["baseline"]))
                same = outputs["allsmi"] == outputs["baseline"]
                note = (f"largest total difference {diff * 100:.3f} % ({field}); CSV "
                        + ("byte for byte identical" if same else "**differs**"))
                if args.identical and not same:
                    failed.append(command)
            print(f"| `allsmi {command}` | {name} | {statistics.median(walls):.2f} s | "
                  f"{statistics.median(cpus):.2f} s | {runs} | {note} |", flush=True)
    print(f"# load average {os.getloadavg()[0]:.1f} at the end")
    if failed:
        print(f"# the bill differs from the baseline's: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

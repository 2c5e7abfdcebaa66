"""Where the running dashboard's memory goes, beside the Textual floor's (benchmark helper).

Usage: python benchmarks/dashboard_memory.py [--seconds 45] [--nvitop-site PATH] [--top 15]

Runs, at once and each in its own tmux terminal (200x60): ``allsmi --interval 1`` on 8 fake
H100s (``benchmarks/_fake_nvml_run.py``), the Textual floor (``benchmarks/_textual_floor.py``)
and the floor carrying the fake-NVML harness, all under ``tracemalloc`` (12 frames). After
``--seconds`` each writes what its Python allocations still hold, and this prints them side by
side, by owner and phase:

* owner: the innermost frame of the allocation's stack that is allsmi's (``allsmi/``,
  ``backends/``), the harness's (``pynvml``, ``tests/``, ``_fake_nvml_run.py``) or the UI
  libraries' (Textual, Rich); the standard library, generated code (``dataclass`` methods) and
  the import machinery are charged to whoever called them; ``interpreter`` is what none did;
* phase: ``import`` when the stack passes through the import machinery (code objects, classes,
  module globals), else ``running`` (widgets, lines, snapshots, caches, threads).

Then the allsmi files holding most, per phase. The figures are Python's allocations (not RSS:
no allocator overhead or free pages; ``tracemalloc`` itself adds its own), the same way for
all three, so the differences are what each part costs. ``benchmarks/dashboard.py --together``
measures the RSS these add up to.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, os, runpy, sys, threading, time, tracemalloc
tracemalloc.start(12)
kind, seconds, out, harness, site = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
OWNERS = (("harness", ("/pynvml", "/tests/", "_fake_nvml_run")), ("allsmi", ("/allsmi/", "/backends/")),
          ("textual, rich", ("/textual/", "/rich/")))  # the harness first: tests/backends/ is its

def owner(name):
    for label, marks in OWNERS:
        if any(mark in name for mark in marks):
            return label
    return None

def dump():
    time.sleep(seconds)
    by, files = {}, {}
    for stat in tracemalloc.take_snapshot().statistics("traceback"):
        names = [frame.filename for frame in reversed(stat.traceback)]  # innermost first
        phase = "import" if any(n.startswith("<frozen importlib") for n in names) else "running"
        who, where = "interpreter", ""
        for name in names:
            found = owner(name)
            if found:
                who, where = found, name
                break
        key = f"{who}|{phase}"
        by[key] = by.get(key, 0) + stat.size
        if who == "allsmi":
            short = where.split("/allsmi/", 1)[-1] if "/allsmi/" in where else where.split("/backends/", 1)[-1]
            fkey = f"{phase}|{short}"
            files[fkey] = files.get(fkey, 0) + stat.size
    rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS"))
    with open(out + ".tmp", "w") as f:
        json.dump({"by": by, "files": files, "rss_kib": rss}, f)
    os.replace(out + ".tmp", out)
    os._exit(0)

threading.Thread(target=dump, daemon=True).start()
floor = os.path.join(os.path.dirname(harness), "_textual_floor.py")
if kind != "floor":
    sys.argv = [harness, "8", site, "--", "allsmi" if kind == "allsmi" else "none", "--interval", "1"]
    runpy.run_path(harness, run_name="__main__")
if kind != "allsmi":
    sys.argv = [floor, "40"]
    runpy.run_path(floor, run_name="__main__")
'''

KINDS = {"allsmi": "allsmi", "floor": "Textual floor", "floor+harness": "floor + fake NVML"}


def run_all(seconds: float, site: str, tmp: Path) -> dict[str, dict]:
    """Each kind in its own tmux terminal, all at once; their reports once written."""
    outs = {kind: tmp / f"{kind}.json" for kind in KINDS}
    servers = {kind: f"allsmi-memory-{os.getpid()}-{i}" for i, kind in enumerate(KINDS)}
    try:
        for kind, out in outs.items():
            command = ["env", f"XDG_CONFIG_HOME={tmp}", sys.executable, "-c", CHILD, kind, str(seconds),
                       str(out), str(REPO / "benchmarks" / "_fake_nvml_run.py"), site]
            subprocess.run(["tmux", "-L", servers[kind], "-f", "/dev/null", "new-session", "-d", "-s", "m",
                            "-x", "200", "-y", "60", shlex.join(command)], check=True,
                           env={**os.environ, "TERM": "xterm-256color"})
        deadline = time.monotonic() + seconds + 120
        while not all(out.exists() for out in outs.values()) and time.monotonic() < deadline:
            time.sleep(1.0)
    finally:
        for server in servers.values():
            subprocess.run(["tmux", "-L", server, "kill-server"], check=False, capture_output=True)
    missing = [kind for kind, out in outs.items() if not out.exists()]
    if missing:
        raise SystemExit(f"no report from {', '.join(missing)} (run it by hand to see)")
    return {kind: json.loads(out.read_text()) for kind, out in outs.items()}


def kib(value: float) -> str:
    return f"{value / 1024:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=45.0,
                        help="how long each runs before it reports (tracemalloc slows the start-up)")
    parser.add_argument("--nvitop-site", default=None,
                        help="site-packages holding pynvml when the install has no nvidia extra")
    parser.add_argument("--top", type=int, default=15, help="allsmi files listed per phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        got = run_all(args.seconds, args.nvitop_site or "-", Path(tmp))
    keys = sorted({key for report in got.values() for key in report["by"]})
    print(f"Python allocations held after {args.seconds:g} s (KiB), tmux 200x60, 8 fake H100; load "
          f"average {os.getloadavg()[0]:.2f}\n")
    print("| owner | phase | " + " | ".join(KINDS.values()) + " | allsmi - floor + fake NVML |")
    print("|---|---|" + "---:|" * (len(KINDS) + 1))
    for key in keys:
        who, phase = key.split("|")
        values = [got[kind]["by"].get(key, 0) for kind in KINDS]
        print(f"| {who} | {phase} | " + " | ".join(kib(v) for v in values)
              + f" | {kib(values[0] - values[2])} |")
    totals = [sum(got[kind]["by"].values()) for kind in KINDS]
    print("| all | | " + " | ".join(kib(v) for v in totals) + f" | {kib(totals[0] - totals[2])} |")
    print("| RSS (with tracemalloc's own) | | "
          + " | ".join(f"{got[kind]['rss_kib']:,}" for kind in KINDS)
          + f" | {got['allsmi']['rss_kib'] - got['floor+harness']['rss_kib']:,} |")
    files = got["allsmi"]["files"]
    for phase in ("import", "running"):
        mine = sorted(((size, name.split("|", 1)[1]) for name, size in files.items()
                       if name.startswith(phase + "|")), reverse=True)
        print(f"\nallsmi, {phase}: {kib(sum(size for size, _ in mine))} KiB; the files holding most")
        for size, name in mine[:args.top]:
            print(f"  {kib(size):>6} KiB  {name}")


if __name__ == "__main__":
    main()

"""Where the dashboard's main thread spends its CPU per refresh cycle (benchmark helper).

Usage: python benchmarks/dashboard_phases.py [--seconds 30] [--nvitop-site PATH]

Runs ``allsmi --interval 1`` on 8 fake H100s (the fake-NVML harness,
``benchmarks/_fake_nvml_run.py``) in tmux (200x60), in a child process that
times, with the main thread's own CPU clock (``time.thread_time``, which the
machine's load barely moves, unlike wall-clock shares), the phases of each
cycle after a 8 s warm-up: reading and drawing the data (``DashboardApp.poll``),
Textual's screen update (composing the changed lines and writing them), each
widget's ``render_lines`` within it; and counts the screen updates a second and
the lines each update repainted. Prints milliseconds of CPU a second (= a
cycle at 1 s), calls a second, and the process's and main thread's CPU share.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r'''
import os, runpy, sys, threading, time
from collections import Counter, defaultdict
seconds, out, harness, site = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
acc, calls, updates = defaultdict(float), Counter(), Counter()
state = {"on": False, "depth": 0}

def timed(cls, name, label):
    original = getattr(cls, name)
    def wrapper(*args, **kwargs):
        if not state["on"] or state["depth"]:
            return original(*args, **kwargs)
        state["depth"] += 1
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            acc[label] += time.thread_time() - start
            calls[label] += 1
            state["depth"] -= 1
    setattr(cls, name, wrapper)

import textual.screen, textual.widget
import allsmi.dashboard.screen.app
timed(allsmi.dashboard.screen.app.DashboardApp, "poll", "poll: read the data, draw the views")
original_lines = textual.widget.Widget.render_lines
def render_lines(self, crop):
    if not state["on"]:
        return original_lines(self, crop)
    start = time.thread_time()
    try:
        return original_lines(self, crop)
    finally:
        label = "  render_lines " + type(self).__name__
        acc[label] += time.thread_time() - start
        calls[label] += 1
textual.widget.Widget.render_lines = render_lines
original_refresh = textual.screen.Screen._compositor_refresh
def compositor_refresh(self):
    if state["on"]:
        updates[sum(r.height for r in self._compositor._dirty_regions)] += 1
    return original_refresh(self)
textual.screen.Screen._compositor_refresh = compositor_refresh
timed(textual.screen.Screen, "_compositor_refresh", "screen update: compose and write")

def stat(tid):
    fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def watch():
    time.sleep(8)
    main = threading.main_thread().native_id
    t0, p0, m0 = time.monotonic(), time.process_time(), stat(main)
    state["on"] = True
    time.sleep(seconds)
    state["on"] = False
    t1, p1, m1 = time.monotonic(), time.process_time(), stat(main)
    span = t1 - t0
    with open(out, "w") as f:
        f.write(f"process {100 * (p1 - p0) / span:.2f} % of a core, main thread {100 * (m1 - m0) / span:.2f} %"
                f" ({1000 * (m1 - m0) / span:.1f} ms a second)\n")
        for label in sorted(acc, key=lambda k: -acc[k]):
            f.write(f"  {label:<44} {1000 * acc[label] / span:6.2f} ms/s  {calls[label] / span:5.2f} calls/s"
                    f"  {1000 * acc[label] / max(1, calls[label]):6.2f} ms/call\n")
        total = sum(updates.values())
        f.write(f"  screen updates: {total / span:.2f} a second; lines repainted per update: "
                + ", ".join(f"{lines} ({n}x)" for lines, n in updates.most_common(6)) + "\n")
    os._exit(0)

threading.Thread(target=watch, daemon=True).start()
sys.argv = [harness, "8", site, "--", "allsmi", "--interval", "1"]
runpy.run_path(harness, run_name="__main__")
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--nvitop-site", default=None,
                        help="site-packages holding pynvml when the install has no nvidia extra")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "phases.txt"
        command = ["env", f"XDG_CONFIG_HOME={tmp}", sys.executable, "-c", CHILD, str(args.seconds), str(out),
                   str(REPO / "benchmarks" / "_fake_nvml_run.py"), args.nvitop_site or "-"]
        server = f"allsmi-phases-{os.getpid()}"
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "p", "-x", "200",
                        "-y", "60", shlex.join(command)], check=True, env={**os.environ, "TERM": "xterm-256color"})
        try:
            deadline = time.monotonic() + args.seconds + 60
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(1.0)
            time.sleep(0.5)
        finally:
            subprocess.run(["tmux", "-L", server, "kill-server"], check=False, capture_output=True)
        if not out.exists():
            raise SystemExit("the dashboard did not report (did it start? run it by hand to see)")
        print(out.read_text(), end="")
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

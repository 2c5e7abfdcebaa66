#!/usr/bin/env python3
"""Closing the terminal under a running dashboard, many times in every view (issue 26).

``python benchmarks/dashboard_hangup.py`` runs the installed ``allsmi`` in every view of
every mode (``node``: ``--simulate mixed``; ``hosts``: ``view --hosts`` over a fake node;
``prometheus``: ``view --prometheus`` over a fake Prometheus), ``--rounds`` times each (20).
Each round starts the dashboard, opens the view, sends a burst of keys and closes the
terminal at once, cycling through the ways a terminal goes away (see
``tests/dashboard/closing.py``: tmux ``kill-server``, ``kill-session``, ``kill-window``, an
interactive shell in between, a pseudo-terminal closed by its emulator). It prints, per view,
how many rounds left a process running 2 s after the close and the median and worst time
until every process of the dashboard had ended. The exit status is 1 when any round left a
process behind. Everything listens on loopback only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from benchmarks._machine import describe
    from tests.dashboard.closing import (CLOSE_METHODS, VIEWS, close_with_keys_in_flight, fake_host,
                                         fake_prometheus, make_terminal, view_args)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--mode", choices=("node", "hosts", "prometheus"), action="append")
    parser.add_argument("--view", action="append", help="only these views (devices, idle, ...)")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds a close may take")
    opts = parser.parse_args()
    tmux = shutil.which("tmux")
    if not tmux:
        raise SystemExit("tmux is needed (apt-get install tmux)")
    host, prom = fake_host(), fake_prometheus()
    urls = {"hosts": host.url, "prometheus": prom.url}.__getitem__
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {describe()}; load average at start "
          f"{load}; {opts.rounds} rounds a view, closing by {', '.join(CLOSE_METHODS)} in turn")
    print("| mode | view | rounds | left running after 2 s | median to gone | worst |\n"
          "| --- | --- | ---: | ---: | ---: | ---: |", flush=True)
    failed = 0
    try:
        with tempfile.TemporaryDirectory(prefix="allsmi-hangup-") as tmp:
            for (mode, view) in VIEWS:
                if (opts.mode and mode not in opts.mode) or (opts.view and view not in opts.view):
                    continue
                times: list[float] = []
                left: list[str] = []
                for round_ in range(opts.rounds):
                    method = CLOSE_METHODS[round_ % len(CLOSE_METHODS)]
                    args, keys = view_args(mode, view, urls)
                    term = make_terminal(method, tmux, Path(tmp))
                    try:
                        took, running = close_with_keys_in_flight(term, args, keys, opts.timeout)
                    finally:
                        term.cleanup()
                    if took is None:
                        left.append(f"round {round_} ({method}): pids {running}")
                    else:
                        times.append(took)
                failed += len(left)
                med = f"{statistics.median(times):.2f} s" if times else "-"
                worst = f"{max(times):.2f} s" if times else "-"
                print(f"| {mode} | {view} | {opts.rounds} | {len(left)} | {med} | {worst} |", flush=True)
                for line in left:
                    print(f"    {mode}/{view} {line}", file=sys.stderr, flush=True)
    finally:
        host.close()
        prom.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

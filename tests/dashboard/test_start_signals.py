"""The dashboard stopped by a signal while it is still starting (its backends being built:
seconds with a slow vendor library). SIGTERM quits as ``q`` does, exit 0 (docs/dashboard.md);
it used to kill the process with the signal's default action (exit 143) until the app's own
handlers were in place. SIGHUP is the terminal going away: 129, as once the app runs."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..pluginsite import plugin_site
from ..test_daemon_stop_signals import PLUGIN


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 0), (signal.SIGHUP, 129)])
def test_a_signal_while_the_dashboard_starts_is_an_ordinary_stop(tmp_path: Path, sig: int, code: int) -> None:
    env, _ = plugin_site(tmp_path, "zzhold", "[allsmi.backends]\nzzhold = zzhold:Slow\n", {"zzhold": PLUGIN})
    where = tmp_path / "hold"
    where.mkdir()
    env.update(ALLSMI_CONFIG=os.devnull, ALLSMI_BACKENDS="zzhold", ZZHOLD_DIR=str(where),
               ZZHOLD_AT="backends", TERM="xterm-256color", COLUMNS="120", LINES="40")
    main, side = pty.openpty()  # a terminal: the dashboard, not the table printed instead of it
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", "--interval", "0.5"], env=env,
                            stdin=side, stdout=side, stderr=side, start_new_session=True)
    os.close(side)
    try:
        deadline = time.monotonic() + 30
        while not (where / "holding").exists():  # inside the backend's constructor
            assert proc.poll() is None and time.monotonic() < deadline, proc.returncode
            time.sleep(0.01)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)

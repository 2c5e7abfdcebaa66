"""Tests that read this machine's own processes by the pids this machine's ``/proc`` shows.

allsmi reads per-process figures only where ``/proc`` shows the host's PID namespace (the
drivers report host pids: allsmi/support/pidns.py). Where the suite itself runs in a
container without the host's PID namespace, the real ``/proc`` is not the host's, yet the pids
these tests read are its own (their children's, not a driver's): for the real ``/proc`` alone,
the sampler is told so. Fake trees are judged as allsmi judges them.
"""

from __future__ import annotations

import pytest

from allsmi.hostactivity import sampler
from allsmi.support.pidns import PidView, pid_view


@pytest.fixture(autouse=True)
def real_proc_pids_are_the_tests_own(monkeypatch: pytest.MonkeyPatch) -> None:
    if pid_view("/proc").host:
        return

    def view(root: str = "/proc") -> PidView:
        if str(root) == "/proc":
            return PidView("/proc", True, "the tests' own processes, by this /proc's pids")
        return pid_view(root)
    monkeypatch.setattr(sampler, "pid_view", view)

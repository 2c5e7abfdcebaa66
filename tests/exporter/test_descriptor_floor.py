"""A descriptor limit too small to collect (issue 32, item 11): ``ulimit -n 22`` let the
exporter start and its collection cycles fail with EMFILE one by one. Below the floor allsmi
now raises the soft limit itself where the hard limit allows, and otherwise refuses to start
with a message saying what to raise."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from allsmi.cli.common import DESCRIPTOR_FLOOR

from ..prometheus_server import free_port
from .server import run_serve


def limit(soft: int, hard: int | None = None) -> Callable[[], None]:
    def apply() -> None:
        ceiling = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        top = ceiling if hard is None else min(hard, ceiling)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, top), top))
    return apply


@pytest.mark.parametrize("command", [
    ["serve", "--simulate", "mixed", "--listen", "127.0.0.1:{port}"],
    ["record", "--simulate", "mixed", "--ledger", "{tmp}/ledger.db"],
    ["snapshot", "--simulate", "mixed"],
])
def test_below_the_floor_a_command_refuses_to_start(tmp_path: Path, command: list[str]) -> None:
    port = free_port()
    args = [a.format(port=port, tmp=tmp_path) for a in command]
    result = subprocess.run([sys.executable, "-m", "allsmi", *args], capture_output=True, text=True,
                            timeout=60, preexec_fn=limit(22, 22),
                            env={"PATH": "/usr/bin:/bin", "ALLSMI_CONFIG": "/dev/null"})
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "open-file limit is 22" in result.stderr and f"at least {DESCRIPTOR_FLOOR}" in result.stderr
    assert "LimitNOFILE" in result.stderr
    assert not (tmp_path / "ledger.db").exists()


def test_a_low_soft_limit_is_raised_to_the_floor(tmp_path: Path) -> None:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < DESCRIPTOR_FLOOR:
        pytest.skip("this machine's hard limit is below the floor")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5"], tmp=tmp_path,
                       preexec_fn=limit(22))
    try:
        server.wait_ready()
        limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
        soft = next(line.split()[3] for line in limits.splitlines()
                    if line.startswith("Max open files"))
        assert int(soft) == DESCRIPTOR_FLOOR
        assert all(server.get("/metrics").status == 200 for _ in range(20))
    finally:
        assert server.stop() == 0, server.output()

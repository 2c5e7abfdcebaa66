"""Our exposition passes Prometheus' own linter, ``promtool check metrics``."""

from __future__ import annotations

import subprocess
from typing import Iterator

import pytest

from allsmi.exporter.exposition import render_snapshot

from ..conftest import require_tool
from .server import Serve, serving
from .support import device, snapshot

def promtool_check(text: str) -> None:
    promtool = require_tool("promtool", "prometheus")
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), \
        result.stdout + result.stderr


@pytest.fixture(scope="module")
def faults() -> Iterator[Serve]:
    yield from serving(["--simulate", "mixed-faults", "--interval", "0.3", "--timeout", "0.5",
                        "--processes"])


def test_served_metrics_pass_promtool(faults: Serve) -> None:
    faults.wait_ready()
    import time
    time.sleep(1.0)  # a few cycles, so counters and errors have values
    promtool_check(faults.get("/metrics").text)


def test_snapshot_format_passes_promtool() -> None:
    promtool_check(render_snapshot(snapshot([device(), device("GPU-b", index=1, health="lost",
                                                            power_watts=None)]), processes=True))

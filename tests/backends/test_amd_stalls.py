"""A slow or hung vendor library, seen from outside: ``allsmi snapshot`` and ``doctor`` as
subprocesses over the real amdsmi/pynvml bindings and fake C libraries (``fake_cli.py``),
and the collector loop that ``serve`` and the dashboard run.

Time bounds are generous for a loaded two-core machine, but bounded: the point is that
the command returns at all, with one complete document, not how fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from allsmi.backends.nvidia import NvidiaBackend
from allsmi.collection.collector import Collector

from ..conftest import REPO
from .amd_fake import FakeLibrary, fake_backend

TWO_H100 = {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2}]}
#: What the collector may add past the timeout: closing (2 x 1 s) plus start-up and load.
SLACK_SECONDS = 25.0


def run_fake_cli(*args: str, amd: dict[str, Any] | None = None, nvml: dict[str, Any] | None = None,
                 tmp_path: Path, timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], float]:
    """``allsmi ARGS`` with the fake libraries; returns the result and the seconds it took."""
    config = tmp_path / "config.toml"
    config.write_text('[backends]\nenabled = ["amd", "nvidia"]\n')
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_AMDSMI", "FAKE_NVML")}
    if amd is not None:
        env["FAKE_AMDSMI"] = json.dumps(amd)
    if nvml is not None:
        env["FAKE_NVML"] = json.dumps(nvml)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "tests.backends.fake_cli", *args,
                             "--config", str(config)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    return result, time.monotonic() - started


def _status(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["name"]: b for b in document["backends"]}


def test_slow_amdsmi_snapshot_prints_one_document_with_the_other_backend(tmp_path: Path) -> None:
    result, took = run_fake_cli("snapshot", "--format", "json", "--timeout", "3",
                                amd={"fixture": "mi300x_spx", "latency_s": 1.0}, nvml=TWO_H100,
                                tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # one complete document, nothing else
    status = _status(document)
    assert status["amd"]["status"] == "timeout"
    assert "no answer within 3 s" in status["amd"]["message"]
    assert status["nvidia"]["status"] == "ok"
    nvidia = [d for d in document["devices"] if d["vendor"] == "nvidia"]
    assert [d["uuid"] for d in nvidia] == ["GPU-00000000-1111-4222-8333-0000face0000",
                                           "GPU-00000001-1111-4222-8333-0000face0001"]
    assert all(d["memory_total_bytes"] == 85520809984 for d in nvidia)
    assert took < 3 + SLACK_SECONDS


def test_amdsmi_call_that_never_returns_still_gives_a_document_and_exits(tmp_path: Path) -> None:
    # amdsmi_init hangs inside the stdout capture: fd 1 stays pointed at a temporary file.
    for hang in ("amdsmi_init", "amdsmi_get_gpu_activity"):
        result, took = run_fake_cli("snapshot", "--format", "json", "--timeout", "2",
                                    amd={"fixture": "mi300x_spx", "hang": [hang]}, nvml=TWO_H100,
                                    tmp_path=tmp_path)
        assert result.returncode == 0, result.stderr
        document = json.loads(result.stdout)
        status = _status(document)
        assert status["amd"]["status"] == "timeout", hang
        assert status["nvidia"]["status"] == "ok"
        assert len([d for d in document["devices"] if d["vendor"] == "nvidia"]) == 2
        assert "stuck in a vendor call" in result.stderr
        assert took < 2 + SLACK_SECONDS


def test_doctor_reports_a_hung_library_and_exits(tmp_path: Path) -> None:
    result, took = run_fake_cli("doctor", "--json", "--timeout", "2",
                                amd={"fixture": "mi300x_spx", "hang": ["amdsmi_init"]},
                                nvml=TWO_H100, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    backends = {b["name"]: b for b in report["backends"]}
    assert backends["amd"]["status"] == "timeout"
    assert backends["amd"]["probe"]["available"] is None
    assert backends["nvidia"]["status"] == "ok" and backends["nvidia"]["devices"] == 2
    assert report["stuck_backends"] == ["amd"]
    assert took < 2 + SLACK_SECONDS


def test_hung_nvml_gpu_snapshot_gives_the_amd_devices(tmp_path: Path) -> None:
    nvml = {"gpus": [{"profile": "h100-sxm5-80gb", "count": 1, "stall_s": 3600}]}
    result, took = run_fake_cli("snapshot", "--format", "json", "--timeout", "2",
                                amd={"fixture": "mi300x_spx"}, nvml=nvml, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    status = _status(document)
    assert status["amd"]["status"] == "ok"
    assert status["nvidia"]["status"] == "timeout"
    amd = [d for d in document["devices"] if d["vendor"] == "amd"]
    assert [d["power_watts"] for d in amd] == [612.0, 141.0]
    assert took < 2 + SLACK_SECONDS


def _wait_for(predicate: Any, deadline_s: float) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_collector_loop_keeps_cycling_through_a_stall_and_recovers() -> None:
    """What ``serve`` and the dashboard run: later cycles are not blocked by a stalled
    library, the other backend reports every cycle, and the stalled one comes back."""
    library = FakeLibrary.from_fixture("mi300x_spx")
    amd = fake_backend(library)
    library.latency_s = 0.5  # ~40 calls per cycle: far past the timeout
    unavailable = NvidiaBackend()  # no NVML on the test machine: "unavailable" every cycle
    collector = Collector([amd, unavailable], interval_seconds=0.2, timeout_seconds=0.5)
    seen: list[dict[str, str]] = []
    collector.subscribe(lambda snap: seen.append({b.name: b.status for b in snap.backends}))
    collector.start()
    try:
        assert _wait_for(lambda: len(seen) >= 4, 30), "cycles stopped during the stall"
        assert all(s["amd"] == "timeout" and s["nvidia"] == "unavailable" for s in seen[:4])
        library.latency_s = 0.0  # the library answers again
        assert _wait_for(lambda: seen[-1]["amd"] == "ok", 60), seen[-3:]
        latest = collector.latest
        assert latest is not None
        assert [d.power_watts for d in latest.devices if d.vendor == "amd"] == [612.0, 141.0]
    finally:
        started = time.monotonic()
        collector.close()
        assert time.monotonic() - started < 15

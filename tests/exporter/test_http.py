"""``allsmi serve`` over loopback HTTP, as a scraper and an operator see it."""

from __future__ import annotations

import gzip
import json
import signal
import socket
import time
from pathlib import Path
from typing import Iterator

import pytest

from allsmi.output import snapshot_from_dict

from .server import Serve, free_port, percentile, run_serve, run_to_exit, serving
from .support import series, values


@pytest.fixture(scope="module")
def mixed() -> Iterator[Serve]:
    yield from serving(["--simulate", "mixed", "--interval", "0.5", "--processes"])


def test_metrics_text_format(mixed: Serve) -> None:
    mixed.wait_ready()
    resp = mixed.get("/metrics")
    assert resp.status == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = resp.text
    info = values(text, "allsmi_device_info")
    assert len(info) == 38 + 3  # 38 boards and 3 MIG instances in the mixed scenario
    assert set(values(text, "allsmi_backend_up").values()) == {1.0}
    assert len(values(text, "allsmi_device_power_watts")) == 36  # never on MIG instances, nor Neuron or TPU (no power)
    assert values(text, "allsmi_process_memory_bytes")
    # Per-process activity (--processes): ratios for processes whose memory series exist too.
    activity = {(lab["uuid"], lab["pid"]): v for lab, v in
                ((dict(labels), v) for (name, labels), v in series(text).items()
                 if name == "allsmi_process_utilization_ratio")}
    memory = {(dict(labels)["uuid"], dict(labels)["pid"]) for (name, labels) in series(text)
              if name == "allsmi_process_memory_bytes"}
    assert activity and set(activity) <= memory
    assert all(0.0 <= v <= 1.0 for v in activity.values()) and len(set(activity.values())) > 1


def test_metrics_openmetrics_when_asked(mixed: Serve) -> None:
    mixed.wait_ready()
    accept = ("application/openmetrics-text;version=1.0.0;q=0.5,"
              "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")  # what Prometheus 2.x sends
    resp = mixed.get("/metrics", {"Accept": accept})
    assert resp.status == 200
    assert resp.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert resp.text.endswith("# EOF\n")
    assert series(resp.text, openmetrics=True)
    refused = mixed.get("/metrics", {"Accept": "application/openmetrics-text;q=0, text/plain"})
    assert refused.headers["content-type"].startswith("text/plain")


def test_gzip_when_asked(mixed: Serve) -> None:
    mixed.wait_ready()
    resp = mixed.get("/metrics", {"Accept-Encoding": "gzip"})
    assert resp.headers.get("content-encoding") == "gzip"
    assert series(gzip.decompress(resp.body).decode())
    plain = mixed.get("/metrics")
    assert "content-encoding" not in plain.headers
    assert len(resp.body) < len(plain.body) / 5


def test_snapshot_api(mixed: Serve) -> None:
    mixed.wait_ready()
    resp = mixed.get("/api/v1/snapshot")
    assert resp.status == 200 and resp.headers["content-type"] == "application/json"
    snap = snapshot_from_dict(json.loads(resp.body))
    assert len(snap.devices) == 41
    assert {d.backend for d in snap.devices} == {"nvidia", "amd", "gaudi", "furiosa",
                                                 "rebellions", "tenstorrent", "intel", "neuron",
                                                 "ascend", "tpu"}


def test_index_health_and_unknown_paths(mixed: Serve) -> None:
    mixed.wait_ready()
    index = mixed.get("/")
    assert index.status == 200 and b"/metrics" in index.body
    assert mixed.get("/healthz").status == 200
    assert mixed.get("/nope").status == 404
    assert mixed.get("/metrics/extra").status == 404
    head = mixed.get("/metrics", method="HEAD")
    assert head.status == 200 and head.body == b"" and int(head.headers["content-length"]) > 1000


def test_counters_grow_between_scrapes(mixed: Serve) -> None:
    mixed.wait_ready()
    first = values(mixed.get("/metrics").text, "allsmi_device_observed_seconds_total")
    time.sleep(1.2)
    second = values(mixed.get("/metrics").text, "allsmi_device_observed_seconds_total")
    assert set(first) == set(second)
    assert all(second[k] >= first[k] for k in first)
    assert sum(second.values()) > sum(first.values())


def test_ready_goes_from_503_to_200_and_hung_backend_does_not_slow_scrapes() -> None:
    # The tenstorrent backend hangs: each cycle waits the full 2 s backend timeout.
    server = run_serve(["--simulate", "mixed-faults", "--interval", "0.5", "--timeout", "2"])
    try:
        server.wait_listening()
        assert server.get("/healthz").status == 200
        early = server.get("/ready")
        assert early.status == 503, "ready before the first (2 s) cycle could finish"
        assert server.get("/metrics").status == 503
        assert server.get("/api/v1/snapshot").status == 503
        server.wait_ready()
        latencies = []
        for _ in range(60):
            started = time.perf_counter()
            resp = server.get("/metrics")
            latencies.append(time.perf_counter() - started)
            assert resp.status == 200
        text = resp.text
        up = values(text, "allsmi_backend_up")
        assert up["[('backend', 'tenstorrent')]"] == 0.0
        assert up["[('backend', 'nvidia')]"] == 1.0
        # Cycles take >= 2 s here; scrapes only read prepared bytes.
        assert percentile(latencies, 0.99) < 0.5, latencies
        assert percentile(latencies, 0.5) < 0.1, latencies
    finally:
        assert server.stop() == 0, server.output()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_shut_down_cleanly(sig: int) -> None:
    server = run_serve(["--simulate", "mixed-faults", "--interval", "0.5", "--timeout", "1"])
    server.wait_ready()
    started = time.monotonic()
    assert server.stop(sig) == 0, server.output()
    assert time.monotonic() - started < 10
    assert "shutting down" in server.output()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


def test_port_in_use_exits_with_message() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_to_exit(["serve", "--simulate", "mixed", "--listen", f"127.0.0.1:{port}"])
    assert result.returncode != 0
    assert "address already in use" in result.stderr


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:99999", "127.0.0.1:"])
def test_bad_listen_is_a_usage_error(listen: str) -> None:
    result = run_to_exit(["serve", "--simulate", "mixed", "--listen", listen])
    assert result.returncode == 2 and "HOST:PORT" in result.stderr


def test_serve_section_of_the_config(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(f'[serve]\nlisten = "127.0.0.1:{port}"\nprocesses = true\n'
                      'energy_max_gap_seconds = 12.5\n')
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--config", str(config)],
                       port=port, listen=False)
    try:
        server.wait_ready()
        assert values(server.get("/metrics").text, "allsmi_process_memory_bytes")
    finally:
        assert server.stop() == 0


def test_bad_serve_key_names_file_line_and_key(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[collector]\ninterval_seconds = 1\n\n[serve]\nlisten = "127.0.0.1:1"\n'
                      'procesess = true\n')
    result = run_to_exit(["serve", "--simulate", "mixed", "--config", str(config)])
    assert result.returncode == 2
    assert str(config) in result.stderr and "line 6" in result.stderr and "procesess" in result.stderr


def test_bad_environment_value_is_a_usage_error() -> None:
    result = run_to_exit(["serve", "--simulate", "mixed"],
                         env={"ALLSMI_SERVE_ENERGY_MAX_GAP": "soon"})
    assert result.returncode == 2 and "ALLSMI_SERVE_ENERGY_MAX_GAP" in result.stderr


def _fake_recorder_env(tmp_path: Path, *, missing: bool = False) -> dict[str, str]:
    """A sitecustomize that installs a fake ``allsmi.accounting.recorder`` (or hides it)."""
    site = tmp_path / "site"
    site.mkdir()
    if missing:
        body = "import sys\nsys.modules['allsmi.accounting.recorder'] = None\n"
    else:
        body = """\
import sys, types
module = types.ModuleType("allsmi.accounting.recorder")
class LedgerRecorder:
    unwritten = dropped_intervals = 0  # (what serve asks at its end: nothing lost)
    last_error = None
    def __init__(self, path, config, max_gap_seconds=None):
        self.path = path
        with open(path, "w") as f:
            f.write("opened %s\\n" % type(config).__name__)
    def on_snapshot(self, snapshot):
        with open(self.path, "a") as f:
            f.write("snapshot %d\\n" % len(snapshot.devices))
    def close(self):
        with open(self.path, "a") as f:
            f.write("closed\\n")
module.LedgerRecorder = LedgerRecorder
sys.modules["allsmi.accounting.recorder"] = module
"""
    (site / "sitecustomize.py").write_text(body)
    return {"PYTHONPATH": str(site)}


def test_ledger_is_wired_to_the_collector_and_closed(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.log"
    server = run_serve(["--simulate", "mixed", "--interval", "0.3", "--ledger", str(ledger)],
                       env=_fake_recorder_env(tmp_path))
    try:
        server.wait_ready()
        time.sleep(0.8)
    finally:
        assert server.stop() == 0, server.output()
    lines = ledger.read_text().splitlines()
    assert lines[0] == "opened Config"
    assert "snapshot 41" in lines and lines[-1] == "closed"


def test_ledger_without_recorder_module_exits_2(tmp_path: Path) -> None:
    result = run_to_exit(["serve", "--simulate", "mixed", "--listen", f"127.0.0.1:{free_port()}",
                          "--ledger", str(tmp_path / "l.db")],
                         env=_fake_recorder_env(tmp_path, missing=True))
    assert result.returncode == 2
    assert "allsmi.accounting.recorder" in result.stderr

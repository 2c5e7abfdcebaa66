"""One node read twice is counted twice: the cluster view says so (issue 24, item 10).

A newcomer who follows both the textfile recipe (docs/exporter.md) and the ``allsmi serve``
scrape gets every device of the node from two instances. With a real ``allsmi serve``, a real
node_exporter reading ``allsmi snapshot --format prometheus`` from its textfile directory and a
real Prometheus scraping both, ``allsmi view --prometheus`` names the problem on both rows; two
addresses of one ``allsmi serve`` given to ``--hosts`` do too.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ..conftest import allsmi_exe, require_tool, run_allsmi
from ..prometheus_server import free_port, running_prometheus
from .test_cluster import ServeProcess, wait_until

pytestmark = pytest.mark.timeout(180)
WARNING = "also reported by another instance"


def _rows(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines()[1:] if line.strip()]


@pytest.mark.integration
def test_serve_plus_textfile_through_node_exporter_is_flagged(tmp_path: Path) -> None:
    node_exporter = require_tool("prometheus-node-exporter", "prometheus-node-exporter")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    made = run_allsmi("snapshot", "--simulate", "mixed", "--format", "prometheus",
                      "-o", str(textfiles / "allsmi.prom"))
    assert made.returncode == 0, made.stderr
    serve = ServeProcess()
    port = free_port()
    with open(tmp_path / "node_exporter.log", "wb") as log:
        node = subprocess.Popen([node_exporter, f"--web.listen-address=127.0.0.1:{port}",
                                 "--collector.disable-defaults", "--collector.textfile",
                                 f"--collector.textfile.directory={textfiles}"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        assert wait_until(serve.ready, 30)
        with running_prometheus(tmp_path, [f"127.0.0.1:{serve.port}", f"127.0.0.1:{port}"]) as url:
            deadline = time.monotonic() + 60
            out = None
            while time.monotonic() < deadline:
                out = run_allsmi("view", "--prometheus", url, env={"ALLSMI_CONFIG": "/dev/null"})
                rows = _rows(out.stdout)
                if len(rows) == 2 and all(WARNING in row for row in rows):
                    break
                time.sleep(1)
            assert out is not None
            rows = _rows(out.stdout)
            assert len(rows) == 2 and all(WARNING in row for row in rows), out.stdout + out.stderr
            assert "41 devices also reported" in out.stdout  # 38 devices and 3 partitions, by uuid
    finally:
        node.terminate()
        node.wait(10)
        serve.stop()


def test_two_addresses_of_one_node_are_flagged_and_distinct_nodes_are_not() -> None:
    serve, other = ServeProcess(), ServeProcess()
    try:
        assert wait_until(serve.ready, 30) and wait_until(other.ready, 30)
        twice = run_allsmi("view", "--hosts", f"http://127.0.0.1:{serve.port}",
                           "--hosts", f"http://localhost:{serve.port}", env={"ALLSMI_CONFIG": "/dev/null"})
        rows = _rows(twice.stdout)
        assert len(rows) == 2 and all(WARNING in row for row in rows), twice.stdout
        assert f"(localhost:{serve.port})" in twice.stdout and f"(127.0.0.1:{serve.port})" in twice.stdout
    finally:
        serve.stop()
        other.stop()


def test_summary_line_and_host_detail_say_the_devices_are_counted_twice(
        sim_snapshots: list) -> None:  # type: ignore[type-arg]
    """The warning reaches the screen: the summary line and each affected host's row."""
    from allsmi.dashboard.views.hosts import host_warnings
    from allsmi.dashboard.state.filtering import Filter
    from allsmi.dashboard.state.model import refs_of
    from allsmi.dashboard.views.render import Palette
    from allsmi.dashboard.sources import HostState, shared_devices
    from allsmi.dashboard.views.summary import summary_lines
    from allsmi.dashboard.state.totals import totals_by
    snap = sim_snapshots[-1]
    pairs = [(key, d.id) for key in ("a:9477", "a:9100") for d in snap.devices]
    shared = shared_devices(pairs)
    assert shared == {"a:9100": (len(snap.devices), ("a:9477",)), "a:9477": (len(snap.devices), ("a:9100",))}
    hosts = [HostState(key, key, snap, 0.0, address=key, shared=shared[key][0], shared_with=shared[key][1])
             for key in ("a:9477", "a:9100")]
    refs = [r for h in hosts for r in refs_of(h.key, h.snapshot)]
    (total,) = totals_by(refs, lambda r: "all")
    line, _ = summary_lines(hosts=hosts, cluster=True, total=total, palette=Palette(), now=0.0,
                            interval=1.0, view="cluster", sort_key="index", descending=False,
                            flt=Filter(), shown=refs, process_scope="selected", paused=False,
                            refresh_error=None)
    assert "same devices from 2 instances: counted twice" in line.plain
    assert any(f"{len(snap.devices)} devices also reported by another instance (a:9477)" in w
               for w in host_warnings(hosts[1]))
    # Distinct devices on distinct hosts: nothing to say.
    assert shared_devices([("a", "x"), ("b", "y")]) == {}

"""The host sample reads /proc itself on Linux, with psutil's formulas: same numbers as psutil."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from allsmi.collection import host

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

STAT_LINES = [
    "cpu  10000 200 3000 50000 700 10 20 5 400 3",
    "cpu  10890 230 3300 51000 760 12 25 9 700 4",     # busy in user, guest time rising
    "cpu  10890 230 3300 51000 750 12 25 9 700 4",     # iowait went backwards: counted as 0
]


def _procfs(root: Path, stat_line: str) -> None:
    rest = Path("/proc/stat").read_text().split("\n", 1)[1]
    (root / "stat").write_text(stat_line + "\n" + rest)
    (root / "meminfo").write_text(Path("/proc/meminfo").read_text())


@pytest.mark.parametrize("first, second", [(0, 1), (1, 2), (0, 0)])
def test_cpu_percent_and_memory_are_psutils(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            first: int, second: int) -> None:
    monkeypatch.setattr(host, "PROC_STAT", str(tmp_path / "stat"))
    monkeypatch.setattr(host, "PROC_MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    monkeypatch.setattr(host.HostSampler, "MIN_WINDOW_SECONDS", 0.0)
    sampler = host.HostSampler()
    _procfs(tmp_path, STAT_LINES[first])
    sampler.prime()
    psutil.cpu_percent(interval=None)
    _procfs(tmp_path, STAT_LINES[second])
    sample = sampler.sample()
    expected = psutil.cpu_percent(interval=None)
    assert sample.cpu_utilization_percent == expected
    mem = psutil.virtual_memory()
    assert sample.memory_total_bytes == mem.total
    assert sample.memory_used_bytes == mem.total - mem.available
    if (first, second) == (0, 1):
        assert sample.cpu_utilization_percent == pytest.approx(100 * 1231 / 2291, abs=0.1)  # by hand


def test_unprimed_cpu_is_unknown_and_missing_proc_falls_back_to_psutil(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert host.HostSampler().sample().cpu_utilization_percent is None  # no window: unknown, not 0
    monkeypatch.setattr(host, "PROC_STAT", str(tmp_path / "missing"))
    monkeypatch.setattr(host, "PROC_MEMINFO", str(tmp_path / "missing"))
    sampler = host.HostSampler()
    sampler.prime()
    sample = sampler.sample()
    assert sample.memory_total_bytes == psutil.virtual_memory().total
    assert sample.hostname


def test_a_snapshot_does_not_import_psutil_for_the_host() -> None:
    code = ("import sys\nfrom allsmi.collection.host import HostSampler\nh = HostSampler(); h.prime()\n"
            "s = h.sample()\nprint(s.memory_total_bytes > 0, 'psutil' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True).stdout.split()
    assert out == ["True", "False"]


def test_allsmi_hostname_names_the_host_for_snapshots_and_group_rules(tmp_path: Path) -> None:
    """``ALLSMI_HOSTNAME`` (set by the Kubernetes DaemonSets to the node's name) replaces the
    kernel's host name, and ``[[rules]] host`` patterns match it."""
    import json

    from .conftest import run_allsmi
    config = tmp_path / "config.toml"
    config.write_text('[[rules]]\nhost = "gpu-pool-a-*"\nresource_group = "pool-a"\n')
    plain = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json", "--config", str(config))
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["host"]["hostname"] == host.local_hostname()
    assert all(d["resource_group"] != "pool-a" for d in json.loads(plain.stdout)["devices"])
    named = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json", "--config", str(config),
                       env={"ALLSMI_HOSTNAME": " gpu-pool-a-node-7 "})
    assert named.returncode == 0, named.stderr
    snap = json.loads(named.stdout)
    assert snap["host"]["hostname"] == "gpu-pool-a-node-7"
    assert snap["devices"] and all(d["resource_group"] == "pool-a" for d in snap["devices"])
    blank = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json", env={"ALLSMI_HOSTNAME": "  "})
    assert json.loads(blank.stdout)["host"]["hostname"] == host.local_hostname()


def test_the_proc_files_are_opened_once_and_read_afresh_each_sample(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``/proc/stat`` and ``/proc/meminfo`` stay open between samples (one ``pread`` each a
    cycle, no open and close), and each sample still reads what they say now."""
    monkeypatch.setattr(host, "PROC_STAT", str(tmp_path / "stat"))
    monkeypatch.setattr(host, "PROC_MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(host.HostSampler, "MIN_WINDOW_SECONDS", 0.0)
    opened: list[str] = []
    real_open = host.os.open

    def counting_open(path: str, *args: object) -> int:
        opened.append(path)
        return real_open(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(host.os, "open", counting_open)
    _procfs(tmp_path, STAT_LINES[0])
    sampler = host.HostSampler()
    sampler.prime()
    percents = []
    for line in (STAT_LINES[1], STAT_LINES[2], STAT_LINES[0]):
        _procfs(tmp_path, line)  # the same files, rewritten in place
        percents.append(sampler.sample().cpu_utilization_percent)
    assert sorted(opened) == sorted([str(tmp_path / "stat"), str(tmp_path / "meminfo")])
    assert percents[0] == pytest.approx(100 * 1231 / 2291, abs=0.1)
    assert percents[1] == 0.0  # nothing moved but iowait, backwards
    assert percents[2] == 0.0  # every counter went backwards: no delta

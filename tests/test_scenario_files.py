"""Scenario files are validated whole, with or without ``include``: exit 2 naming file, line, key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from allsmi.backends.simulated import ScenarioError, load_scenario

DEVICE = """
[[devices]]
backend = "extra"
vendor = "acme"
kind = "npu"
model = "Acme X1"
count = 2
memory_total_bytes = 1073741824
power_idle_watts = 10.0
power_limit_watts = 100.0
clock_idle_mhz = 100.0
clock_max_mhz = 1000.0
temperature_idle_celsius = 30.0
temperature_max_celsius = 80.0
"""

# (file text, line expected in the message, key expected in the message)
BAD = {
    "unknown top-level key": ('include = "mixed"\nepochx = 3\n', 2, "epochx"),
    "bad epoch": ('include = "mixed"\nepoch = "yesterday"\n', 2, "epoch"),
    "epoch without offset": ('epoch = "2026-01-01T00:00:00"\n', 1, "epoch"),
    "epoch in the future": ('include = "mixed"\nepoch = "3000-01-01T00:00:00Z"\n', 2, "epoch"),
    "unknown device key": ('include = "mixed"\n' + DEVICE + "bogus = 1\n", 16, "devices[1].bogus"),
    "count as a string": ('include = "mixed"\n' + DEVICE.replace("count = 2", 'count = "8"'), 8,
                          "devices[1].count"),
    "job_seconds zero": ('include = "mixed"\n' + DEVICE + "job_seconds = [0, 0]\n", 16,
                         "devices[1].job_seconds"),
    "nan power": ('include = "mixed"\n' + DEVICE.replace("power_idle_watts = 10.0", "power_idle_watts = nan"),
                  10, "devices[1].power_idle_watts"),
    "seed as text": ('include = "mixed"\nseed = "abc"\n', 2, "seed"),
    "fault type": ('include = "mixed"\n[[faults]]\ntype = "explode"\nbackend = "amd"\n', 3, "faults[1].type"),
    "fault on unknown backend": ('include = "mixed"\n[[faults]]\ntype = "error"\nbackend = "nope"\n', 4,
                                 "faults[1].backend"),
    "fault on unknown device": ('include = "mixed"\n[[faults]]\ntype = "lost"\ndevice = "amd:99"\n', 4,
                                "faults[1].device"),
    "partition without memory": ('include = "mixed"\n[[partitions]]\ndevice = "amd:1"\n'
                                 'instances = [ { profile = "cpx" } ]\n', 4, "partitions[1].instances[1]"),
    "partition of unknown device": ('include = "mixed"\n[[partitions]]\ndevice = "amd:42"\n'
                                    'instances = [ { memory_total_bytes = 1 } ]\n', 3, "partitions[1].device"),
    "unknown include": ('include = "nosuch"\n', 1, "include"),
    # instances as arrays of tables: each belongs to the [[partitions]] above it (the second
    # partition's first instance, not the third instance of one array across the file)
    "instance as an array table": ('include = "mixed"\n[[partitions]]\ndevice = "amd:1"\n'
                                   '[[partitions.instances]]\nprofile = "cpx"\nmemory_total_bytes = 1\n'
                                   '[[partitions.instances]]\nprofile = "cpx"\nmemory_total_bytes = 1\n'
                                   '[[partitions]]\ndevice = "amd:2"\n[[partitions.instances]]\n'
                                   'profile = "cpx"\nmemory_total_bytes = -1\n', 14,
                                   "partitions[2].instances[1].memory_total_bytes"),
}


def _run(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", str(path),
                           "--format", "json"], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scenario_is_rejected_with_file_line_and_key(tmp_path: Path, case: str) -> None:
    text, line, key = BAD[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}, line {line}, key '{key}': "), message


@pytest.mark.parametrize("case", ["count as a string", "fault type", "unknown device key"])
def test_cli_exits_2_and_prints_nothing_on_stdout(tmp_path: Path, case: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BAD[case][0])
    result = _run(path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert str(path) in result.stderr and f"line {BAD[case][1]}" in result.stderr


def test_include_cycle_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('include = "b.toml"\n')
    (tmp_path / "b.toml").write_text('include = "a.toml"\n')
    with pytest.raises(ScenarioError, match="includes itself"):
        load_scenario(tmp_path / "a.toml")


def test_include_adds_devices_partitions_and_faults(tmp_path: Path) -> None:
    path = tmp_path / "more.toml"
    path.write_text('include = "mixed"\nname = "more"\n' + DEVICE
                    + '\n[[partitions]]\ndevice = "extra:1"\ninstances = [ { profile = "half", '
                      'memory_total_bytes = 536870912 }, { profile = "half", memory_total_bytes = 536870912 } ]\n'
                    + '\n[[faults]]\ntype = "lost"\ndevice = "extra:0"\n')
    base = load_scenario("mixed")
    more = load_scenario(path)
    assert more.name == "more" and more.seed == base.seed and more.epoch == base.epoch
    assert more.devices[:-1] == base.devices and more.devices[-1].backend == "extra"
    assert set(more.partitions) == set(base.partitions) | {"extra:1"}
    assert more.faults[-1].device == "extra:0"
    result = _run(path)
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)["devices"]
    extra = [d for d in devices if d["backend"] == "extra"]
    # extra:0 is lost, extra:1 has two partitions
    assert len(extra) == 4 and sum(1 for d in extra if d["parent"]) == 2


def test_builtin_scenarios_are_valid() -> None:
    for name in ("mixed", "mixed-faults"):
        assert load_scenario(name).devices


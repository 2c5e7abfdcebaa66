"""A scenario's default resource groups: shipped by `mixed`, merged under the user's config
(user rules first, user groups win, ALLSMI_RESOURCE_GROUP replaces the scenario's rules), and
validated like the config file (exit 2 naming the scenario file, line and key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_allsmi


def _snapshot(*args: str, env: dict[str, str] | None = None) -> list[dict]:
    result = run_allsmi("snapshot", "--format", "json", *args, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["devices"]


def _groups(devices: list[dict]) -> dict[str, set[str]]:
    """vendor -> the groups its devices are in (partitions included)."""
    out: dict[str, set[str]] = {}
    for dev in devices:
        out.setdefault(dev["vendor"], set()).add(dev["resource_group"])
    return out


def test_mixed_ships_groups_with_labels_and_prices_without_any_config() -> None:
    devices = _snapshot("--simulate", "mixed")
    assert _groups(devices) == {"nvidia": {"training", "inference"}, "amd": {"inference"},
                                "intel": {"inference"}, "furiosa": {"npu"},
                                "rebellions": {"npu"}, "tenstorrent": {"npu"},
                                "aws": {"npu"}, "huawei": {"npu"}, "google": {"npu"}}
    gpu7 = next(d for d in devices if d["vendor"] == "nvidia" and d["index"] == 7 and not d["parent"])
    parts = [d for d in devices if d["parent"] == gpu7["id"]]
    assert gpu7["resource_group"] == "inference" and len(parts) == 3
    assert all(p["resource_group"] == "inference" for p in parts)
    assert {d["labels"]["team"] for d in devices} == {"ml-research", "serving", "npu-lab"}
    # mixed-faults includes mixed, and so its groups
    assert _groups(_snapshot("--simulate", "mixed-faults"))["amd"] == {"inference"}


def test_prices_reach_the_exporter_and_the_group_info() -> None:
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "prometheus")
    assert result.returncode == 0, result.stderr
    info = [line for line in result.stdout.splitlines()
            if line.startswith("allsmi_resource_group_info{")]
    assert len(info) == 3 and any('team="npu-lab"' in line and 'resource_group="npu"' in line
                                  for line in info)


def test_user_rules_come_first_and_user_groups_win(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[[rules]]\nresource_group = "inference"\nvendor = "tenstorrent"\n\n'
                      '[[rules]]\nresource_group = "lab"\nvendor = "nvidia"\nindex = "0"\n\n'
                      '[groups.inference]\nlabels = { team = "mine" }\n')
    devices = _snapshot("--simulate", "mixed", "--config", str(config))
    groups = _groups(devices)
    assert groups["tenstorrent"] == {"inference"}  # the user's rule beat the scenario's npu rule
    assert groups["nvidia"] == {"lab", "training", "inference"}
    assert groups["amd"] == {"inference"} and groups["furiosa"] == {"npu"}  # scenario rules after
    inference = [d for d in devices if d["resource_group"] == "inference"]
    assert {d["labels"].get("team") for d in inference} == {"mine"}  # the user's group replaced it
    training = next(d for d in devices if d["resource_group"] == "training")
    assert training["labels"]["team"] == "ml-research"  # other scenario groups stay


@pytest.mark.parametrize("how", ["env", "file"])
def test_a_node_group_of_the_user_replaces_the_scenario_rules(tmp_path: Path, how: str) -> None:
    config = tmp_path / "c.toml"
    text = '[[rules]]\nresource_group = "training"\nvendor = "amd"\n'
    env = None
    if how == "env":
        env = {"ALLSMI_RESOURCE_GROUP": "pool-b"}
    else:
        text = '[node]\nresource_group = "pool-b"\n\n' + text
    config.write_text(text)
    groups = _groups(_snapshot("--simulate", "mixed", "--config", str(config), env=env))
    assert groups["amd"] == {"training"}  # user rules still apply
    for vendor in ("nvidia", "intel", "furiosa", "rebellions", "tenstorrent"):
        assert groups[vendor] == {"pool-b"}, vendor


SCENARIO = 'include = "mixed"\nname = "site"\n'


@pytest.mark.parametrize("text, line, key", [
    (SCENARIO + '\n[[rules]]\nresource_group = "x"\nvendr = "amd"\n', 6, "rules[1].vendr"),
    (SCENARIO + '\n[[rules]]\nvendor = "amd"\n', 4, "rules[1]"),
    (SCENARIO + '\n[groups.x]\nprice_per_device_hour = 1.0\n', 4, "groups.x"),
    (SCENARIO + '\n[groups.x]\nlabels = { uuid = "a" }\n', 5, "groups.x.labels.uuid"),
    (SCENARIO + '\n[groups.x]\nprice_per_device_hour = -1.0\ncurrency = "USD"\n', 5,
     "groups.x.price_per_device_hour"),
    (SCENARIO + 'groups = 3\n', 3, "groups"),
    (SCENARIO + 'rules = ["a"]\n', 3, "rules[1]"),
])
def test_bad_scenario_groups_exit_2_naming_file_line_and_key(tmp_path: Path, text: str, line: int,
                                                             key: str) -> None:
    scenario = tmp_path / "site.toml"
    scenario.write_text(text)
    result = run_allsmi("snapshot", "--simulate", str(scenario))
    assert result.returncode == 2, result.stderr
    assert str(scenario) in result.stderr and f"line {line}" in result.stderr, result.stderr
    assert f"'{key}'" in result.stderr, result.stderr
    assert result.stdout == ""


def test_including_file_rules_come_first(tmp_path: Path) -> None:
    scenario = tmp_path / "site.toml"
    scenario.write_text(SCENARIO + '\n[[rules]]\nvendor = "amd"\nresource_group = "amd-pool"\n\n'
                        '[groups.npu]\nlabels = { team = "edge" }\n')
    devices = _snapshot("--simulate", str(scenario))
    groups = _groups(devices)
    assert groups["amd"] == {"amd-pool"} and groups["intel"] == {"inference"}
    assert {d["labels"].get("team") for d in devices if d["resource_group"] == "npu"} == {"edge"}

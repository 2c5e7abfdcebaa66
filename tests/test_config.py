"""Configuration: discovery, precedence, validation errors naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.config import ConfigError, discover_path, load_config, parse_config
from allsmi.groups import assign_groups
from allsmi.schema import DeviceSample

from .conftest import run_allsmi


def _err(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, Path("/etc/allsmi/config.toml"))
    return info.value


def test_discovery_order(tmp_path: Path) -> None:
    user = tmp_path / "xdg" / "allsmi" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert discover_path(None, env) == (user, False)
    assert discover_path(None, {**env, "ALLSMI_CONFIG": "/x.toml"}) == (Path("/x.toml"), True)
    assert discover_path("/flag.toml", {**env, "ALLSMI_CONFIG": "/x.toml"}) == (Path("/flag.toml"), True)


def test_precedence_env_over_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[node]\nresource_group = "from-file"\n')
    assert load_config(path, {}).default_group == "from-file"
    assert load_config(path, {"ALLSMI_RESOURCE_GROUP": "from-env"}).default_group == "from-env"
    assert load_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "none")}).default_group == "default"


@pytest.mark.parametrize(("text", "line", "key", "fragment"), [
    ('[collector]\ninterval_seconds = "fast"\n', 2, "collector.interval_seconds", "number"),
    ('[collector]\n\nbackend_timeout_seconds = 0\n', 3, "collector.backend_timeout_seconds", ">="),
    ('[groups.a]\nprice_per_kwh = 0.1\ncurrency = "dollars"\n', 3, "groups.a.currency", "ISO 4217"),
    ('[groups.a]\nlabels = { resource_group = "x" }\n', 2, "groups.a.labels.resource_group", "label"),
    ('[[rules]]\nresource_group = "a"\nvendor = "x"\n\n[[rules]]\nresource_group = "b"\n', 5, "rules[2]",
     "at least one"),
    ('[[rules]]\nvendor = "nvidia"\n', 1, "rules[1]", "resource_group"),
    ('[nodes]\n', 1, "nodes", "unknown key"),
    ('x = [\n', None, None, "invalid TOML"),
    ('[node]\nresource_group = "a"\nresource_group = "b"\n', 3, None, "invalid TOML"),
])
def test_errors_are_located(text: str, line: int | None, key: str | None, fragment: str) -> None:
    err = _err(text)
    assert err.line == line and err.key == key
    assert fragment in str(err) and "/etc/allsmi/config.toml" in str(err)


def test_rules_first_match_wins_and_partitions_follow_parent() -> None:
    config = parse_config("""
[[rules]]
resource_group = "a"
vendor = "nvidia"
index = "[0-3]"
[[rules]]
resource_group = "b"
model = "*h100*"
[[rules]]
resource_group = "host-pool"
host = "gpu-*"
""")
    def dev(i: int, vendor: str = "nvidia", parent: str | None = None, name: str = "NVIDIA H100") -> DeviceSample:
        return DeviceSample(id=f"{vendor}-{i}-{parent}", vendor=vendor, kind="gpu", backend=vendor, index=i,
                            name=name, parent=parent)
    out = assign_groups([dev(1), dev(5), dev(0, "amd", name="MI300X"), dev(0, parent="nvidia-5-None",
                                                                         name="MIG 1g.10gb")],
                        "node-1", config)
    assert [d.resource_group for d in out] == ["a", "b", "default", "b"]
    assert assign_groups([dev(0, "amd", name="MI300X")], "gpu-07", config)[0].resource_group == "host-pool"


def test_unknown_backend_in_config_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[backends]\nenabled = ["nvidia", "nvidai"]\n')
    result = run_allsmi("snapshot", "--config", str(path))
    assert result.returncode == 2
    assert "line 2" in result.stderr and "backends.enabled" in result.stderr and "nvidai" in result.stderr

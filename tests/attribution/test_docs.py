"""docs/attribution.md's configuration example is valid, and names only real files."""

from __future__ import annotations

import re
from pathlib import Path

from allsmi.collection import registry
from allsmi.attribution import attribution_settings, build_sources
from allsmi.config import parse_config

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "attribution.md").read_text()


def test_configuration_example_is_valid() -> None:
    block = re.search(r"```toml\n(.*?)```", DOC, re.S)
    assert block
    config = parse_config(block.group(1), Path("/etc/allsmi/config.toml"))
    settings = attribution_settings(config, {}, registry.declarations())
    assert [s.name for s in build_sources(settings)] == ["kubernetes", "hpc-job", "cgroup"]
    rule = settings.rule_for("example.com/npu")
    assert rule and (rule.vendor, rule.id_kind) == ("rebellions", "index")


def test_named_paths_exist() -> None:
    for path in ("contrib/slurm/allsmi-prolog.sh", "contrib/slurm/allsmi-epilog.sh",
                 "allsmi/attribution/_podresources/api.proto", "fixtures/attribution"):
        assert path in DOC and (REPO / path).exists(), path

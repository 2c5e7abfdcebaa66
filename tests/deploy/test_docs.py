"""The docs include the deploy/ files instead of copying them: any unit text left in a doc is
the file itself, and every deploy/ path a doc names exists."""

from __future__ import annotations

import re

from .support import DEPLOY, REPO, UNITS

DOCS = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md", DEPLOY / "README.md",
                                                 DEPLOY / "kubernetes" / "README.md"]
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def test_unit_texts_in_docs_are_the_files() -> None:
    files = {(DEPLOY / "systemd" / unit).read_text() for unit in UNITS}
    for doc in DOCS:
        for block in _FENCE.findall(doc.read_text()):
            if re.search(r"^\[(Unit|Service|Timer|Install)\]$", block, re.M):
                assert block in files, f"{doc.relative_to(REPO)}: a unit text that is not a " \
                                       "deploy/systemd file; link the file instead"


def test_deploy_paths_named_in_docs_exist() -> None:
    named = 0
    for doc in DOCS:
        for path in re.findall(r"(?<![\w/])deploy/[\w./*-]*[\w*]", doc.read_text()):
            named += 1
            assert list(REPO.glob(path)), f"{doc.relative_to(REPO)} names {path}"
    assert named >= 10


def test_the_readme_installs_every_unit_and_the_rules() -> None:
    text = (DEPLOY / "README.md").read_text()
    assert "install -m 0644 deploy/systemd/allsmi-* /etc/systemd/system/" in text
    for unit in ("allsmi-exporter.service", "allsmi-record.service", "allsmi-export.timer"):
        assert unit in text.split("systemctl enable --now", 1)[1].splitlines()[0]
    assert "deploy/prometheus/allsmi-rules.yml" in text and "scrape_timeout" in text


def test_the_prometheus_config_of_the_guide_passes_promtool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The guide's prometheus.yml, as written (the rules path pointed at the repo's file), is a
    valid configuration with a job for allsmi serve and one for node_exporter's textfile."""
    import subprocess

    import yaml

    from ..conftest import require_tool
    promtool = require_tool("promtool", "prometheus")
    text = (DEPLOY / "README.md").read_text()
    blocks = [b for b in re.findall(r"^```ya?ml\n(.*?)^```", text, re.S | re.M) if "scrape_configs:" in b]
    assert blocks, "deploy/README.md shows no prometheus.yml"
    block = blocks[0].replace("/etc/prometheus/rules/allsmi-rules.yml",
                              str(DEPLOY / "prometheus" / "allsmi-rules.yml"))
    config = tmp_path / "prometheus.yml"
    config.write_text(block)
    result = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    ports = {target.rsplit(":", 1)[1]: job["job_name"] for job in yaml.safe_load(block)["scrape_configs"]
             for static in job.get("static_configs", []) for target in static["targets"]}
    assert "9477" in ports and "9100" in ports and ports["9477"] != ports["9100"], ports

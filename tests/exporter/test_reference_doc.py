"""The committed metric reference matches the declarations it is generated from."""

from __future__ import annotations

from pathlib import Path

from allsmi.exporter.families import FAMILIES
from allsmi.exporter.reference import metrics_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_docs_metrics_md_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == metrics_markdown(), \
        "docs/metrics.md is stale: run `python -m allsmi.exporter.reference > docs/metrics.md`"


def test_every_family_is_documented() -> None:
    text = metrics_markdown()
    for family in FAMILIES:
        assert f"| `{family.name}` |" in text

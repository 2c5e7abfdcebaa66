"""The metric reference (``docs/metrics.md``), generated from the family declarations.

Regenerate with ``python -m allsmi.exporter.reference > docs/metrics.md``; a
test fails when the committed file differs from what this prints.
"""

from __future__ import annotations

import sys

from allsmi.exporter.families import COMMAND_MAX_CHARS, FAMILIES, Family

_HEADER = """\
# Metric reference

Generated from the declarations in `allsmi/exporter/families.py` and `allsmi/fields.py`
by `python -m allsmi.exporter.reference > docs/metrics.md`; do not edit by hand.

Every per-device series carries the join labels `uuid` (the device's `id`: its uuid
when the vendor has one), `index`, `vendor`, `model` and `resource_group`; names,
versions and the partition parent live in `allsmi_device_info`. An unknown value is
left out, never exported as 0 or NaN. Partitions (MIG instances, compute partitions,
dies) have their own series; board-level quantities (power, power limit, energy) are
exported once, on the device that owns the board, so `sum by (resource_group)` never
counts a board twice. Counters start at 0 when the exporter starts (see their
`_created` series) and never decrease; a device missing from the latest snapshot has
no series.
"""


def _row(family: Family) -> str:
    labels = ", ".join(f"`{label}`" if not label.startswith("<") else label
                       for label in family.labels) or "none"
    return (f"| `{family.name}` | {family.type} | {family.unit or '-'} | {labels} | "
            f"{family.help} | {family.source} | {family.condition} |")


def metrics_markdown() -> str:
    """The whole metric reference as Markdown."""
    lines = [_HEADER, "| Name | Type | Unit | Labels | Meaning | Source | Present when |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines.extend(_row(f) for f in FAMILIES)
    lines.append("")
    lines.append(f"`command` is cut to {COMMAND_MAX_CHARS} characters. In OpenMetrics, "
                 "info families have type `info` and counters carry `# UNIT` and `_created`; "
                 "in the text format 0.0.4 info families are gauges with value 1.")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - exercised by the docs test through the function
    sys.stdout.write(metrics_markdown())

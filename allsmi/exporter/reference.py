"""The metric reference (``docs/metrics.md``), generated from the family declarations.

Regenerate with ``python -m allsmi.exporter.reference > docs/metrics.md``; a
test fails when the committed file differs from what this prints.
"""

from __future__ import annotations

import sys

from allsmi.exporter.families import (ALLOCATED_TOTAL, COMMAND_MAX_CHARS, FAMILIES, IDLE_ALLOCATED_TOTAL,
                                      Family)
from allsmi.schema import DeviceSample, ProcessSample, Workload
from allsmi.usage import held

_HEADER = """\
# Metric reference

Generated from the declarations in `allsmi/exporter/families.py` and `allsmi/schema/fields.py`
by `python -m allsmi.exporter.reference > docs/metrics.md`; do not edit by hand.

Every per-device series carries the join labels `uuid` (the device's `id`: its uuid
when the vendor has one), `index`, `vendor`, `model` and `resource_group`; names,
versions and the partition parent live in `allsmi_device_info`. An unknown value is
left out, never exported as 0 or NaN. Partitions (MIG instances, compute partitions,
dies) have their own series; board-level gauges (power, power limit) are exported
once, on the device that owns the board, and a partitioned board's energy counter is
split between its partitions and the board by their billing shares, so
`sum by (resource_group)` never counts a board twice. Counters start at 0 when the
exporter starts (see their `_created` series) and never decrease; a device missing
from the latest snapshot has no series.
"""


def _row(family: Family) -> str:
    labels = ", ".join(f"`{label}`" if not label.startswith("<") else label
                       for label in family.labels) or "none"
    return (f"| `{family.name}` | {family.type} | {family.unit or '-'} | {labels} | "
            f"{family.help} | {family.source} | {family.condition} |")


def _allocated_sentence() -> str:
    """Which devices have allocated-time series, worked out by asking the rule the counters use
    (:func:`allsmi.usage.held`) about every combination of known and unknown holders."""
    examples = {"processes": (None, (), (ProcessSample(pid=1),)),
                "workloads": (None, (), (Workload(source="simulated", job_id="1"),))}
    unknown: list[str] = []
    for processes in examples["processes"]:
        for workloads in examples["workloads"]:
            dev = DeviceSample(id="d", vendor="v", kind="gpu", backend="b",
                               processes=processes, workloads=workloads)
            if held(dev) is None:
                nulls = [f"`{name}`" for name, value in (("processes", processes), ("workloads", workloads))
                         if value is None]
                unknown.append(" and ".join(nulls) + (" are" if len(nulls) > 1 else " is") + " null")
    if not unknown:
        return (f"`{ALLOCATED_TOTAL.name}` and `{IDLE_ALLOCATED_TOTAL.name}` exist for every device "
                "seen with health ok or degraded.")
    return (f"`{ALLOCATED_TOTAL.name}` and `{IDLE_ALLOCATED_TOTAL.name}` exist only for devices whose "
            "holders are known: a device whose " + ", or whose ".join(unknown) + " in the snapshot (its "
            "backend cannot list processes, as hl-smi without `[backends.gaudi] processes = true`, and no "
            "attribution source is active) has no allocated-time series at all, since unknown is left out, "
            "never counted as idle.")


def metrics_markdown() -> str:
    """The whole metric reference as Markdown."""
    lines = [_HEADER, "| Name | Type | Unit | Labels | Meaning | Source | Present when |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines.extend(_row(f) for f in FAMILIES)
    lines.append("")
    lines.append(_allocated_sentence())
    lines.append("")
    lines.append(f"`command` is cut to {COMMAND_MAX_CHARS} characters. In OpenMetrics, "
                 "info families have type `info` and counters carry `# UNIT` and `_created`; "
                 "in the text format 0.0.4 info families are gauges with value 1.")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - exercised by the docs test through the function
    sys.stdout.write(metrics_markdown())

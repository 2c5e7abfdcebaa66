"""Writing metric families as text format 0.0.4 and OpenMetrics 1.0 text.

prometheus_client's generic writers validate and escape every label *name*
of every sample; with 512 devices (about 9,000 series) that took ~300 ms of
GIL-holding CPU per collection cycle. Our label names are fixed, valid
identifiers declared in :mod:`allsmi.exporter.families`, so these writers
only escape label *values* and reuse the rendered label block of a label set
across families. The output follows prometheus_client's layout (counters'
``_created`` as a separate gauge family in the text format; ``info`` and
``# UNIT`` only in OpenMetrics) and is checked by ``promtool`` and both
prometheus_client parsers in the tests.
"""

from __future__ import annotations

import math
from typing import Iterable

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

_LABEL_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", '"': '\\"'})
_TEXT_HELP_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n"})


class LabelBlocks:
    """Renders ``{a="x",b="y"}`` blocks, each distinct label set once per write."""

    def __init__(self) -> None:
        self._cache: dict[tuple[tuple[str, str], ...], str] = {}

    def __call__(self, labels: dict[str, str]) -> str:
        if not labels:
            return ""
        key = tuple(labels.items())
        block = self._cache.get(key)
        if block is None:
            block = "{" + ",".join(f'{k}="{v.translate(_LABEL_ESCAPES)}"' for k, v in key) + "}"
            self._cache[key] = block
        return block


def _value(value: float) -> str:
    if not math.isfinite(value):
        return floatToGoString(value)  # +Inf, -Inf, NaN spelled as Prometheus expects
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value)}.0"
    return repr(float(value))  # shortest round-trip form; both formats accept e-notation


def render_text(families: Iterable[Metric], labels: "LabelBlocks | None" = None) -> bytes:
    """Text exposition format 0.0.4 (``labels`` may share a label-block cache between calls)."""
    labels = labels or LabelBlocks()
    out: list[str] = []
    for family in families:
        name, kind = family.name, family.type
        if kind == "counter":
            exposed = name + "_total"
        elif kind == "info":
            exposed, kind = name + "_info", "gauge"
        else:
            exposed = name
        help_text = family.documentation.translate(_TEXT_HELP_ESCAPES)
        out.append(f"# HELP {exposed} {help_text}\n# TYPE {exposed} {kind}\n")
        created: list[str] = []
        for sample in family.samples:
            line = f"{sample.name}{labels(sample.labels)} {_value(sample.value)}\n"
            if family.type == "counter" and sample.name.endswith("_created"):
                created.append(line)
            else:
                out.append(line)
        if created:
            out.append(f"# HELP {name}_created {help_text}\n# TYPE {name}_created gauge\n")
            out.extend(created)
    return "".join(out).encode("utf-8")


def render_openmetrics(families: Iterable[Metric], labels: "LabelBlocks | None" = None) -> bytes:
    """OpenMetrics 1.0 text, ending in ``# EOF``."""
    labels = labels or LabelBlocks()
    out: list[str] = []
    for family in families:
        name = family.name
        help_text = family.documentation.translate(_LABEL_ESCAPES)
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        if family.unit:
            out.append(f"# UNIT {name} {family.unit}\n")
        out.extend(f"{s.name}{labels(s.labels)} {_value(s.value)}\n" for s in family.samples)
    out.append("# EOF\n")
    return "".join(out).encode("utf-8")

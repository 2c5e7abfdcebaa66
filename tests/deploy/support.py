"""What the deploy tests share: the files under deploy/, and the metric names they may use."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import yaml

from allsmi.exporter.families import FAMILIES

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus" / "allsmi-rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "allsmi-rules.test.yml"
#: The budgets' unit tests: a month boundary, so evaluated hourly (a file of their own).
RULES_BUDGET_TEST = DEPLOY / "prometheus" / "allsmi-rules.budgets.test.yml"
DASHBOARDS = ("allsmi-fleet.json", "allsmi-node.json")
UNITS = ("allsmi-exporter.service", "allsmi-record.service", "allsmi-export.service",
         "allsmi-export.timer")

#: Metrics the rules and dashboards already use that the exporter does not declare yet.
#: tests/deploy/test_metric_names.py fails once one of them is declared, so that its entry
#: is removed here (and the "every panel query answers" check then covers it).
PENDING: dict[str, str] = {
    # metrics named in the rules or dashboards that the exporter does not declare yet (none now)
}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_METRIC = re.compile(r"(?<![\w:])((?:[a-z_]+:)?allsmi_\w+(?::\w+)?)")
#: Label names are not metrics: the lists of ``by``/``without``/``on``/``ignoring``/``group_*``
#: and the matchers in braces (``{allsmi_total=~"..."}``) are dropped before names are looked for.
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_MATCHERS = re.compile(r"\{[^{}]*\}")


def metric_names(promql: str) -> set[str]:
    """Names of allsmi metrics and recorded series in a PromQL expression (strings ignored)."""
    bare = _LABEL_LISTS.sub("", _MATCHERS.sub("", _STRING.sub('""', promql)))
    return set(_METRIC.findall(bare))


def rules() -> dict[str, Any]:
    return yaml.safe_load(RULES.read_text())


def all_rules() -> Iterator[dict[str, Any]]:
    for group in rules()["groups"]:
        yield from group["rules"]


def recorded() -> dict[str, str]:
    """Recording rule name -> expression."""
    return {r["record"]: r["expr"] for r in all_rules() if "record" in r}


def export_status_metrics() -> set[str]:
    """The metrics of ``allsmi export --textfile`` (written by allsmi/accounting/status.py)."""
    source = (REPO / "allsmi" / "accounting" / "status.py").read_text()
    return set(re.findall(r"\ballsmi_export_[a-z_]+[a-z]\b", source))


def declared() -> set[str]:
    """Every metric name that exists: the exporter's families, the export's textfile."""
    return {f.name for f in FAMILIES} | export_status_metrics()


def pending_rules() -> set[str]:
    """Recording rules that depend (transitively) on a pending metric."""
    found: set[str] = set()
    table = recorded()
    changed = True
    while changed:
        changed = False
        for name, expr in table.items():
            if name not in found and metric_names(expr) & (set(PENDING) | found):
                found.add(name)
                changed = True
    return found


def build_module() -> ModuleType:
    """deploy/grafana/build.py, imported from its path."""
    spec = importlib.util.spec_from_file_location("allsmi_deploy_grafana_build",
                                                  DEPLOY / "grafana" / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())

"""What the deploy tests share: the files under deploy/, and the metric names they may use."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import yaml

from allsmi.exporter.families import FAMILIES

from ..conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus" / "allsmi-rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "allsmi-rules.test.yml"
#: The budgets' unit tests: a month boundary, so evaluated hourly (a file of their own).
RULES_BUDGET_TEST = DEPLOY / "prometheus" / "allsmi-rules.budgets.test.yml"
#: Outages of a day and more (AllsmiExporterStale's 24-hour lookback): evaluated every 5 minutes.
RULES_OUTAGE_TEST = DEPLOY / "prometheus" / "allsmi-rules.outage.test.yml"
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


#: A Grafana variable in a query ($name, ${name}); label_replace's $1 is not one (Grafana leaves
#: a name it does not know as written).
VARIABLE = re.compile(r"\$\{?([A-Za-z_]\w*)")
#: Grafana's template variables at "All".
ALL_VARIABLES = {"$resource_group": ".*", "$vendor": ".*", "$host": ".*"}


def panel_targets(name: str, title: str) -> list[dict[str, Any]]:
    """The queries of the one panel called ``title`` in the committed dashboard ``name``."""
    found = [p for p in panels(json.loads((DEPLOY / "grafana" / name).read_text()))
             if p["title"] == title]
    assert len(found) == 1, f"{name} has no panel {title!r} (or several)"
    return found[0]["targets"]


def table_columns(panel: dict[str, Any]) -> dict[str, str]:
    """Column name -> Grafana unit of a table panel, as Grafana shows it: each query's value
    column ("Value #A" where there are several queries, "Value" for one) under the name the
    organize transformation gives it, in the unit its override sets, else the panel's."""
    names = next(t["options"].get("renameByName", {}) for t in panel["transformations"]
                 if t["id"] == "organize")
    fields = ["Value"] if len(panel["targets"]) == 1 else \
        [f"Value #{t['refId']}" for t in panel["targets"]]
    units = {o["matcher"]["options"]: p["value"] for o in panel["fieldConfig"]["overrides"]
             if o["matcher"]["id"] == "byName" for p in o["properties"] if p["id"] == "unit"}
    default = panel["fieldConfig"]["defaults"]["unit"]
    return {names.get(f, f): units.get(names.get(f, f), default) for f in fields}


def at_all(expr: str, builtins: dict[str, str] | None = None) -> str:
    """A panel query with its variables at "All" (and Grafana's built-ins as given)."""
    for name, value in {**(builtins or {}), **ALL_VARIABLES}.items():
        expr = expr.replace(name, value)
    assert not VARIABLE.search(expr), expr
    return expr


def promtool_eval(tmp_path: Path, input_series: list[dict[str, str]],
                  cases: list[tuple[str, dict[str, float]]], eval_time: str = "5m") -> str:
    """Evaluate each (expression, {labels: value}) with ``promtool test rules`` at
    ``eval_time`` over ``input_series`` (1 minute apart), deploy/prometheus/allsmi-rules.yml
    loaded (plus 0, which drops a recorded series' name: the values and the other labels are
    compared); its output (asserting success)."""
    tests = [{"expr": f"({expr}) + 0", "eval_time": eval_time,
              "exp_samples": [{"labels": f"{{{labels}}}", "value": value}
                              for labels, value in expected.items()]}
             for expr, expected in cases]
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
           "tests": [{"name": "panel queries", "interval": "1m", "input_series": input_series,
                      "promql_expr_test": tests}]}
    path = tmp_path / "panels.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = subprocess.run([require_tool("promtool", "prometheus"), "test", "rules", path.name],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    return out


def device_series(metric: str, instance: str, uuid: str, group: str, vendor: str, value: float,
                  parent: str | None = None) -> dict[str, str]:
    """A promtool input series of one device's ``metric``, ``value`` for ten steps (``parent``:
    ``allsmi_device_info``'s ``parent_uuid``)."""
    labels = f'instance="{instance}", uuid="{uuid}", vendor="{vendor}", resource_group="{group}"'
    if parent is not None:
        labels += f', parent_uuid="{parent}"'
    return {"series": f"{metric}{{{labels}}}", "values": f"{value:g}x10"}

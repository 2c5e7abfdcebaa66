"""deploy/prometheus/allsmi-rules.yml: checked and unit-tested by the real promtool."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from allsmi.dashboard.sources.promsummary import recording_rules

from ..conftest import require_tool
from .support import (RULES, RULES_BUDGET_TEST, RULES_OUTAGE_TEST, RULES_TEST, all_rules,
                      recorded, rules)

ALERTS = {  # name -> (metric the expression reads, "for" duration)
    "AllsmiBackendDown": ("allsmi_backend_up", "5m"),
    "AllsmiDeviceLost": ("allsmi_device_up", "2m"),
    "AllsmiExporterStale": ("allsmi_last_collect_timestamp_seconds", None),
    "AllsmiWebConfigReloadFailed": ("allsmi_exporter_web_config_last_reload_successful", "10m"),
    "AllsmiDeviceAllocatedIdle": ("allsmi_device_idle_allocated_seconds_total", None),
    "AllsmiHolderWaiting": ("allsmi_holder_waiting_seconds_total", None),
    "AllsmiBillingExportFailed": ("allsmi_export_success", None),
    "AllsmiGroupBudgetForecastExceeded": ("allsmi_resource_group_budget_per_month", "1h"),
    "AllsmiGroupBudgetExceeded": ("allsmi_resource_group_budget_per_month", None),
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("promtool", "prometheus"), *args], capture_output=True,
                          text=True, timeout=600, cwd=RULES.parent)


def groups_testing(path: Path, alert: str) -> str:
    """The promtool unit-test file ``path`` with only its test groups that test ``alert``: a
    rule broken on purpose must fail them. The whole files take seconds of promtool's CPU
    each, most of it in other alerts' groups; the whole files pass with the shipped rules in
    test_promtool_test_rules."""
    doc = yaml.safe_load(path.read_text())
    doc["tests"] = [group for group in doc["tests"]
                    if any(case.get("alertname") == alert for case in group.get("alert_rule_test", ()))]
    assert doc["tests"], f"{path.name} tests no {alert}"
    return yaml.safe_dump(doc, sort_keys=False)


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("tests", [RULES_TEST, pytest.param(RULES_BUDGET_TEST, marks=pytest.mark.long(35)),
                                   RULES_OUTAGE_TEST], ids=lambda p: p.name)
def test_promtool_test_rules(tests) -> None:  # type: ignore[no-untyped-def]
    result = promtool("test", "rules", tests.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


@pytest.mark.long(20)
def test_budgets_count_the_calendar_month_not_a_rolling_window(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The budget tests fail on a rolling 30 days: last month's cost must stop counting on
    the 1st (AllsmiGroupBudgetExceeded read the last 30 days before issue 22's fix)."""
    text = RULES.read_text()
    rolling = text.replace("and on (month_mod3) (", "or on (month_mod3) (")
    assert rolling != text
    (tmp_path / RULES.name).write_text(rolling)
    (tmp_path / RULES_BUDGET_TEST.name).write_text(
        groups_testing(RULES_BUDGET_TEST, "AllsmiGroupBudgetExceeded"))
    result = subprocess.run([require_tool("promtool", "prometheus"), "test", "rules",
                             RULES_BUDGET_TEST.name], capture_output=True, text=True,
                            timeout=600, cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "AllsmiGroupBudgetExceeded" in out, out


def test_promtool_test_rules_fails_on_a_broken_alert(tmp_path) -> None:
    """The unit tests do check the alerts: one with a wrong threshold fails them."""
    broken = RULES.read_text().replace("for: 5m", "for: 10m", 1)
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULES_TEST.name).write_text(groups_testing(RULES_TEST, "AllsmiBackendDown"))
    result = subprocess.run([require_tool("promtool", "prometheus"), "test", "rules",
                             RULES_TEST.name], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert result.returncode != 0 and "AllsmiBackendDown" in result.stdout + result.stderr


HOLDER = "instance, uuid, resource_group, namespace, pod, job_id, user"


def _holder_waiting_tests(tmp_path: Path, rules_text: str) -> subprocess.CompletedProcess[str]:
    """promtool's AllsmiHolderWaiting test groups against ``rules_text``."""
    (tmp_path / RULES.name).write_text(rules_text)
    (tmp_path / RULES_TEST.name).write_text(groups_testing(RULES_TEST, "AllsmiHolderWaiting"))
    return subprocess.run([require_tool("promtool", "prometheus"), "test", "rules",
                           RULES_TEST.name], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def test_holder_waiting_adds_nothing_and_input_together(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """AllsmiHolderWaiting sums the two reasons per holder and device: 45 % nothing + 45 % input
    fires, and so does 50/50; 70 % nothing alone does not. The alert as first shipped, summed
    by reason as well, weighed one reason at a time and missed the first two: its tests fail."""
    text = RULES.read_text()
    alert = next(r for r in all_rules() if r.get("alert") == "AllsmiHolderWaiting")
    assert f"by ({HOLDER}, reason)" not in alert["expr"] and f"by ({HOLDER})" in alert["expr"]
    result = _holder_waiting_tests(tmp_path, text)
    assert result.returncode == 0, result.stdout + result.stderr
    # One reason at a time (issue 31's first version): the split holders no longer fire.
    start = text.index("      - alert: AllsmiHolderWaiting")
    end = text.index("        labels:", start)
    per_reason = (text[start:end]
                  .replace(f'by ({HOLDER}) (increase(allsmi_holder_waiting_seconds_total{{reason=~',
                           f'by ({HOLDER}, reason) (increase(allsmi_holder_waiting_seconds_total{{reason=~')
                  .replace(f"/ on ({HOLDER})\n", f"/ on ({HOLDER}) group_left ()\n")
                  .replace(f"and on ({HOLDER})\n", f"and on ({HOLDER}, reason)\n"))
    assert per_reason.count(", reason)") == 3
    result = _holder_waiting_tests(tmp_path, text[:start] + per_reason + text[end:])
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "adds nothing and input together" in out, out
    # ... the 45/45/10 and the 50/50 holders: nothing fired.
    assert "got:[]" in out.split("adds nothing and input together", 1)[1], out


def test_alerts_are_the_specified_ones() -> None:
    alerts = {r["alert"]: r for r in all_rules() if "alert" in r}
    assert set(alerts) == set(ALERTS)
    for name, (metric, duration) in ALERTS.items():
        rule = alerts[name]
        assert metric in rule["expr"], name
        assert rule.get("for") == duration, name
        summary, description = rule["annotations"]["summary"], rule["annotations"]["description"]
        where = "resource_group" if name.startswith("AllsmiGroup") else "instance"  # fleet-wide
        assert f"{{{{ $labels.{where} }}}}" in summary and f"{{{{ $labels.{where} }}}}" in description
        if name in ("AllsmiDeviceLost", "AllsmiDeviceAllocatedIdle", "AllsmiHolderWaiting"):
            assert "{{ $labels.uuid }}" in summary and "{{ $labels.uuid }}" in description
        if name == "AllsmiBackendDown":
            assert "{{ $labels.backend }}" in summary and "{{ $labels.backend }}" in description
        assert len(description) > 150, f"{name}: say what to do"


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    tests = [case for path in (RULES_TEST, RULES_BUDGET_TEST, RULES_OUTAGE_TEST)
             for case in yaml.safe_load(path.read_text())["tests"]]
    firing: dict[str, set[bool]] = {}
    for case in tests:
        for check in case.get("alert_rule_test", ()):
            firing.setdefault(check["alertname"], set()).add(bool(check.get("exp_alerts")))
    assert {name: {True, False} for name in ALERTS} == firing


def test_recording_rule_names_follow_level_metric_operations() -> None:
    for name in recorded():
        assert re.fullmatch(r"[a-z_]+:allsmi_[a-z_]+:[a-z0-9_]+", name), name
        assert not name.split(":")[1].endswith("_total"), f"{name}: rates drop _total"


def test_fleet_view_rules_are_the_terminal_dashboards_queries() -> None:
    """`allsmi view --prometheus` reads these recorded series when loaded: same expressions."""
    group = next(g for g in rules()["groups"] if g["name"] == "allsmi-fleet-view")
    shipped = {r["record"]: " ".join(r["expr"].split()) for r in group["rules"]}
    assert shipped == {r["record"]: " ".join(r["expr"].split()) for r in recording_rules()}


@pytest.mark.parametrize("group", ["allsmi-resource-groups"])
def test_group_level_rules_cover_utilization_power_energy_and_time(group: str) -> None:
    names = {r["record"] for g in rules()["groups"] if g["name"] == group for r in g["rules"]}
    for metric in ("utilization_ratio", "power_watts", "energy_joules", "allocated_seconds",
                   "idle_allocated_seconds"):
        assert any(f":allsmi_device_{metric}:" in n for n in names), metric


def _vmalert_dry_run(path) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run([require_tool("vmalert", "victoria-metrics"), f"-rule={path}",
                           "-dryRun", "-loggerLevel=ERROR"],
                          capture_output=True, text=True, timeout=60)


def test_vmalert_loads_the_same_rules_file() -> None:
    """The rules (the hourly roll-ups included) load in vmalert as they are (MetricsQL)."""
    result = _vmalert_dry_run(RULES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_vmalert_dry_run_fails_on_a_broken_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broken = RULES.read_text().replace("vector(3600) * on ()", "vector(3600 * on ()", 1)
    assert broken != RULES.read_text()
    (tmp_path / "broken.yml").write_text(broken)
    assert _vmalert_dry_run(tmp_path / "broken.yml").returncode != 0


def test_hourly_rollups_cover_every_accounting_counter() -> None:
    from allsmi.accounting.prometheus.rollup import (DEVICE_SAMPLES, GROUP_INFO_ROLLUP, MARKER,
                                              MEMORY_AVG, MEMORY_MAX, ROLLUPS, WORKLOAD_SAMPLES)
    from allsmi.accounting.prometheus.source import COUNTERS
    group = next(g for g in rules()["groups"] if g["name"] == "allsmi-billing-hourly")
    assert group["interval"] == "1h"
    recorded_here = {r["record"]: r["expr"] for r in group["rules"]}
    wanted = {MARKER, DEVICE_SAMPLES, GROUP_INFO_ROLLUP, MEMORY_AVG, MEMORY_MAX,
              WORKLOAD_SAMPLES, *ROLLUPS.values()}
    assert wanted <= set(recorded_here)
    for counter in COUNTERS.values():  # every raw counter the export reads is rolled up
        assert any(f"increase({counter}[1h])" in e for e in recorded_here.values()), counter


def test_the_rollup_marker_is_written_after_the_hours_rollups() -> None:
    """An hour with a marker is billed from roll-ups: a group's rules are evaluated and
    written in order, so the marker is the billing group's last rule, or a bill read between
    the two would miss the hour's roll-ups (deploy/README.md, "Backfill and replay")."""
    from allsmi.accounting.prometheus.rollup import MARKER
    group = next(g for g in rules()["groups"] if g["name"] == "allsmi-billing-hourly")
    assert [r["record"] for r in group["rules"]][-1] == MARKER

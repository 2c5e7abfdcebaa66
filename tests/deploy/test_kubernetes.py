"""deploy/kubernetes/: every overlay renders, validates, and its objects fit together.

Offline: ``kubectl kustomize`` renders without a cluster; built-in objects are validated
against the Kubernetes OpenAPI schemas shipped by ``kubernetes-validate`` (strict: unknown
fields fail), the Prometheus Operator objects against the models that
``cloudcoil.models.prometheus_operator`` generates from the operator's CRD schemas. The generated objects equal their sources. (What
the DaemonSets ask for: test_kubernetes_daemonset.py.)
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from allsmi.attribution.settings import attribution_settings
from allsmi.cli.serve import DEFAULT_PORT
from allsmi.config import parse_config

from .kube import (KIT, OVERLAYS, VENDORS, config_toml, container, daemonsets, k8s_validate, labels_match, load_all,
                   of_kind, one, render, vendor_of, volumes)
from .support import DEPLOY, REPO

#: Kubernetes versions the kit is validated against: pod-resources v1 is GA since 1.28, and
#: every later minor version that kubernetes-validate ships a schema for.
MIN_VERSION = (1, 28)

# --- rendering and schemas -----------------------------------------------------------------


def test_the_overlays_are_the_documented_ones() -> None:
    assert set(OVERLAYS) == {"fleet", "fleet-billing", "fleet-no-host-pid", "fleet-podmonitor", "fleet-tls-auth",
                             *VENDORS}
    assert set(VENDORS) == {"nvidia", "amd", "gaudi", "furiosa", "rebellions", "tenstorrent", "intel", "tpu",
                            "neuron", "ascend"}
    readme = (KIT / "README.md").read_text(encoding="utf-8")
    for overlay in OVERLAYS:
        assert f"overlays/{overlay}" in readme, f"README.md does not describe overlays/{overlay}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_everything_into_its_namespace(overlay: str) -> None:
    objects = render(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "ServiceAccount", "DaemonSet", "PrometheusRule", "ConfigMap",
            "NetworkPolicy"} <= kinds
    assert ({"ServiceMonitor", "Service"} <= kinds) != ("PodMonitor" in kinds)
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"].get("namespace") == "allsmi", obj["metadata"]["name"]
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names))
    vendors = {vendor_of(d) for d in of_kind(objects, "DaemonSet")}
    assert vendors == ({overlay} if overlay in VENDORS else set(VENDORS))


def schema_versions() -> list[str]:
    kv = pytest.importorskip("kubernetes_validate")
    root = Path(kv.__file__).parent / "kubernetes-json-schema"
    found = set()
    for path in root.glob("v*-local-strict"):
        match = re.match(r"v(\d+)\.(\d+)\.(\d+)-local-strict$", path.name)
        if match and tuple(map(int, match.groups()[:2])) >= MIN_VERSION:
            found.add(tuple(map(int, match.groups())))
    assert found, "kubernetes-validate ships no schema from 1.28 on"
    return [".".join(map(str, v)) for v in sorted(found)]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_builtin_objects_validate_against_every_supported_kubernetes(overlay: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    versions = schema_versions()
    assert len(versions) >= 6
    for obj in render(overlay):
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        for version in versions:
            try:
                k8s_validate(obj, version)
            except kv.ValidationError as exc:
                pytest.fail(f"{overlay}: {obj['kind']} {obj['metadata']['name']} is invalid in "
                            f"Kubernetes {version}: {exc.message} at {list(exc.path)}")


def test_schema_validation_catches_a_misspelt_field() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    daemonset = copy.deepcopy(daemonsets("nvidia")[0])
    container(daemonset)["livenesProbe"] = container(daemonset).pop("livenessProbe")
    with pytest.raises(kv.ValidationError):
        k8s_validate(daemonset, schema_versions()[-1])  # as the kit is checked (cached schemas)


def _covers(given: Any, parsed: Any, where: str = "") -> list[str]:
    """Where ``given`` has a field or value that ``parsed`` (the model's dump) lacks."""
    if isinstance(given, dict):
        if not isinstance(parsed, dict):
            return [where or "."]
        out = []
        for key, value in given.items():
            if key not in parsed:
                out.append(f"{where}.{key}: not a field of the CRD")
            else:
                out += _covers(value, parsed[key], f"{where}.{key}")
        return out
    if isinstance(given, list):
        if not isinstance(parsed, list) or len(given) != len(parsed):
            return [where]
        return [e for i, (a, b) in enumerate(zip(given, parsed)) for e in _covers(a, b, f"{where}[{i}]")]
    return [] if given == parsed else [f"{where}: {given!r} became {parsed!r}"]


def operator_errors(obj: dict[str, Any]) -> list[str]:
    models = pytest.importorskip("cloudcoil.models.prometheus_operator.v1")
    pydantic = pytest.importorskip("pydantic")
    try:
        model = getattr(models, obj["kind"]).model_validate(obj)
    except pydantic.ValidationError as exc:
        return [str(exc)]
    return _covers(obj, model.model_dump(by_alias=True, exclude_none=True, mode="json"))


@pytest.mark.parametrize("overlay", ["fleet", "fleet-billing", "fleet-podmonitor", "fleet-tls-auth"])
def test_prometheus_operator_objects_validate_against_the_crd_models(overlay: str) -> None:
    objects = [o for o in render(overlay) if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {o["kind"] for o in objects} == (
        {"PrometheusRule", "PodMonitor"} if overlay == "fleet-podmonitor" else {"PrometheusRule", "ServiceMonitor"})
    for obj in objects:
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert operator_errors(obj) == [], f"{obj['kind']}: {operator_errors(obj)}"


def test_crd_model_check_catches_a_misspelt_field_and_a_wrong_type() -> None:
    monitor = one(render("fleet"), "ServiceMonitor")
    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["scrapeTimout"] = "10s"
    assert any("scrapeTimout" in e for e in operator_errors(typo))
    wrong = copy.deepcopy(monitor)
    wrong["spec"]["endpoints"][0]["honorLabels"] = {"yes": 1}
    assert operator_errors(wrong)
    rule = one(render("fleet"), "PrometheusRule")
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["exprr"] = "1"
    assert operator_errors(broken)


# --- generated objects equal their sources ---------------------------------------------------


def test_generated_files_are_current() -> None:
    result = subprocess.run([sys.executable, str(KIT / "build.py"), "--check"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_prometheus_rule_is_the_rules_file(overlay: str) -> None:
    rule = one(render(overlay), "PrometheusRule", "allsmi")
    assert rule["spec"] == yaml.safe_load((DEPLOY / "prometheus" / "allsmi-rules.yml").read_text())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_dashboard_config_maps_are_the_grafana_json(overlay: str) -> None:
    files = sorted((DEPLOY / "grafana").glob("*.json"))
    assert len(files) >= 2
    maps = {}
    for cm in of_kind(render(overlay), "ConfigMap"):
        if cm["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
            (key,) = cm["data"]
            maps[key] = cm["data"][key]
    assert maps == {f.name: f.read_text(encoding="utf-8") for f in files}


def test_build_follows_a_changed_rules_file(tmp_path: Path) -> None:
    """A rules file changed by someone else shows up in the generated PrometheusRule."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kit_build", KIT / "build.py")
    assert spec and spec.loader
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    rules = yaml.safe_load(build.RULES.read_text())
    rules["groups"][0]["rules"].append({"record": "test:allsmi_devices:count", "expr": "count(allsmi_device_info)"})
    changed = tmp_path / "allsmi-rules.yml"
    changed.write_text(yaml.safe_dump(rules))
    build.RULES = changed
    generated = yaml.safe_load(build.prometheus_rule())
    assert generated["spec"] == rules
    assert generated["spec"] != yaml.safe_load((DEPLOY / "prometheus" / "allsmi-rules.yml").read_text())

# --- the objects fit together ---------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scrape_objects_select_the_exporter_pods(overlay: str) -> None:
    objects = render(overlay)
    pods = [ds["spec"]["template"]["metadata"]["labels"] for ds in of_kind(objects, "DaemonSet")]
    for ds in of_kind(objects, "DaemonSet"):
        assert labels_match(ds["spec"]["selector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"])
    selectors = [ds["spec"]["selector"]["matchLabels"] for ds in of_kind(objects, "DaemonSet")]
    assert len({tuple(sorted(s.items())) for s in selectors}) == len(selectors)  # no DaemonSet adopts another's pods
    policy = one(objects, "NetworkPolicy", "allsmi")
    assert all(labels_match(policy["spec"]["podSelector"]["matchLabels"], p) for p in pods)
    assert [p["port"] for p in policy["spec"]["ingress"][0]["ports"]] == ["metrics"]
    monitors = [m for m in of_kind(objects, "ServiceMonitor") if m["metadata"]["name"] == "allsmi"]
    if monitors:
        service = one(objects, "Service", "allsmi")
        # The exporters' monitor selects their Service only (not the billing status's).
        for other in of_kind(objects, "Service"):
            if other is not service:
                assert not labels_match(monitors[0]["spec"]["selector"]["matchLabels"], other["metadata"]["labels"])
        assert service["spec"]["clusterIP"] == "None"
        assert all(labels_match(service["spec"]["selector"], p) for p in pods)
        (svc_port,) = service["spec"]["ports"]
        assert (svc_port["name"], svc_port["port"], svc_port["targetPort"]) == ("metrics", DEFAULT_PORT, "metrics")
        (monitor,) = monitors
        assert labels_match(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        endpoints = monitor["spec"]["endpoints"]
    else:
        monitor = one(objects, "PodMonitor", "allsmi")
        assert all(labels_match(monitor["spec"]["selector"]["matchLabels"], p) for p in pods)
        endpoints = monitor["spec"]["podMetricsEndpoints"]
    assert [(e["port"], e["path"]) for e in endpoints] == [("metrics", "/metrics")]
    service_account = one(objects, "ServiceAccount")
    assert service_account["automountServiceAccountToken"] is False
    assert all(ds["spec"]["template"]["spec"]["serviceAccountName"] == service_account["metadata"]["name"]
               for ds in of_kind(objects, "DaemonSet"))
    assert not of_kind(objects, "Role") and not of_kind(objects, "ClusterRole")  # no API access


def test_image_of_every_daemonset_is_the_package_version() -> None:
    from allsmi import __version__
    for overlay in OVERLAYS:
        for ds in daemonsets(overlay):
            assert container(ds)["image"] == f"allsmi:{__version__}"


def test_the_readme_s_own_overlay_renders_as_described(tmp_path: Path) -> None:
    """README.md's example overlay, next to a clone, with its config.toml."""
    from ..docs_examples import examples
    files = {e.argument.split()[0]: e.body for e in examples(KIT / "README.md") if e.mark == "file"}
    assert set(files) == {"kustomization.yaml", "config.toml"}
    (tmp_path / "allsmi").symlink_to(REPO, target_is_directory=True)
    mine = tmp_path / "my-allsmi"
    mine.mkdir()
    for name, body in files.items():
        (mine / name).write_text(body)
    from .kube import kubectl
    result = subprocess.run([kubectl(), "kustomize", str(mine)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    objects = load_all(result.stdout)
    text = config_toml(objects)
    assert text == files["config.toml"]
    (config_map,) = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("allsmi-config")]
    rendered = of_kind(objects, "DaemonSet")
    assert len(rendered) == len(VENDORS)
    for ds in rendered:
        assert container(ds)["image"] == "registry.example.com/allsmi:0.1.0"
        assert volumes(ds)["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    policy = one(objects, "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "observability"}
    settings = attribution_settings(parse_config(text), environ={})
    assert settings.sources == ("kubernetes", "cgroup")


def test_readmes_point_to_the_kit_and_the_docs_test_reads_it() -> None:
    from ..docs_examples import examples, pages
    fleet = (REPO / "README.md").read_text().split("Running it on a fleet", 1)[1].split("\n## ", 1)[0]
    assert "deploy/kubernetes/README.md" in fleet
    assert "kubernetes/README.md" in (DEPLOY / "README.md").read_text()
    assert KIT / "README.md" in pages()
    run = [e for e in examples(KIT / "README.md") if e.mark == "run"]
    assert run and all(e.in_repo for e in run)
    shown = {c for e in run for c in e.commands()}
    assert {f"kubectl kustomize deploy/kubernetes/overlays/{o}" for o in ("fleet", "nvidia")} <= shown

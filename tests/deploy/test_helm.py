"""deploy/helm/allsmi: the Helm chart generated from the kit, rendered by a real ``helm template``.

With its default values the chart renders the objects of ``overlays/fleet`` (the namespace is
the release's; the config ConfigMap has a fixed name and the pods roll on its checksum instead
of kustomize's hashed name); with values set, each lands where the kit's component or patch
would put it. Every object validates as the kit's do (strict Kubernetes schemas, the Prometheus
Operator's CRD models). ``build.py --check`` (tests/deploy/test_kubernetes.py) keeps the chart
equal to the kit.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import require_tool
from .kube import container, k8s_validate, load_all, of_kind, one, render
from .support import DEPLOY

CHART = DEPLOY / "helm" / "allsmi"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require_tool("helm", "helm, or run .ci/run, which puts it in .venv-helm/")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def template(*args: str) -> list[dict[str, Any]]:
    result = helm("template", "allsmi", str(CHART), "--namespace", "allsmi", *args)
    assert result.returncode == 0, result.stderr
    return load_all(result.stdout)


def _validate(objects: list[dict[str, Any]]) -> None:
    pytest.importorskip("kubernetes_validate")
    from .test_kubernetes import operator_errors, schema_versions
    newest = schema_versions()[-1]
    seen = set()
    for obj in objects:
        if obj["kind"] in seen and obj["kind"] in ("DaemonSet", "ConfigMap"):
            continue  # one of each: they differ only in what the kit's tests check
        seen.add(obj["kind"])
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            assert operator_errors(obj) == [], obj["metadata"]["name"]
        else:
            k8s_validate(obj, newest)


def _as_kustomize_names(obj: dict[str, Any], config_name: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "allsmi-config":
        obj["metadata"]["name"] = config_name
    if obj["kind"] == "DaemonSet":
        template = obj["spec"]["template"]
        assert set(template["metadata"].pop("annotations")) == {"checksum/config"}
        spec = template["spec"]
        assert spec.pop("nodeSelector") == {}
        for volume in spec["volumes"]:
            if volume.get("configMap", {}).get("name") == "allsmi-config":
                volume["configMap"]["name"] = config_name
    return obj


def test_lint() -> None:
    result = helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_values_render_the_fleet_overlay() -> None:
    kit = [o for o in render("fleet") if o["kind"] != "Namespace"]
    chart = template()
    _validate(chart)
    config_name = next(o["metadata"]["name"] for o in kit if o["metadata"]["name"].startswith("allsmi-config"))
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, (_as_kustomize_names(o, config_name) for o in chart))) == sorted(map(key, kit))
    mine = {key(o): o for o in (_as_kustomize_names(o, config_name) for o in chart)}
    for obj in kit:
        assert mine[key(obj)] == obj, key(obj)


def test_values_land_where_the_kit_s_options_put_them(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[node]\nresource_group = "ml"\n\n[attribution]\nsources = ["kubernetes"]\n')
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "image": {"repository": "registry.example.com/allsmi", "tag": "0.1.0-rc1"},
        "vendors": {"amd": {"enabled": False}, "gaudi": {"enabled": False}},
        "maxUnavailable": "10%", "priorityClassName": "gpu-monitoring",
        "kubeletPodResourcesPath": "/var/lib/k0s/kubelet/pod-resources",
        "serviceMonitor": {"release": "kube-prometheus-stack", "interval": "30s"},
        "networkPolicy": {"prometheusNamespace": "observability"},
        "nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "512Mi"}},
    }))
    chart = template("-f", str(values), "--set-file", f"config={config}")
    _validate(chart)
    sets = of_kind(chart, "DaemonSet")
    assert sorted(d["metadata"]["name"] for d in sets) == [
        "allsmi-ascend", "allsmi-furiosa", "allsmi-intel", "allsmi-neuron", "allsmi-nvidia", "allsmi-rebellions",
        "allsmi-tenstorrent", "allsmi-tpu"]
    default_checksum = of_kind(template(), "DaemonSet")[0]["spec"]["template"]["metadata"]["annotations"]
    for ds in sets:
        pod = ds["spec"]["template"]["spec"]
        c = container(ds)
        assert c["image"] == "registry.example.com/allsmi:0.1.0-rc1"
        assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
        assert pod["priorityClassName"] == "gpu-monitoring"
        assert pod["nodeSelector"] == {"pool": "gpu"} and pod["tolerations"][0]["key"] == "gpu"
        assert c["resources"] == {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "512Mi"}}
        (volume,) = [v for v in pod["volumes"] if v["name"] == "pod-resources"]
        assert volume["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"
        # a changed config rolls the pods
        assert ds["spec"]["template"]["metadata"]["annotations"] != default_checksum
    assert one(chart, "ConfigMap", "allsmi-config")["data"]["config.toml"] == config.read_text()
    for obj in chart:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert one(chart, "ServiceMonitor", "allsmi")["spec"]["endpoints"][0]["interval"] == "30s"
    policy = one(chart, "NetworkPolicy", "allsmi")
    assert policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "observability"}
    assert all("release" not in o["metadata"].get("labels", {}) for o in template())


def test_switches_leave_objects_out() -> None:
    chart = template("--set", "serviceMonitor.enabled=false,prometheusRule.enabled=false,"
                     "dashboards.enabled=false,networkPolicy.enabled=false")
    assert {o["kind"] for o in chart} == {"ServiceAccount", "ConfigMap", "DaemonSet"}
    assert [o["metadata"]["name"] for o in of_kind(chart, "ConfigMap")] == ["allsmi-config"]


def test_numeric_image_tag_renders_as_written() -> None:
    """``--set image.tag=9`` is an integer to Helm: the image is ``repo:9``, not ``%!s(int64=9)``."""
    for ds in of_kind(template("--set", "image.repository=reg/allsmi", "--set", "image.tag=9"), "DaemonSet"):
        assert container(ds)["image"] == "reg/allsmi:9"


def test_resources_are_taken_whole(tmp_path: Path) -> None:
    """``resources`` is a block, as the peers' charts take it: a CPU limit or another resource set
    in the values is in the pods, not dropped for the three fields the kit sets."""
    wanted = {"requests": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "100Mi"},
              "limits": {"cpu": "1", "memory": "512Mi"}}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"resources": wanted}))
    chart = template("-f", str(values))
    _validate(chart)
    for ds in of_kind(chart, "DaemonSet"):
        assert container(ds)["resources"] == wanted, ds["metadata"]["name"]


@pytest.mark.parametrize("interval", ["5s", "2s", "1m"])
def test_a_scrape_interval_of_the_values_is_one_the_operator_accepts(interval: str) -> None:
    """The Prometheus Operator rejects a monitor whose scrapeTimeout is above its interval (the
    whole ServiceMonitor: nothing is scraped); an interval down to the collector's 2 s is allowed."""
    from .operator import timeout_error
    monitor = one(template("--set", f"serviceMonitor.interval={interval}"), "ServiceMonitor", "allsmi")
    (ep,) = monitor["spec"]["endpoints"]
    assert ep["interval"] == interval
    assert timeout_error(ep) is None

"""deploy/kubernetes/: the options of README.md's "Options", each rendered on top of the fleet and
validated (built-in objects against the newest Kubernetes schema, the operator's against its CRD
models): priority class, kubelet paths of MicroK8s and k0s, kube-prometheus-stack's release
label, vmagent as a scraper, a percentage of nodes rolled at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .kube import (KIT, VENDORS, container, daemonsets, k8s_validate, mount_of, of_kind, one, render_with,
                   volumes)

README = KIT / "README.md"


def _validate(objects: list[dict[str, Any]], *kinds: str) -> None:
    """The objects of ``kinds`` the option changes (one per kind: the vendors' DaemonSets differ
    only in what the option does not touch)."""
    pytest.importorskip("kubernetes_validate")
    from .test_kubernetes import operator_errors, schema_versions
    newest = schema_versions()[-1]
    firsts = {}
    for obj in objects:
        if obj["kind"] in kinds:
            firsts.setdefault(obj["kind"], obj) if obj["kind"] == "DaemonSet" else firsts.setdefault(id(obj), obj)
    assert {o["kind"] for o in firsts.values()} == set(kinds)
    for obj in firsts.values():
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            assert operator_errors(obj) == [], obj["metadata"]["name"]
        else:
            k8s_validate(obj, newest)


def test_priority_class_is_system_node_critical_by_default() -> None:
    for ds in daemonsets("fleet"):
        assert ds["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"


def test_priority_class_patch_of_the_readme(tmp_path: Path) -> None:
    patch = {"target": {"kind": "DaemonSet"}, "patch": "- op: replace\n  path: /spec/template/spec/priorityClassName\n"
             "  value: gpu-monitoring\n"}
    assert "path: /spec/template/spec/priorityClassName" in README.read_text()
    objects = render_with(tmp_path, "fleet", patches=[patch])
    _validate(objects, "DaemonSet")
    assert {ds["spec"]["template"]["spec"]["priorityClassName"] for ds in of_kind(objects, "DaemonSet")} == {
        "gpu-monitoring"}


@pytest.mark.parametrize("component,host_path", [
    ("kubelet-microk8s", "/var/snap/microk8s/common/var/lib/kubelet/pod-resources"),
    ("kubelet-k0s", "/var/lib/k0s/kubelet/pod-resources")])
def test_kubelet_paths(tmp_path: Path, component: str, host_path: str) -> None:
    objects = render_with(tmp_path, "fleet", [component])
    _validate(objects, "DaemonSet")
    sets = of_kind(objects, "DaemonSet")
    assert len(sets) == len(VENDORS)
    for ds in sets:
        socket = next(e["value"] for e in container(ds)["env"] if e["name"] == "ALLSMI_KUBELET_SOCKET")
        mount, volume = mount_of(ds, socket)
        assert volume["hostPath"] == {"path": host_path, "type": "Directory"} and mount["readOnly"] is True
        assert len(volumes(ds)) == len(volumes(one(daemonsets("fleet"), "DaemonSet", ds["metadata"]["name"])))
    assert f"components/{component}" in README.read_text()


def test_release_label_for_kube_prometheus_stack(tmp_path: Path) -> None:
    objects = render_with(tmp_path, "fleet-billing", ["kube-prometheus-stack"])
    _validate(objects, "ServiceMonitor", "PrometheusRule")
    operator = [o for o in objects if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {o["kind"] for o in operator} == {"ServiceMonitor", "PrometheusRule"} and len(operator) == 3
    assert all(o["metadata"]["labels"]["release"] == "kube-prometheus-stack" for o in operator)
    assert not [o for o in objects if "release" in o["metadata"].get("labels", {}) and o not in operator]
    assert "components/kube-prometheus-stack" in README.read_text()


#: How vmagent's pods are labelled: by the VictoriaMetrics operator, by the official
#: victoria-metrics-agent Helm chart.
VMAGENT_LABELS = ({"app.kubernetes.io/name": "vmagent"}, {"app.kubernetes.io/name": "victoria-metrics-agent"})


def _admits(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) against labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        op, key = e["operator"], e["key"]
        if op == "In" and labels.get(key) not in e["values"]:
            return False
        if op == "NotIn" and key in labels and labels[key] in e["values"]:
            return False
        if op == "Exists" and key not in labels or op == "DoesNotExist" and key in labels:
            return False
    return True


def test_vmagent_as_a_scraper(tmp_path: Path) -> None:
    objects = render_with(tmp_path, "fleet-billing", ["scrape-from-vmagent"])
    _validate(objects, "NetworkPolicy")
    for name in ("allsmi", "allsmi-billing-status"):  # the exporters and the billing status
        (rule,) = one(objects, "NetworkPolicy", name)["spec"]["ingress"]
        peers = rule["from"]
        assert peers[0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
        for labels in VMAGENT_LABELS:
            assert any(p.get("namespaceSelector") == {} and _admits(p["podSelector"], labels) for p in peers), \
                f"{name}: vmagent labelled {labels} is not admitted"
        assert not any(_admits(p["podSelector"], {"app.kubernetes.io/name": "grafana"}) for p in peers)
        assert [p["port"] for p in rule["ports"]] == ["metrics"]
    assert "components/scrape-from-vmagent" in README.read_text()


def test_large_fleet_rolls_a_percentage(tmp_path: Path) -> None:
    objects = render_with(tmp_path, "fleet", ["large-fleet"])
    _validate(objects, "DaemonSet")
    assert {ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] for ds in of_kind(objects, "DaemonSet")} == {
        "10%"}
    assert all(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1 for ds in daemonsets("fleet"))
    assert "components/large-fleet" in README.read_text()


def _unprivileged(tmp_path: Path) -> tuple[list[str], str]:
    """The NVIDIA exporter as uid 10001: no kubelet socket, the cgroup source only, the ledger
    directory handed over by a CHOWN-only init container. Its init command and config."""

    from allsmi.attribution.settings import attribution_settings
    from allsmi.config import parse_config

    from .kube import env
    objects = render_with(tmp_path, "fleet", ["nvidia-unprivileged"])
    _validate(objects, "DaemonSet")
    for ds in of_kind(objects, "DaemonSet"):
        sc = container(ds)["securityContext"]
        if ds["metadata"]["name"] != "allsmi-nvidia":
            assert sc["runAsUser"] == 0  # the others keep their device access
            continue
        assert (sc["runAsUser"], sc["runAsGroup"], sc["runAsNonRoot"]) == (10001, 10001, True)
        assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
        assert "pod-resources" not in volumes(ds) and "ALLSMI_KUBELET_SOCKET" not in env(ds)
        assert ds["spec"]["template"]["spec"]["hostPID"] is True  # the cgroup source reads host PIDs
        (init,) = ds["spec"]["template"]["spec"]["initContainers"]
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
        mount, volume = mount_of(ds, env(ds)["ALLSMI_SERVE_LEDGER"])
        assert init["volumeMounts"] == [{"name": mount["name"], "mountPath": mount["mountPath"]}]
        # recursive: a ledger the root exporter left (0600 root's) is handed over too
        assert init["command"] == ["chown", "-R", "10001:10001", mount["mountPath"]]
        assert ds["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001
        config_map = one(objects, "ConfigMap", volumes(ds)["config"]["configMap"]["name"])
        text = config_map["data"]["config.toml"]
        assert attribution_settings(parse_config(text), environ={}).sources == ("cgroup",)
    assert "components/nvidia-unprivileged" in README.read_text()
    return init["command"], text


def test_nvidia_unprivileged_renders(tmp_path: Path) -> None:
    _unprivileged(tmp_path)


def test_nvidia_unprivileged_serves_as_uid_10001(tmp_path: Path) -> None:
    """Run so here (the tests must be root to switch to uid 10001)."""
    import os
    command, text = _unprivileged(tmp_path)
    if os.geteuid() != 0:
        pytest.skip("switching to uid 10001 needs root")
    import shutil
    import tempfile
    run_dir = Path(tempfile.mkdtemp(prefix="allsmi-unprivileged-"))  # pytest's own is root's only
    try:
        _run_as_10001(run_dir, command, text)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _run_as_10001(run_dir: Path, init_command: list[str], text: str) -> None:
    import os
    import subprocess

    from ..exporter.server import run_serve
    run_dir.chmod(0o755)
    state = run_dir / "state"
    state.mkdir(mode=0o755)
    # What a root exporter left on the node: root's files, 0600.
    for name in ("ledger.db", "ledger.db.lock"):
        (state / name).touch(mode=0o600)
    subprocess.run(init_command[:-1] + [str(state)], check=True, timeout=10)  # the init container
    assert {f.stat().st_uid for f in state.iterdir()} == {10001}
    (run_dir / "config.toml").write_text(text)
    (run_dir / "config.toml").chmod(0o644)

    def drop() -> None:
        os.setgroups([])
        os.setgid(10001)
        os.setuid(10001)
    import sys
    try:
        subprocess.run([sys.executable, "-c", "import allsmi"], preexec_fn=drop, check=True, timeout=60,
                       capture_output=True)
    except (PermissionError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"this Python cannot be run by uid 10001 here (its directory is root's): {exc}")
    server = run_serve(["--simulate", "mixed"], tmp=run_dir, preexec_fn=drop, env={
        "ALLSMI_CONFIG": str(run_dir / "config.toml"), "ALLSMI_SERVE_LEDGER": str(state / "ledger.db"),
        "HOME": str(run_dir)})
    try:
        server.wait_ready(timeout=60)  # ready: a fresh exposition and the ledger written
    finally:
        assert server.stop() == 0, server.output()
    assert (state / "ledger.db").stat().st_uid == 10001


# --- the order of components ----------------------------------------------------------------
#: kustomize applies components in order, and a patch reaches only the objects that exist
#: then (one that finds none is skipped silently). Each pair: a component that patches, one
#: that adds an object it patches, and whether the patch reached that object.
ORDERED: dict[tuple[str, str], Any] = {
    ("kube-prometheus-stack", "billing-export"): lambda objects: one(
        objects, "ServiceMonitor", "allsmi-billing-status")["metadata"]["labels"].get("release") == "kube-prometheus-stack",
    ("kube-prometheus-stack", "podmonitor"): lambda objects: one(
        objects, "PodMonitor", "allsmi")["metadata"]["labels"].get("release") == "kube-prometheus-stack",
    ("tls", "podmonitor"): lambda objects: (lambda ep: ep.get("scheme") == "https" and "tlsConfig" in ep)(
        one(objects, "PodMonitor", "allsmi")["spec"]["podMetricsEndpoints"][0]),
    ("basic-auth", "podmonitor"): lambda objects: "basicAuth" in one(
        objects, "PodMonitor", "allsmi")["spec"]["podMetricsEndpoints"][0],
    ("scrape-from-vmagent", "billing-export"): lambda objects: len(one(
        objects, "NetworkPolicy", "allsmi-billing-status")["spec"]["ingress"][0]["from"]) == 2,
}


def order_errors(components: list[str]) -> list[str]:
    """The pairs of ``components`` (names or paths) listed in an order that drops a patch."""
    names = [c.rstrip("/").rsplit("/", 1)[-1] for c in components]
    return [f"{patcher} is listed before {adder}" for (patcher, adder) in ORDERED
            if patcher in names and adder in names and names.index(patcher) < names.index(adder)]


@pytest.mark.parametrize("pair", list(ORDERED), ids=["+".join(p) for p in ORDERED])
def test_component_order_is_the_documented_one(tmp_path: Path, pair: tuple[str, str]) -> None:
    """In the documented order (the adder first) the patch reaches the added object; in the
    reverse order kustomize drops it without an error, which order_errors catches."""
    patcher, adder = pair
    reached = ORDERED[pair]
    (tmp_path / "right").mkdir()
    (tmp_path / "wrong").mkdir()
    assert order_errors([adder, patcher]) == []
    assert reached(render_with(tmp_path / "right", "fleet", [adder, patcher])), f"{adder}, {patcher}"
    assert order_errors([patcher, adder]) != []
    assert not reached(render_with(tmp_path / "wrong", "fleet", [patcher, adder])), \
        f"[{patcher}, {adder}] now works too: the order rule (README.md, ORDERED) can be relaxed"
    for name in pair:
        header = (KIT / "components" / name / "kustomization.yaml").read_text()
        assert "# Order: list it" in header and (adder if name == patcher else patcher) in header, name
    options = README.read_text().split("### Options", 1)[1].split("\n### ", 1)[0]
    assert "Order matters" in options and f"components/{patcher}" in options and f"components/{adder}" in options


def test_kit_overlays_list_components_in_order() -> None:
    import yaml
    for path in sorted((KIT / "overlays").glob("*/kustomization.yaml")):
        components = yaml.safe_load(path.read_text()).get("components", [])
        assert order_errors(components) == [], path


@pytest.mark.parametrize("overlay", ["fleet", "fleet-podmonitor"])
def test_a_shorter_scrape_interval_is_one_the_operator_accepts(tmp_path: Path, overlay: str) -> None:
    """The monitors' interval patched down to 5 s (at least the collector's 2 s, as the monitor's
    comment says): the Prometheus Operator does not reject the monitor for its scrapeTimeout."""
    from .operator import timeout_error
    kind, field = ("ServiceMonitor", "endpoints") if overlay == "fleet" else ("PodMonitor", "podMetricsEndpoints")
    objects = render_with(tmp_path, overlay, patches=[{
        "target": {"kind": kind, "name": "allsmi"},
        "patch": f"- op: replace\n  path: /spec/{field}/0/interval\n  value: 5s\n"}])
    monitor = one(objects, kind, "allsmi")
    assert monitor["spec"][field][0]["interval"] == "5s"
    assert timeout_error(monitor["spec"][field][0]) is None
    _validate(objects, kind)

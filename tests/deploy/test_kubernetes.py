"""deploy/kubernetes/: every overlay renders, validates, and asks for what allsmi reads.

Offline: ``kubectl kustomize`` renders without a cluster; built-in objects are validated
against the Kubernetes OpenAPI schemas shipped by ``kubernetes-validate`` (strict: unknown
fields fail), the Prometheus Operator objects against the models that
``cloudcoil.models.prometheus_operator`` generates from the operator's CRD schemas. The
contract tests derive what the DaemonSets must say from allsmi's own code.
"""

from __future__ import annotations

import copy
import fnmatch
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from allsmi.attribution.settings import DEFAULT_KUBELET_SOCKET, DEFAULT_RESOURCE_RULES, attribution_settings
from allsmi.cli.serve import DEFAULT_PORT, ENV as SERVE_ENV, parse_listen
from allsmi.config import parse_config

from .kube import KIT, OVERLAYS, VENDORS, container, env, labels_match, mount_of, of_kind, one, render, volumes
from .support import DEPLOY, REPO

#: Kubernetes versions the kit is validated against: pod-resources v1 is GA since 1.28, and
#: every later minor version that kubernetes-validate ships a schema for.
MIN_VERSION = (1, 28)
#: Vendors whose device nodes only a privileged container can open (no device request).
PRIVILEGED_VENDORS = {"amd", "gaudi", "furiosa", "rebellions", "tenstorrent"}
#: Variables that are not allsmi's, each with who reads it.
FOREIGN_ENV = {
    "HOME": "vendor tools (tt-smi writes its files there)",
    "ROCM_PATH": "amdsmi, for libamd_smi.so (allsmi.backends.amd.loader reads it too)",
    "NVIDIA_VISIBLE_DEVICES": "the NVIDIA container runtime",
    "NVIDIA_DRIVER_CAPABILITIES": "the NVIDIA container runtime",
}


def _daemonsets(overlay: str) -> list[dict[str, Any]]:
    return of_kind(render(overlay), "DaemonSet")


def _vendor(daemonset: dict[str, Any]) -> str:
    return daemonset["spec"]["template"]["metadata"]["labels"]["allsmi/vendor"]


def _config_toml(objects: list[dict[str, Any]]) -> str:
    (config_map,) = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("allsmi-config")]
    return config_map["data"]["config.toml"]


# --- rendering and schemas -----------------------------------------------------------------


def test_the_overlays_are_the_documented_ones() -> None:
    assert set(OVERLAYS) == {"fleet", "fleet-no-host-pid", "fleet-podmonitor", *VENDORS}
    assert set(VENDORS) == {"nvidia", "amd", "gaudi", "furiosa", "rebellions", "tenstorrent"}
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
    vendors = {_vendor(d) for d in of_kind(objects, "DaemonSet")}
    assert vendors == ({overlay} if overlay in VENDORS else set(VENDORS))


def _schema_versions() -> list[str]:
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
    versions = _schema_versions()
    assert len(versions) >= 6
    for obj in render(overlay):
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        for version in versions:
            try:
                kv.validate(obj, version, strict=True)
            except kv.ValidationError as exc:
                pytest.fail(f"{overlay}: {obj['kind']} {obj['metadata']['name']} is invalid in "
                            f"Kubernetes {version}: {exc.message} at {list(exc.path)}")


def test_schema_validation_catches_a_misspelt_field() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    daemonset = copy.deepcopy(_daemonsets("nvidia")[0])
    container(daemonset)["livenesProbe"] = container(daemonset).pop("livenessProbe")
    with pytest.raises(kv.ValidationError):
        kv.validate(daemonset, _schema_versions()[-1], strict=True)


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


def _operator_errors(obj: dict[str, Any]) -> list[str]:
    models = pytest.importorskip("cloudcoil.models.prometheus_operator.v1")
    pydantic = pytest.importorskip("pydantic")
    try:
        model = getattr(models, obj["kind"]).model_validate(obj)
    except pydantic.ValidationError as exc:
        return [str(exc)]
    return _covers(obj, model.model_dump(by_alias=True, exclude_none=True, mode="json"))


@pytest.mark.parametrize("overlay", ["fleet", "fleet-podmonitor"])
def test_prometheus_operator_objects_validate_against_the_crd_models(overlay: str) -> None:
    objects = [o for o in render(overlay) if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert {o["kind"] for o in objects} == (
        {"PrometheusRule", "PodMonitor"} if overlay == "fleet-podmonitor" else {"PrometheusRule", "ServiceMonitor"})
    for obj in objects:
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert _operator_errors(obj) == [], f"{obj['kind']}: {_operator_errors(obj)}"


def test_crd_model_check_catches_a_misspelt_field_and_a_wrong_type() -> None:
    monitor = one(render("fleet"), "ServiceMonitor")
    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["scrapeTimout"] = "10s"
    assert any("scrapeTimout" in e for e in _operator_errors(typo))
    wrong = copy.deepcopy(monitor)
    wrong["spec"]["endpoints"][0]["honorLabels"] = {"yes": 1}
    assert _operator_errors(wrong)
    rule = one(render("fleet"), "PrometheusRule")
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["exprr"] = "1"
    assert _operator_errors(broken)


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


# --- the DaemonSet asks for what allsmi reads ------------------------------------------------


def _env_allsmi_reads() -> set[str]:
    """Every ``ALLSMI_*`` variable the code reads: the serve settings, the config, the
    attribution and ledger settings, and each backend's tool override."""
    names = set(SERVE_ENV.values())
    for path in [*(REPO / "allsmi").rglob("*.py"), *(REPO / "backends").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"""(?:environ|env)(?:\.get)?[\[(]\s*["'](ALLSMI_[A-Z0-9_]+)["']""", text))
        # Module constants naming a variable: ENV_VAR (vendor tools), HOSTNAME_ENV (allsmi.host).
        names |= set(re.findall(r"""^[A-Z_]*ENV(?:_VAR)?\s*=\s*["'](ALLSMI_[A-Z0-9_]+)["']""", text, re.M))
    return names


def test_allsmi_env_reads_are_found() -> None:
    reads = _env_allsmi_reads()
    assert {"ALLSMI_CONFIG", "ALLSMI_KUBELET_SOCKET", "ALLSMI_SERVE_LISTEN", "ALLSMI_SERVE_LEDGER",
            "ALLSMI_HL_SMI", "ALLSMI_TT_SMI", "ALLSMI_HOSTNAME"} <= reads


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_daemonset_environment_is_read_by_allsmi(overlay: str) -> None:
    reads = _env_allsmi_reads()
    for ds in _daemonsets(overlay):
        for name in env(ds):
            if name.startswith("ALLSMI_"):
                assert name in reads, f"{ds['metadata']['name']}: allsmi does not read {name}"
            else:
                assert name in FOREIGN_ENV, f"{ds['metadata']['name']}: who reads {name}?"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_host_is_the_node_for_allsmi_and_for_prometheus(overlay: str) -> None:
    objects = render(overlay)
    for ds in of_kind(objects, "DaemonSet"):
        assert env(ds)["ALLSMI_HOSTNAME"] == "fieldRef:spec.nodeName"
    from allsmi.host import HOSTNAME_ENV
    assert HOSTNAME_ENV == "ALLSMI_HOSTNAME"
    # The rules and dashboards name hosts by `instance`: the node's name, as allsmi's own.
    monitors = of_kind(objects, "ServiceMonitor") + of_kind(objects, "PodMonitor")
    (monitor,) = monitors
    (endpoint,) = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"} in endpoint["relabelings"]
    rules = (DEPLOY / "prometheus" / "allsmi-rules.yml").read_text()
    assert "instance" in rules
    # The exporter pod's own namespace/pod/container never mix with the workload's labels.
    drops = [r["regex"] for r in endpoint["relabelings"] if r.get("action") == "labeldrop"]
    assert drops and all(re.fullmatch(drops[0], label) for label in ("namespace", "pod", "container"))
    assert endpoint["honorLabels"] is True


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_port_and_probes_are_allsmi_serve_s(overlay: str) -> None:
    for ds in _daemonsets(overlay):
        c = container(ds)
        assert c["args"] == ["serve"]
        host, port = parse_listen(env(ds)["ALLSMI_SERVE_LISTEN"])
        assert host == "0.0.0.0" and port == DEFAULT_PORT  # all of the pod's interfaces
        (declared,) = c["ports"]
        assert (declared["name"], declared["containerPort"]) == ("metrics", port)
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
        # The probe paths are the exporter's routes (tests/deploy/test_containerfile.py asks them).
        http = (REPO / "allsmi" / "exporter" / "http.py").read_text()
        assert 'path == "/healthz"' in http and 'path == "/ready"' in http


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubelet_socket_is_mounted_read_only_where_allsmi_reads_it(overlay: str) -> None:
    for ds in _daemonsets(overlay):
        socket = env(ds)["ALLSMI_KUBELET_SOCKET"]
        assert Path(socket) == DEFAULT_KUBELET_SOCKET
        mount, volume = mount_of(ds, socket)
        assert mount.get("readOnly") is True
        # The same path on the node: the kubelet's directory, not the socket file (which the
        # kubelet recreates on restart).
        assert volume["hostPath"] == {"path": str(DEFAULT_KUBELET_SOCKET.parent), "type": "Directory"}
        assert mount["mountPath"] == str(DEFAULT_KUBELET_SOCKET.parent)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_config_map_is_a_valid_config_at_allsmi_config(overlay: str) -> None:
    objects = render(overlay)
    text = _config_toml(objects)
    config = parse_config(text, Path("/etc/allsmi/config.toml"))
    settings = attribution_settings(config, environ={})
    from allsmi.accounting.settings import ledger_settings
    ledger_settings(config, environ={})
    for ds in of_kind(objects, "DaemonSet"):
        path = env(ds)["ALLSMI_CONFIG"]
        mount, volume = mount_of(ds, path)
        assert mount.get("readOnly") is True
        assert volume["configMap"]["name"] == one(objects, "ConfigMap", volume["configMap"]["name"])["metadata"]["name"]
        assert Path(path).relative_to(mount["mountPath"]) == Path("config.toml")
        # Process attribution (the cgroup source) exactly where the host's PIDs are visible.
        host_pid = ds["spec"]["template"]["spec"].get("hostPID", False)
        assert ("cgroup" in settings.sources) == host_pid, ds["metadata"]["name"]
        assert "kubernetes" in settings.sources


def test_no_host_pid_config_differs_only_in_the_sources() -> None:
    base = tomllib.loads(_config_toml(render("fleet")))
    other = tomllib.loads(_config_toml(render("fleet-no-host-pid")))
    assert base["attribution"].pop("sources") == ["kubernetes", "cgroup"]
    assert other["attribution"].pop("sources") == ["kubernetes"]
    assert base == other
    assert all(ds["spec"]["template"]["spec"]["hostPID"] is False for ds in _daemonsets("fleet-no-host-pid"))
    assert all(ds["spec"]["template"]["spec"]["hostPID"] is True for ds in _daemonsets("fleet"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ledger_is_on_the_node_one_per_vendor(overlay: str) -> None:
    seen = set()
    for ds in _daemonsets(overlay):
        ledger = env(ds)["ALLSMI_SERVE_LEDGER"]
        mount, volume = mount_of(ds, ledger)
        assert not mount.get("readOnly")
        assert volume["hostPath"]["type"] == "DirectoryOrCreate"
        assert volume["hostPath"]["path"] == f"/var/lib/allsmi/{_vendor(ds)}"
        seen.add(volume["hostPath"]["path"])
        # The last interval is written on SIGTERM: collection ends within the backend timeout.
        config = parse_config(_config_toml(render(overlay)))
        grace = ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= 3 * config.backend_timeout_seconds
    assert len(seen) == len(_daemonsets(overlay))


# --- least privilege --------------------------------------------------------------------------


def _accelerator_resource(name: str) -> bool:
    return any(rule.matches(name) for rule in DEFAULT_RESOURCE_RULES) or "/" in name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_object_requests_an_accelerator(overlay: str) -> None:
    for ds in _daemonsets(overlay):
        resources = container(ds)["resources"]
        for kind in ("requests", "limits"):
            for name in resources.get(kind, {}):
                assert name in ("cpu", "memory"), f"{ds['metadata']['name']}: {kind} {name}"
                assert not _accelerator_resource(name)
        assert set(resources["requests"]) == {"cpu", "memory"}
        assert "memory" in resources["limits"]
        assert "cpu" not in resources["limits"]  # throttling would delay a collection cycle
    assert _accelerator_resource("nvidia.com/gpu") and _accelerator_resource("habana.ai/gaudi")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_security_is_the_documented_minimum(overlay: str) -> None:
    readme = (KIT / "README.md").read_text(encoding="utf-8")
    for ds in _daemonsets(overlay):
        vendor = _vendor(ds)
        pod = ds["spec"]["template"]["spec"]
        c = container(ds)
        sc = c["securityContext"]
        assert pod["automountServiceAccountToken"] is False
        assert not pod.get("hostNetwork") and not pod.get("hostIPC")
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["runAsUser"] == 0  # the kubelet's pod-resources socket is root's
        if vendor in PRIVILEGED_VENDORS:
            assert sc == {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "privileged": True,
                          "readOnlyRootFilesystem": True}
        else:
            assert sc.get("privileged") is not True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
        assert f"| {vendor} |" in readme.lower().replace("intel gaudi", "gaudi"), \
            f"README.md has no security row for {vendor}"
        for volume in volumes(ds).values():
            if "hostPath" in volume:
                assert volume["hostPath"]["path"] not in ("/", "/dev", "/proc", "/sys", "/var/run",
                                                          "/run"), volume


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "gaudi", "furiosa", "rebellions", "tenstorrent"])
def test_vendor_device_access(vendor: str) -> None:
    (ds,) = _daemonsets(vendor)
    pod = ds["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms and all(t["matchExpressions"][0]["operator"] == "In" for t in terms)
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert any(k.startswith("feature.node.kubernetes.io/pci-") for k in keys)
    variables = env(ds)
    if vendor == "nvidia":
        assert pod["runtimeClassName"] == "nvidia"
        assert variables["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert variables["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    elif vendor == "amd":
        mount, volume = mount_of(ds, variables["ROCM_PATH"] + "/lib/libamd_smi.so")
        assert mount["readOnly"] is True and volume["hostPath"]["path"] == variables["ROCM_PATH"]
    else:
        import importlib
        module = importlib.import_module(f"allsmi.backends.{vendor}")
        tool_var = module.ENV_VAR
        mount, volume = mount_of(ds, variables[tool_var])
        assert mount["readOnly"] is True and volume["hostPath"]["type"] == "File"
        assert mount["mountPath"] == variables[tool_var]


def test_readme_names_every_device_node_each_backend_opens() -> None:
    """The security table's device column covers the nodes each backend looks for."""
    from importlib.metadata import entry_points
    rows = {line.split("|")[1].strip(): line for line in (KIT / "README.md").read_text().splitlines()
            if line.startswith("| ") and line.split("|")[1].strip() in VENDORS}
    assert set(rows) == set(VENDORS)
    for ep in entry_points(group="allsmi.backends"):
        if ep.name not in VENDORS:
            continue
        shown = [s for s in re.findall(r"`(/dev/[^`]+)`", rows[ep.name].split("|")[2])]
        for pattern in ep.load().device_nodes:
            example = pattern.replace("[0-9]*", "0").replace("*", "0")
            assert any(fnmatch.fnmatchcase(example, s) for s in shown), \
                f"README.md's {ep.name} row names no device node like {pattern} (shows {shown})"


# --- the objects fit together ---------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scrape_objects_select_the_exporter_pods(overlay: str) -> None:
    objects = render(overlay)
    pods = [ds["spec"]["template"]["metadata"]["labels"] for ds in of_kind(objects, "DaemonSet")]
    for ds in of_kind(objects, "DaemonSet"):
        assert labels_match(ds["spec"]["selector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"])
    selectors = [ds["spec"]["selector"]["matchLabels"] for ds in of_kind(objects, "DaemonSet")]
    assert len({tuple(sorted(s.items())) for s in selectors}) == len(selectors)  # no DaemonSet adopts another's pods
    policy = one(objects, "NetworkPolicy")
    assert all(labels_match(policy["spec"]["podSelector"]["matchLabels"], p) for p in pods)
    assert [p["port"] for p in policy["spec"]["ingress"][0]["ports"]] == ["metrics"]
    monitors = of_kind(objects, "ServiceMonitor")
    if monitors:
        service = one(objects, "Service")
        assert service["spec"]["clusterIP"] == "None"
        assert all(labels_match(service["spec"]["selector"], p) for p in pods)
        (svc_port,) = service["spec"]["ports"]
        assert (svc_port["name"], svc_port["port"], svc_port["targetPort"]) == ("metrics", DEFAULT_PORT, "metrics")
        (monitor,) = monitors
        assert labels_match(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        endpoints = monitor["spec"]["endpoints"]
    else:
        monitor = one(objects, "PodMonitor")
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
        for ds in _daemonsets(overlay):
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
    objects = [o for o in yaml.safe_load_all(result.stdout) if o]
    text = _config_toml(objects)
    assert text == files["config.toml"]
    (config_map,) = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("allsmi-config")]
    daemonsets = of_kind(objects, "DaemonSet")
    assert len(daemonsets) == len(VENDORS)
    for ds in daemonsets:
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

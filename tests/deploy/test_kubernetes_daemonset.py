"""deploy/kubernetes/: the DaemonSets ask for exactly what allsmi reads, and no more.

Every expectation is derived from allsmi's code: the environment variables it reads, the
kubelet socket path, the serve port and routes, the config's settings, each backend's tool
variable and device nodes. (Rendering and schemas: test_kubernetes.py.)
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import pytest

from allsmi.collection import registry
from allsmi.attribution.settings import DEFAULT_KUBELET_SOCKET, attribution_settings, default_resource_rules
from allsmi.cli.serve import DEFAULT_PORT, ENV as SERVE_ENV, parse_listen
from allsmi.config import parse_config
from allsmi.hostactivity.cgrouptree import AUTO, KIT_ROOT
from allsmi.hostactivity.settings import activity_settings

from .kube import (KIT, OVERLAYS, VENDORS, config_toml, container, daemonsets, env, mount_of, of_kind, one,
                   render, vendor_of, volumes)
from .support import DEPLOY, REPO

#: Vendors whose device nodes only a privileged container can open (no device request).
PRIVILEGED_VENDORS = {"amd", "gaudi", "furiosa", "rebellions", "tenstorrent", "neuron", "ascend"}
#: The capabilities an unprivileged exporter adds to none: Intel's reads another user's DRM
#: fdinfo (ptrace's read check, and the 0500 /proc/PID/fd directory).
ADDED_CAPABILITIES = {"intel": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
#: The exporters on the node's network: the TPU's, to reach libtpu's metrics on the host's
#: loopback (README.md, "Security, per vendor").
HOST_NETWORK_VENDORS = {"tpu"}
#: Variables that are not allsmi's, each with who reads it.
FOREIGN_ENV = {
    "HOME": "vendor tools (tt-smi writes its files there)",
    "ROCM_PATH": "amdsmi, for libamd_smi.so (allsmi.backends.amd.loader reads it too)",
    "NVIDIA_VISIBLE_DEVICES": "the NVIDIA container runtime",
    "NVIDIA_DRIVER_CAPABILITIES": "the NVIDIA container runtime",
    "LD_LIBRARY_PATH": "the dynamic loader, for npu-smi's libraries in the Ascend driver",
}


# --- the DaemonSet asks for what allsmi reads ------------------------------------------------


def _env_allsmi_reads() -> set[str]:
    """Every ``ALLSMI_*`` variable the code reads: the serve settings, the config, the
    attribution and ledger settings, and each backend's tool override."""
    names = set(SERVE_ENV.values())
    for path in [*(REPO / "allsmi").rglob("*.py"), *(REPO / "backends").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"""(?:environ|env)(?:\.get)?[\[(]\s*["'](ALLSMI_[A-Z0-9_]+)["']""", text))
        # Module constants naming a variable: ENV_VAR (vendor tools), HOSTNAME_ENV (allsmi.collection.host),
        # BACKENDS_VAR (allsmi.cli.common).
        names |= set(re.findall(r"""^[A-Z_]*(?:ENV(?:_VAR)?|_VAR)\s*=\s*["'](ALLSMI_[A-Z0-9_]+)["']""", text, re.M))
    # Each backend's declared tool variables (VendorTool overrides: ALLSMI_NEURON_LS, ...).
    for declaration in registry.declarations():
        names |= set(declaration.env_vars)
    return names


def test_allsmi_env_reads_are_found() -> None:
    reads = _env_allsmi_reads()
    assert {"ALLSMI_CONFIG", "ALLSMI_KUBELET_SOCKET", "ALLSMI_SERVE_LISTEN", "ALLSMI_SERVE_LEDGER",
            "ALLSMI_HL_SMI", "ALLSMI_TT_SMI", "ALLSMI_HOSTNAME", "ALLSMI_BACKENDS"} <= reads


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_daemonset_environment_is_read_by_allsmi(overlay: str) -> None:
    reads = _env_allsmi_reads()
    for ds in daemonsets(overlay):
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
    from allsmi.collection.host import HOSTNAME_ENV
    assert HOSTNAME_ENV == "ALLSMI_HOSTNAME"
    # The rules and dashboards name hosts by `instance`: the node's name, as allsmi's own.
    monitors = of_kind(objects, "ServiceMonitor") + of_kind(objects, "PodMonitor")
    (monitor,) = [m for m in monitors if m["metadata"]["name"] == "allsmi"]
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
    for ds in daemonsets(overlay):
        c = container(ds)
        assert c["args"] == ["serve"]
        host, port = parse_listen(env(ds)["ALLSMI_SERVE_LISTEN"])
        assert host == "" and port == DEFAULT_PORT  # all of the pod's interfaces, IPv4 and IPv6
        (declared,) = c["ports"]
        assert (declared["name"], declared["containerPort"]) == ("metrics", port)
        if "ALLSMI_SERVE_WEB_CONFIG" in env(ds):
            # TLS and basic auth: the probes are run against a real exporter in
            # tests/deploy/test_kubernetes_auth.py.
            assert all(c[p].get("tcpSocket") == {"port": "metrics"} or c[p]["httpGet"]["port"] == "metrics"
                       for p in ("livenessProbe", "startupProbe", "readinessProbe"))
            continue
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
        # The probe paths are the exporter's routes (tests/deploy/test_containerfile.py asks them).
        http = (REPO / "allsmi" / "exporter" / "http.py").read_text()
        assert 'path == "/healthz"' in http and 'path == "/ready"' in http


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubelet_socket_is_mounted_read_only_where_allsmi_reads_it(overlay: str) -> None:
    for ds in daemonsets(overlay):
        socket = env(ds)["ALLSMI_KUBELET_SOCKET"]
        assert Path(socket) == DEFAULT_KUBELET_SOCKET
        mount, volume = mount_of(ds, socket)
        assert mount.get("readOnly") is True
        # The same path on the node: the kubelet's directory, not the socket file (which the
        # kubelet recreates on restart).
        assert volume["hostPath"] == {"path": str(DEFAULT_KUBELET_SOCKET.parent), "type": "Directory"}
        assert mount["mountPath"] == str(DEFAULT_KUBELET_SOCKET.parent)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_hosts_cgroup_tree_is_mounted_read_only_where_allsmi_looks(overlay: str) -> None:
    """On cgroup v2 an unprivileged container has a cgroup namespace of its own: the holders'
    CPU throttling is read on the host's tree, which ``[activity] cgroup_root = "auto"`` finds
    at the kit's mount (allsmi/hostactivity/cgrouptree.py)."""
    objects = render(overlay)
    assert activity_settings(parse_config(config_toml(objects))).cgroup_root == AUTO
    for ds in daemonsets(overlay):
        mount, volume = mount_of(ds, KIT_ROOT)
        assert mount["mountPath"] == KIT_ROOT and mount.get("readOnly") is True
        assert volume["hostPath"] == {"path": "/sys/fs/cgroup", "type": "Directory"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_config_map_is_a_valid_config_at_allsmi_config(overlay: str) -> None:
    objects = render(overlay)
    text = config_toml(objects)
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
    base = tomllib.loads(config_toml(render("fleet")))
    other = tomllib.loads(config_toml(render("fleet-no-host-pid")))
    assert base["attribution"].pop("sources") == ["kubernetes", "cgroup"]
    assert other["attribution"].pop("sources") == ["kubernetes"]
    assert base == other
    assert all(ds["spec"]["template"]["spec"]["hostPID"] is False for ds in daemonsets("fleet-no-host-pid"))
    assert all(ds["spec"]["template"]["spec"]["hostPID"] is True for ds in daemonsets("fleet"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ledger_is_on_the_node_one_pervendor_of(overlay: str) -> None:
    seen = set()
    for ds in daemonsets(overlay):
        ledger = env(ds)["ALLSMI_SERVE_LEDGER"]
        mount, volume = mount_of(ds, ledger)
        assert not mount.get("readOnly")
        assert volume["hostPath"]["type"] == "DirectoryOrCreate"
        assert volume["hostPath"]["path"] == f"/var/lib/allsmi/{vendor_of(ds)}"
        seen.add(volume["hostPath"]["path"])
        # The last interval is written on SIGTERM: collection ends within the backend timeout.
        config = parse_config(config_toml(render(overlay)))
        grace = ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= 3 * config.backend_timeout_seconds
    assert len(seen) == len(daemonsets(overlay))


# --- least privilege --------------------------------------------------------------------------


def _accelerator_resource(name: str) -> bool:
    rules = default_resource_rules(registry.declarations())
    return any(rule.matches(name) for rule in rules) or "/" in name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_object_requests_an_accelerator(overlay: str) -> None:
    for ds in daemonsets(overlay):
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
    for ds in daemonsets(overlay):
        vendor = vendor_of(ds)
        pod = ds["spec"]["template"]["spec"]
        c = container(ds)
        sc = c["securityContext"]
        assert pod["automountServiceAccountToken"] is False
        assert bool(pod.get("hostNetwork")) == (vendor in HOST_NETWORK_VENDORS) and not pod.get("hostIPC")
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["runAsUser"] == 0  # the kubelet's pod-resources socket is root's
        if vendor in PRIVILEGED_VENDORS:
            assert sc == {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "privileged": True,
                          "readOnlyRootFilesystem": True}
        else:
            assert sc.get("privileged") is not True
            assert sc["allowPrivilegeEscalation"] is False
            added = ADDED_CAPABILITIES.get(vendor)
            assert sc["capabilities"] == ({"drop": ["ALL"], "add": added} if added else {"drop": ["ALL"]})
        assert f"| {vendor} |" in readme.lower().replace("intel gaudi", "gaudi"), \
            f"README.md has no security row for {vendor}"
        for volume in volumes(ds).values():
            if "hostPath" in volume:
                assert volume["hostPath"]["path"] not in ("/", "/dev", "/proc", "/sys", "/var/run",
                                                          "/run"), volume


#: The tools each vendor's DaemonSet mounts from the node (its declaration's variables; Intel's
#: xpu-smi is optional and needs Level Zero and /dev/dri, so it is not mounted: README.md).
MOUNTED_TOOLS = {"gaudi": 1, "furiosa": 1, "rebellions": 1, "tenstorrent": 1, "neuron": 2, "ascend": 1}


@pytest.mark.parametrize("vendor", VENDORS)
def test_vendor_device_access(vendor: str) -> None:
    (ds,) = daemonsets(vendor)
    pod = ds["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms and all(len(t["matchExpressions"]) == 1 for t in terms)
    assert all(e["operator"] == "In" and e["values"] or e["operator"] == "Exists" and "values" not in e
               for t in terms for e in t["matchExpressions"])
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert any(k.startswith("feature.node.kubernetes.io/pci-") for k in keys)
    variables = env(ds)
    if vendor == "nvidia":
        assert pod["runtimeClassName"] == "nvidia"
        assert variables["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert variables["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
        return
    if vendor == "amd":
        mount, volume = mount_of(ds, variables["ROCM_PATH"] + "/lib/libamd_smi.so")
        assert mount["readOnly"] is True and volume["hostPath"]["path"] == variables["ROCM_PATH"]
        return
    (declaration,) = [d for d in registry.declarations() if d.backend == vendor]
    tools = [variables[v] for v in declaration.env_vars if v in variables]
    assert len(tools) == MOUNTED_TOOLS.get(vendor, 0), (vendor, tools)
    for tool in tools:
        # Mounted read-only from the node: the file itself, or the package's folder holding it
        # (Neuron's tools find their libraries beside them), at the same path.
        mount, volume = mount_of(ds, tool)
        assert mount["readOnly"] is True
        if mount["mountPath"] != tool:
            assert volume["hostPath"]["path"] == mount["mountPath"]
        assert volume["hostPath"]["type"] == ("File" if mount["mountPath"] == tool else "Directory")
    if vendor == "ascend":
        # npu-smi's driver libraries and install record, as the Ascend runtime mounts them
        for path in variables["LD_LIBRARY_PATH"].split(":") + ["/etc/ascend_install.info"]:
            mount, volume = mount_of(ds, path)
            assert mount["readOnly"] is True and "hostPath" in volume
    if vendor == "intel":
        # sysfs and the host's /proc only: no device node, no tool
        assert container(ds)["securityContext"].get("privileged") is not True and pod["hostPID"] is True
    if vendor == "tpu":
        # libtpu's metrics on the node's loopback ([backends.tpu] metrics_address)
        from allsmi.backends.tpu import DEFAULT_ADDRESS
        assert pod["hostNetwork"] is True and DEFAULT_ADDRESS.startswith("localhost:")


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


def test_each_vendor_daemonset_runs_its_own_backend_only() -> None:
    """ALLSMI_BACKENDS is exactly the vendor's backend in every vendor overlay and in the fleet,
    and no two DaemonSets share a backend: a device visible to several pods (an Intel GPU's sysfs
    is, in every container) is read, exported and billed once."""
    assert VENDORS == registry.hardware_names(), "one vendors/NAME per hardware backend, named as it"
    for vendor in VENDORS:
        (ds,) = daemonsets(vendor)
        assert vendor_of(ds) == vendor
        assert env(ds).get("ALLSMI_BACKENDS") == vendor, f"overlays/{vendor}: ALLSMI_BACKENDS"
    for overlay in OVERLAYS:
        by_backend = {}
        for ds in daemonsets(overlay):
            names = env(ds).get("ALLSMI_BACKENDS", "").split(",")
            assert names == [vendor_of(ds)], f"overlays/{overlay}: {ds['metadata']['name']} runs {names}"
            for name in names:
                assert name not in by_backend, \
                    f"overlays/{overlay}: {ds['metadata']['name']} and {by_backend[name]} both run {name}"
                by_backend[name] = ds["metadata"]["name"]

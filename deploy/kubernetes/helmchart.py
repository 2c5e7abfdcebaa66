"""The Helm chart deploy/helm/allsmi, generated from the kustomize kit (used by build.py).

One source of truth: the chart's templates are the objects ``kubectl kustomize
overlays/fleet`` renders, with the values below put in place of their fields. A value takes a
field's place as a placeholder string while the objects are dumped, and the placeholder is then
replaced by its template expression (a whole line for blocks and optional labels).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import yaml

HERE = Path(__file__).resolve().parent
CHART = HERE.parent / "helm" / "allsmi"
OVERLAY = HERE / "overlays" / "fleet"

#: placeholder -> template text; "LINE:" replaces the whole line (same indentation).
_TEMPLATES = {
    "@@IMAGE@@": '{{ printf "%s:%s" .Values.image.repository (toString .Values.image.tag) | quote }}',
    "@@PULL@@": "{{ .Values.image.pullPolicy | quote }}",
    "@@PRIORITY@@": "{{ .Values.priorityClassName | quote }}",
    "@@MAXUNAVAILABLE@@": "{{ .Values.maxUnavailable }}",
    "@@PODRESOURCES@@": "{{ .Values.kubeletPodResourcesPath | quote }}",
    "@@INTERVAL@@": "{{ .Values.serviceMonitor.interval | quote }}",
    "@@CONFIG@@": "{{ .Values.config | quote }}",
    "@@CHECKSUM@@": "{{ .Values.config | sha256sum | quote }}",
    "@@PROMNS@@": "{{ .Values.networkPolicy.prometheusNamespace | quote }}",
    "@@NAMESPACE@@": "{{ .Release.Namespace | quote }}",
    "@@TOLERATIONS@@": "LINE:tolerations: {{- toYaml .Values.tolerations | nindent %(indent)d }}",
    "@@NODESELECTOR@@": "LINE:nodeSelector: {{- toYaml .Values.nodeSelector | nindent %(indent)d }}",
    # the whole block, as the peers' charts take it (limits.cpu, extended resources...)
    "@@RESOURCES@@": "LINE:resources: {{- toYaml .Values.resources | nindent %(indent)d }}",
    "@@RELEASE@@": "LINE:{{- with .Values.serviceMonitor.release }}\n%(pad)srelease: {{ . | quote }}\n%(pad)s{{- end }}",
}


def _render_kit() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        raise SystemExit("build.py: the Helm chart is rendered from the kit with `kubectl kustomize`: "
                         "no kubectl on PATH")
    result = subprocess.run([kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise SystemExit(f"build.py: kubectl kustomize {OVERLAY}: {result.stderr}")
    return [o for o in yaml.safe_load_all(result.stdout) if o]


def _values(objects: list[dict[str, Any]]) -> dict[str, Any]:
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    image, _, tag = container["image"].rpartition(":")
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("allsmi-config"))
    volume = next(v for v in pod["volumes"] if v["name"] == "pod-resources")
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
    return {
        "image": {"repository": image, "tag": tag, "pullPolicy": container["imagePullPolicy"]},
        "vendors": {_vendor(d): {"enabled": True} for d in objects if d["kind"] == "DaemonSet"},
        "priorityClassName": pod["priorityClassName"],
        "maxUnavailable": ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        "kubeletPodResourcesPath": volume["hostPath"]["path"],
        "resources": container["resources"],
        "tolerations": pod["tolerations"],
        "nodeSelector": {},
        "config": config["data"]["config.toml"],
        "serviceMonitor": {"enabled": True, "interval": monitor["spec"]["endpoints"][0]["interval"], "release": ""},
        "prometheusRule": {"enabled": True},
        "dashboards": {"enabled": True},
        "networkPolicy": {"enabled": True, "prometheusNamespace": policy["spec"]["ingress"][0]["from"][0][
            "namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]},
    }


def _vendor(daemonset: dict[str, Any]) -> str:
    return daemonset["spec"]["template"]["metadata"]["labels"]["allsmi/vendor"]


def _template(obj: dict[str, Any], config_name: str) -> tuple[dict[str, Any], str | None]:
    """The object with placeholders, and the value that switches it on (or None: always)."""
    obj = copy.deepcopy(obj)
    kind, name = obj["kind"], obj["metadata"]["name"]
    if "namespace" in obj["metadata"]:
        obj["metadata"]["namespace"] = "@@NAMESPACE@@"
    if kind == "DaemonSet":
        vendor = _vendor(obj)
        pod = obj["spec"]["template"]["spec"]
        c = pod["containers"][0]
        c["image"], c["imagePullPolicy"] = "@@IMAGE@@", "@@PULL@@"
        c["resources"] = "@@RESOURCES@@"
        pod["priorityClassName"] = "@@PRIORITY@@"
        pod["tolerations"] = "@@TOLERATIONS@@"
        pod["nodeSelector"] = "@@NODESELECTOR@@"
        obj["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] = "@@MAXUNAVAILABLE@@"
        for volume in pod["volumes"]:
            if volume["name"] == "pod-resources":
                volume["hostPath"]["path"] = "@@PODRESOURCES@@"
            if volume.get("configMap", {}).get("name") == config_name:
                volume["configMap"]["name"] = "allsmi-config"
        # kustomize rolls the pods by the ConfigMap's hashed name; the chart by its checksum
        obj["spec"]["template"]["metadata"].setdefault("annotations", {})["checksum/config"] = "@@CHECKSUM@@"
        return obj, f"vendors.{vendor}.enabled"
    if kind == "ConfigMap" and name == config_name:
        obj["metadata"]["name"] = "allsmi-config"
        obj["data"]["config.toml"] = "@@CONFIG@@"
        return obj, None
    if kind == "ConfigMap":
        return obj, "dashboards.enabled"
    if kind == "ServiceMonitor":
        obj["metadata"]["labels"]["@@RELEASE@@"] = ""
        obj["spec"]["endpoints"][0]["interval"] = "@@INTERVAL@@"
        return obj, "serviceMonitor.enabled"
    if kind == "Service":
        return obj, "serviceMonitor.enabled"
    if kind == "PrometheusRule":
        obj["metadata"]["labels"]["@@RELEASE@@"] = ""
        return obj, "prometheusRule.enabled"
    if kind == "NetworkPolicy":
        peer = obj["spec"]["ingress"][0]["from"][0]
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] = "@@PROMNS@@"
        return obj, "networkPolicy.enabled"
    return obj, None


def _escape(line: str) -> str:
    """The object's own braces (Prometheus' alert templates, Grafana's legends) kept from Helm."""
    return re.sub(r"\{\{|\}\}", lambda m: '{{ "{{" }}' if m.group(0) == "{{" else '{{ "}}" }}', line)


def _fill(text: str) -> str:
    out = []
    for line in map(_escape, text.splitlines()):
        hit = re.search(r"'?(@@[A-Z]+@@)'?", line)
        if not hit:
            out.append(line)
            continue
        template = _TEMPLATES[hit.group(1)]
        if template.startswith("LINE:"):
            pad = re.match(r"\s*(- )?", line).group(0).replace("-", " ")
            out.append(pad + template[5:] % {"indent": len(pad) + 2, "pad": pad})
        else:
            out.append(line[:hit.start()] + template + line[hit.end():])
    return "\n".join(out) + "\n"


def chart(dump: Callable[[list[dict[str, Any]]], str], version: str) -> dict[Path, str]:
    """The chart's files: Chart.yaml, values.yaml, one template per object of overlays/fleet."""
    objects = _render_kit()
    config_name = next(o["metadata"]["name"] for o in objects
                       if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("allsmi-config"))
    header = ("# Generated by deploy/kubernetes/build.py from the kustomize kit (overlays/fleet): do not\n"
              "# edit; run `python deploy/kubernetes/build.py` after changing the kit.\n")
    files = {
        CHART / "Chart.yaml": header + dump([{
            "apiVersion": "v2", "name": "allsmi", "version": version, "appVersion": version, "type": "application",
            "description": "allsmi: one Prometheus exporter per accelerator vendor (NVIDIA, AMD, Intel Gaudi, "
                           "Furiosa, Rebellions, Tenstorrent, Intel GPU, Google TPU, AWS Neuron, Huawei "
                           "Ascend), its rules, dashboards and billing roll-ups",
            "kubeVersion": ">=1.28.0-0"}]),
        CHART / "values.yaml": header + dump([_values(objects)]),
    }
    for obj in objects:
        if obj["kind"] == "Namespace":
            continue  # the release's namespace (README: create it with its Pod Security label)
        templated, switch = _template(obj, config_name)
        body = _fill(dump([templated]))
        if switch:
            body = f"{{{{- if .Values.{switch} }}}}\n{body}{{{{- end }}}}\n"
        name = f"{templated['kind'].lower()}-{templated['metadata']['name']}.yaml"
        files[CHART / "templates" / name] = header + body
    return files

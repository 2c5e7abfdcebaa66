"""The ``[attribution]`` configuration table, validated.

Precedence for every setting: environment > file > default (the commands
that wire attribution in may add flags in front). Every problem raises
:class:`allsmi.config.ConfigError` naming the file, the line and the key;
the CLI turns it into exit code 2. See ``docs/attribution.md``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import field
from pathlib import Path
from typing import Any, Mapping, Sequence

from allsmi.config import Config
from allsmi.schema.declarations import ID_KINDS, VendorDeclaration
from allsmi.schema.numbers import setting_number
from allsmi.schema.records import Record, record

DEFAULT_KUBELET_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_PROC_ROOT = Path("/proc")
DEFAULT_TIMEOUT_SECONDS = 2.0
TIMEOUT_RANGE = (0.05, 60.0)
KEYS = ("sources", "kubelet_socket", "hpc_job_dir", "proc_root", "timeout_seconds",
        "resource_names")
#: Sources a configuration can switch on or off (``simulated`` comes with ``--simulate``).
CONFIGURABLE_SOURCES = ("kubernetes", "hpc-job", "cgroup")
_RESOURCE = r"^[A-Za-z0-9*?\[\]][A-Za-z0-9.\-_*?\[\]]*(/[A-Za-z0-9.\-_*?\[\]]+)?\Z"


@record
class ResourceRule(Record):
    """Which devices a Kubernetes extended resource names, and how its ids are written."""

    pattern: str
    """The resource name or a glob (``nvidia.com/mig-*``), matched case-insensitively."""
    vendor: str
    id_kind: str = "auto"

    def matches(self, resource_name: str) -> bool:
        return fnmatch.fnmatchcase(resource_name.lower(), self.pattern.lower())


def default_resource_rules(declarations: Sequence[VendorDeclaration]) -> tuple[ResourceRule, ...]:
    """The resource names each backend declares for its vendor's device plugin, in order."""
    return tuple(ResourceRule(resource.pattern, decl.backend, resource.id_kind)
                 for decl in declarations for resource in decl.kubernetes_resources)


def node_names(declarations: Sequence[VendorDeclaration]) -> dict[str, tuple[str, ...]]:
    """Backend -> the device-node name prefixes it declares (``hl`` for ``hl3``)."""
    return {decl.backend: tuple(decl.node_names) for decl in declarations}


@record
class AttributionSettings(Record):
    """The validated ``[attribution]`` table with the environment applied."""

    sources: tuple[str, ...] = CONFIGURABLE_SOURCES
    kubelet_socket: Path = DEFAULT_KUBELET_SOCKET
    kubelet_socket_explicit: bool = False
    """Set by ``ALLSMI_KUBELET_SOCKET`` or the file (not the default path)."""
    hpc_job_dir: Path | None = None
    proc_root: Path = DEFAULT_PROC_ROOT
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    resource_rules: tuple[ResourceRule, ...] = ()
    """The configured rules first, then the backends' declared ones; the first match wins."""
    node_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Backend -> its device-node name prefixes (:attr:`VendorDeclaration.node_names`)."""

    @classmethod
    def declared(cls, declarations: Sequence[VendorDeclaration], **values: Any) -> AttributionSettings:
        """Settings whose resource rules and node names are the backends' declarations
        (configured ``resource_rules`` in ``values`` go first)."""
        rules = tuple(values.pop("resource_rules", ())) + default_resource_rules(declarations)
        return cls(resource_rules=rules, node_names=node_names(declarations), **values)

    def rule_for(self, resource_name: str) -> ResourceRule | None:
        """The rule for ``resource_name``, or ``None`` (not an accelerator resource)."""
        for rule in self.resource_rules:
            if rule.matches(resource_name):
                return rule
        return None


def _path(config: Config, value: Any, *key: str) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise config.error(f"must be a non-empty path string, got {value!r}", *key)
    path = Path(os.path.expanduser(value.strip()))
    if not path.is_absolute() and config.path is not None:
        path = config.path.parent / path  # relative to the config file, as [ledger] path is
    return path


def _rules(config: Config, table: Any,
           declarations: Sequence[VendorDeclaration]) -> tuple[ResourceRule, ...]:
    if not isinstance(table, dict):
        raise config.error("must be a table of resource name = vendor (or { vendor, id })",
                           "attribution", "resource_names")
    rules = []
    for name, raw in table.items():
        # Split like the config's key locator splits a quoted dotted key, so that the error
        # points at the key's own line (the message shows the same dotted name).
        key = ("attribution", "resource_names", *name.split("."))
        if not re.match(_RESOURCE, name):
            raise config.error("not a Kubernetes resource name (such as example.com/gpu, globs "
                               "allowed)", *key)
        id_kind = "auto"
        if isinstance(raw, dict):
            for sub in raw:
                if sub not in ("vendor", "id"):
                    raise config.error("unknown key (allowed: vendor, id)", *key, sub)
            if "vendor" not in raw:
                raise config.error("missing key 'vendor'", *key)
            vendor = raw["vendor"]
            id_kind = raw.get("id", "auto")
            if id_kind not in ID_KINDS:
                raise config.error(f"must be one of {', '.join(ID_KINDS)}, got {id_kind!r}",
                                   *key, "id")
        else:
            vendor = raw
        names = tuple(dict.fromkeys(n for d in declarations for n in (d.backend, d.vendor)))
        if vendor not in names:
            raise config.error(f"vendor must be an installed backend or vendor "
                               f"({', '.join(names) or 'none installed'}), got {vendor!r}", *key)
        rules.append(ResourceRule(name, vendor, id_kind))
    return tuple(rules)


def attribution_settings(config: Config, environ: Mapping[str, str] | None = None,
                         declarations: Sequence[VendorDeclaration] = ()) -> AttributionSettings:
    """Validate ``[attribution]`` and apply ``ALLSMI_KUBELET_SOCKET`` and ``ALLSMI_HPC_JOB_DIR``.

    ``declarations``: what the installed backends declare (the CLI passes
    :func:`allsmi.collection.registry.declarations`): their device plugins' resource names are the
    default rules, their backend and vendor names what a configured rule may name, their
    device-node names what an id may be written as."""
    env = os.environ if environ is None else environ
    table = config.section("attribution")
    for key in table:
        if key not in KEYS:
            raise config.error(f"unknown key (allowed: {', '.join(KEYS)})", "attribution", key)
    values: dict[str, Any] = {}
    if "sources" in table:
        sources = table["sources"]
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise config.error("must be a list of source names", "attribution", "sources")
        for name in sources:
            if name not in CONFIGURABLE_SOURCES:
                raise config.error(f"unknown source {name!r} (allowed: "
                                   f"{', '.join(CONFIGURABLE_SOURCES)})", "attribution", "sources")
        values["sources"] = tuple(dict.fromkeys(sources))
    if env.get("ALLSMI_KUBELET_SOCKET", "").strip():
        values["kubelet_socket"] = Path(env["ALLSMI_KUBELET_SOCKET"].strip())
        values["kubelet_socket_explicit"] = True
    elif "kubelet_socket" in table:
        values["kubelet_socket"] = _path(config, table["kubelet_socket"], "attribution", "kubelet_socket")
        values["kubelet_socket_explicit"] = True
    if env.get("ALLSMI_HPC_JOB_DIR", "").strip():
        values["hpc_job_dir"] = Path(env["ALLSMI_HPC_JOB_DIR"].strip())
    elif "hpc_job_dir" in table:
        values["hpc_job_dir"] = _path(config, table["hpc_job_dir"], "attribution", "hpc_job_dir")
    if "proc_root" in table:
        values["proc_root"] = _path(config, table["proc_root"], "attribution", "proc_root")
    if "timeout_seconds" in table:
        value = table["timeout_seconds"]
        if setting_number(value) is None or not TIMEOUT_RANGE[0] <= value <= TIMEOUT_RANGE[1]:
            raise config.error(f"must be a number from {TIMEOUT_RANGE[0]:g} to {TIMEOUT_RANGE[1]:g}, "
                               f"got {value!r}", "attribution", "timeout_seconds")
        values["timeout_seconds"] = float(value)
    if "resource_names" in table:
        values["resource_rules"] = _rules(config, table["resource_names"], declarations)
    return AttributionSettings.declared(declarations, **values)

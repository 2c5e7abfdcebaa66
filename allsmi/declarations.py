"""What a backend declares about its vendor, for the parts of allsmi that never import a backend.

Attribution matches Kubernetes device-plugin ids and job-mapping file names to devices,
``allsmi doctor`` lists device nodes, the docs tables name every vendor, the layering tests
clear every tool override: each reads these declarations instead of a list of its own. A
backend class sets them as class attributes (:class:`allsmi.backend_api.Backend`) and
:meth:`~allsmi.backend_api.Backend.declaration` bundles them into a :class:`VendorDeclaration`;
the CLI collects the installed backends' declarations (:func:`allsmi.registry.declarations`)
and hands them to attribution, which sits beside the backends and imports none of them.

This module is plain data at the bottom of the layers: it imports nothing from allsmi but
:mod:`allsmi.records` (its frozen records).
"""

from __future__ import annotations

from allsmi.records import Record, record


#: How a device plugin writes the ids of the devices it allocates.
#: ``core`` is a global sub-device number (a NeuronCore, or any core or partition a plugin numbers
#: across the node): it names the device whose :data:`CORE_RANGE_DETAILS` range holds it.
ID_KINDS = ("auto", "uuid", "bus_id", "index", "serial", "core")
#: The ``DeviceSample.details`` keys a backend sets on each whole device whose sub-devices a plugin
#: hands out by a global number: the first global number on the device and how many it has.
CORE_RANGE_DETAILS = ("core_first", "core_count")


@record
class KubernetesResource(Record):
    """One extended resource (or a glob of them) a vendor's Kubernetes device plugin advertises."""

    pattern: str
    """The resource name or a glob (``nvidia.com/mig-*``), matched case-insensitively."""
    id_kind: str = "auto"
    """How the plugin writes device ids (one of :data:`ID_KINDS`; ``auto`` tries each form)."""
    plugin: str = ""
    """Which plugin advertises it and how its ids look (for the docs table)."""

    def __post_init__(self) -> None:
        if self.id_kind not in ID_KINDS:
            raise ValueError(f"id_kind must be one of {', '.join(ID_KINDS)}, got {self.id_kind!r}")


@record
class VendorDeclaration(Record):
    """Everything allsmi outside a backend needs to know about it."""

    backend: str
    """The registry name (``gaudi``)."""
    vendor: str
    """The schema vendor (``intel``)."""
    kind: str
    """``gpu`` or ``npu``."""
    product: str = ""
    """The devices in words, for docs (``Intel Gaudi``)."""
    interface: str = ""
    """What the backend reads (``hl-smi``, ``NVML``)."""
    version_command: tuple[str, ...] = ()
    """The command that prints the vendor interface's version (``("hl-smi", "--version")``)."""
    kubernetes_resources: tuple[KubernetesResource, ...] = ()
    """The resources of the vendor's device plugin; attribution's default rules."""
    node_names: tuple[str, ...] = ()
    """Prefixes of device-node names that carry a device index (``hl`` for ``hl3``,
    ``accel`` for ``/dev/accel/accel3``; ``""`` for a bare number under ``/dev/<dir>/``)."""
    device_nodes: tuple[str, ...] = ()
    """Glob patterns of the vendor driver's device nodes, listed by ``allsmi doctor``."""
    env_vars: tuple[str, ...] = ()
    """Environment variables the backend reads (``ALLSMI_HL_SMI``)."""
    compute_active_source: str = ""
    """What the backend's ``compute_active_percent`` measures (a name of
    ``allsmi.schema.COMPUTE_ACTIVE_SOURCES``: ``core_busy``, ``engine_time``...), where the backend
    sets it from a declaration rather than per device; ``--simulate`` gives the devices it
    impersonates that source. Empty: not declared."""
    tool_flags: tuple[str, ...] = ()
    """Options of the vendor's own tools that its docs name in backticks (``--json-output``); the
    docs test accepts them beside ``allsmi``'s own (the flags of ``version_command`` count too)."""

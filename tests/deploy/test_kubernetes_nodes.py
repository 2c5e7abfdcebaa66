"""deploy/kubernetes/: each vendor's DaemonSet gets a pod on the nodes that have its devices.

The node labels are made here the way node-feature-discovery makes them, from its documented
rule (nfd-worker configuration reference, ``sources.pci``): for every PCI device whose class
matches an entry of ``deviceClassWhitelist`` (a base class such as ``"03"`` admits all its
subclasses; default ``["03", "0b40", "12"]``), the node gets the label
``feature.node.kubernetes.io/pci-<fields>.present: "true"``, where ``<fields>`` are the values of
``deviceLabelFields`` (default ``["class", "vendor"]``) joined by ``_``, the class being the
four hex digits of base class and subclass. The NVIDIA GPU Operator runs it with
``deviceLabelFields: [vendor]``. The cards are real ones, with the class ``lspci -n`` shows;
written here, not taken from the kit.
"""

from __future__ import annotations

from typing import Any

import pytest

from .kube import OVERLAYS, VENDORS, daemonsets, vendor_of

NFD_DEFAULT_WHITELIST = ("03", "0b40", "12")
NFD_DEFAULT_FIELDS = ("class", "vendor")

#: (vendor of the kit, card, PCI vendor id, PCI class)
CARDS = [
    ("nvidia", "H100 SXM", "10de", "0302"),
    ("nvidia", "A100 PCIe", "10de", "0302"),
    ("nvidia", "RTX 6000 Ada", "10de", "0300"),
    ("amd", "Instinct MI250X", "1002", "0380"),
    ("amd", "Instinct MI300X", "1002", "1200"),
    ("amd", "Radeon PRO W7900", "1002", "0300"),
    ("gaudi", "Gaudi 2", "1da3", "1200"),
    ("gaudi", "Gaudi 3", "1da3", "1200"),
    ("furiosa", "RNGD", "1ed2", "1200"),
    ("furiosa", "Warboy", "1ed2", "1200"),
    ("rebellions", "ATOM", "1eff", "1200"),
    ("tenstorrent", "Wormhole n300", "1e52", "1200"),
    ("tenstorrent", "Blackhole p150", "1e52", "1200"),
]
#: What every server has besides: the BMC's VGA (ASPEED), a NIC, an NVMe drive, the host bridge.
SERVER = [("1a03", "0300"), ("8086", "0200"), ("144d", "0108"), ("1022", "0600")]


def nfd_labels(devices: list[tuple[str, str]], whitelist: tuple[str, ...] = NFD_DEFAULT_WHITELIST,
               fields: tuple[str, ...] = NFD_DEFAULT_FIELDS) -> dict[str, str]:
    """The ``pci-*.present`` labels node-feature-discovery publishes for ``(vendor, class)`` devices."""
    labels = {}
    for vendor, pci_class in devices:
        if not any(pci_class.startswith(entry) for entry in whitelist):
            continue
        values = {"class": pci_class, "vendor": vendor}
        labels[f"feature.node.kubernetes.io/pci-{'_'.join(values[f] for f in fields)}.present"] = "true"
    return labels


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels or not labels[key].isdigit():
            return False
        return int(labels[key]) > int(values[0]) if op == "Gt" else int(labels[key]) < int(values[0])
    raise AssertionError(f"unknown node selector operator {op}")


def schedules_on(daemonset: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the scheduler places the DaemonSet's pod on a node with these labels (and no taints
    it does not tolerate: it tolerates all): nodeSelector and the required node affinity."""
    pod = daemonset["spec"]["template"]["spec"]
    if any(labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    # Terms are ORed; the expressions of a term are ANDed (an empty term matches nothing).
    return any(term.get("matchExpressions") and all(_expression_matches(e, labels) for e in term["matchExpressions"])
               for term in required["nodeSelectorTerms"])


def test_the_label_rule_is_nfd_s() -> None:
    """Tenstorrent's operator documents the label its NFD sets for its cards; the VGA of the BMC
    is labelled too; a NIC (class 02) is not in the default whitelist."""
    labels = nfd_labels([("1e52", "1200"), *SERVER])
    assert labels == {"feature.node.kubernetes.io/pci-1200_1e52.present": "true",
                      "feature.node.kubernetes.io/pci-0300_1a03.present": "true"}
    assert nfd_labels([("10de", "0302")], fields=("vendor",)) == {
        "feature.node.kubernetes.io/pci-10de.present": "true"}


def test_every_vendor_has_cards_here() -> None:
    assert {vendor for vendor, *_ in CARDS} == set(VENDORS)


@pytest.mark.parametrize("fields", [NFD_DEFAULT_FIELDS, ("vendor",)], ids=["nfd-default", "vendor-only"])
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_card_gets_its_vendor_s_pod_and_no_other(overlay: str, fields: tuple[str, ...]) -> None:
    sets = daemonsets(overlay)
    for vendor, card, pci_vendor, pci_class in CARDS:
        labels = nfd_labels([(pci_vendor, pci_class), *SERVER], fields=fields)
        scheduled = {vendor_of(ds) for ds in sets if schedules_on(ds, labels)}
        wanted = {vendor} if vendor in {vendor_of(ds) for ds in sets} else set()
        assert scheduled == wanted, f"{overlay}: a node with a {card} ({labels}) runs {scheduled or 'nothing'}"
    plain = nfd_labels(SERVER, fields=fields)
    assert not [ds["metadata"]["name"] for ds in sets if schedules_on(ds, plain)], "a node without accelerators"


def test_a_node_with_two_vendors_runs_both() -> None:
    labels = nfd_labels([("10de", "0302"), ("1002", "1200"), *SERVER])
    assert {vendor_of(ds) for ds in daemonsets("fleet") if schedules_on(ds, labels)} == {"nvidia", "amd"}


@pytest.mark.parametrize("vendor,label", [("nvidia", "nvidia.com/gpu.present"),
                                          ("amd", "feature.node.kubernetes.io/amd-gpu")])
def test_the_vendor_operators_labels_are_enough(vendor: str, label: str) -> None:
    """GPU Feature Discovery and the AMD GPU Operator label nodes without NFD's PCI labels."""
    (ds,) = daemonsets(vendor)
    assert schedules_on(ds, {label: "true"})
    assert not schedules_on(ds, {label: "false"})


def test_a_vendor_only_affinity_would_be_caught() -> None:
    """The check fails on the kit's former affinity (only ``pci-<vendor>.present``)."""
    (ds,) = daemonsets("tenstorrent")
    old = {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "feature.node.kubernetes.io/pci-1e52.present", "operator": "In", "values": ["true"]}]}]}}}}}}}
    default = nfd_labels([("1e52", "1200")])
    assert schedules_on(ds, default) and not schedules_on(old, default)

"""deploy/kubernetes/: each vendor's DaemonSet gets a pod on the nodes that have its devices.

The node labels are made here the way node-feature-discovery makes them, from its documented
rule (nfd-worker configuration reference, ``sources.pci``): for every PCI device whose class
matches an entry of ``deviceClassWhitelist`` (a base class such as ``"03"`` admits all its
subclasses; default ``["03", "0b40", "12"]``), the node gets the label
``feature.node.kubernetes.io/pci-<fields>.present: "true"``, where ``<fields>`` are the values of
``deviceLabelFields`` (default ``["class", "vendor"]``) joined by ``_``, the class being the
four hex digits of base class and subclass. The NVIDIA GPU Operator runs it with
``deviceLabelFields: [vendor]``. The cards are real ones, with the class ``lspci -n`` shows;
written here, not taken from the kit. Where a platform labels its nodes itself (GKE's TPU node
pools, EKS instance types, the Ascend device plugin's ``accelerator`` label), the card carries
those labels too; the TPU's and Neuron devices' PCI class could not be checked here, so they
are given one NFD's default whitelist leaves out (``0880``): their pods must come from the
platform's labels.
"""

from __future__ import annotations

from typing import Any

import pytest

from .kube import OVERLAYS, VENDORS, daemonsets, vendor_of

NFD_DEFAULT_WHITELIST = ("03", "0b40", "12")
NFD_DEFAULT_FIELDS = ("class", "vendor")

#: (vendor of the kit, card, PCI vendor id, PCI class, the labels its platform sets)
CARDS: list[tuple[str, str, str, str, dict[str, str]]] = [
    ("nvidia", "H100 SXM", "10de", "0302", {}),
    ("nvidia", "A100 PCIe", "10de", "0302", {}),
    ("nvidia", "RTX 6000 Ada", "10de", "0300", {}),
    ("amd", "Instinct MI250X", "1002", "0380", {}),
    ("amd", "Instinct MI300X", "1002", "1200", {}),
    ("amd", "Radeon PRO W7900", "1002", "0300", {}),
    ("gaudi", "Gaudi 2", "1da3", "1200", {}),
    ("gaudi", "Gaudi 3", "1da3", "1200", {}),
    ("furiosa", "RNGD", "1ed2", "1200", {}),
    ("furiosa", "Warboy", "1ed2", "1200", {}),
    ("rebellions", "ATOM", "1eff", "1200", {}),
    ("tenstorrent", "Wormhole n300", "1e52", "1200", {}),
    ("tenstorrent", "Blackhole p150", "1e52", "1200", {}),
    ("intel", "Data Center GPU Max 1550", "8086", "0380", {}),
    ("intel", "Data Center GPU Flex 170", "8086", "0380", {}),
    ("intel", "Arc A770", "8086", "0300", {}),
    ("tpu", "TPU v5e (GKE)", "1ae0", "0880", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}),
    ("tpu", "TPU v6e (GKE)", "1ae0", "0880", {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}),
    ("neuron", "Trainium (EKS)", "1d0f", "0880", {"node.kubernetes.io/instance-type": "trn1.32xlarge"}),
    ("neuron", "Inferentia2 (EKS)", "1d0f", "0880", {"node.kubernetes.io/instance-type": "inf2.48xlarge"}),
    ("neuron", "Trainium2 (Karpenter)", "1d0f", "0880", {
        "node.kubernetes.io/instance-type": "trn2.48xlarge", "karpenter.k8s.aws/instance-accelerator-manufacturer": "aws"}),
    ("ascend", "Ascend 910B", "19e5", "1200", {}),
    ("ascend", "Ascend 310P (accelerator label)", "19e5", "1200", {"accelerator": "huawei-Ascend310P"}),
]
#: What every server has besides: the BMC's VGA (ASPEED), a NIC, an NVMe drive, the host bridge.
SERVER = [("1a03", "0300"), ("8086", "0200"), ("144d", "0108"), ("1022", "0600")]
#: Vendor ids that also name network cards (Intel's, the gVNIC, ENA, Huawei's) or other devices
#: (QuickAssist, EBS NVMe): a ``pci-<vendor>.present`` label says nothing about accelerators.
SHARED_VENDOR_IDS = {"8086", "1ae0", "1d0f", "19e5"}
#: The NVIDIA GPU Operator's NFD: vendor-only labels over a whitelist with network controllers.
GPU_OPERATOR_WHITELIST = ("02", "0200", "0207", "0300", "0302")


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


def _pod_expected(pci_vendor: str, pci_class: str, platform: dict[str, str], fields: tuple[str, ...]) -> bool:
    """Whether a node with this card should run its vendor's pod: the platform labelled it, or
    NFD did with a label that names the accelerator."""
    if platform:
        return True
    if not any(pci_class.startswith(entry) for entry in NFD_DEFAULT_WHITELIST):
        return False  # NFD labels nothing for this device
    return "class" in fields or pci_vendor not in SHARED_VENDOR_IDS


def test_every_vendor_has_cards_here() -> None:
    assert {vendor for vendor, *_ in CARDS} == set(VENDORS)


@pytest.mark.parametrize("fields", [NFD_DEFAULT_FIELDS, ("vendor",)], ids=["nfd-default", "vendor-only"])
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_card_gets_its_vendor_s_pod_and_no_other(overlay: str, fields: tuple[str, ...]) -> None:
    sets = daemonsets(overlay)
    for vendor, card, pci_vendor, pci_class, platform in CARDS:
        labels = nfd_labels([(pci_vendor, pci_class), *SERVER], fields=fields) | platform
        scheduled = {vendor_of(ds) for ds in sets if schedules_on(ds, labels)}
        wanted = {vendor} if vendor in {vendor_of(ds) for ds in sets} and \
            _pod_expected(pci_vendor, pci_class, platform, fields) else set()
        assert scheduled == wanted, f"{overlay}: a node with a {card} ({labels}) runs {scheduled or 'nothing'}"
    plain = nfd_labels(SERVER, fields=fields)
    assert not [ds["metadata"]["name"] for ds in sets if schedules_on(ds, plain)], "a node without accelerators"


def test_a_node_with_two_vendors_runs_both() -> None:
    labels = nfd_labels([("10de", "0302"), ("1002", "1200"), *SERVER])
    assert {vendor_of(ds) for ds in daemonsets("fleet") if schedules_on(ds, labels)} == {"nvidia", "amd"}


@pytest.mark.parametrize("vendor,label", [("nvidia", "nvidia.com/gpu.present"),
                                          ("amd", "feature.node.kubernetes.io/amd-gpu"),
                                          ("intel", "intel.feature.node.kubernetes.io/gpu")])
def test_the_vendor_operators_labels_are_enough(vendor: str, label: str) -> None:
    """GPU Feature Discovery, the AMD GPU Operator and the Intel device plugins' NFD rules label
    nodes without NFD's PCI labels."""
    (ds,) = daemonsets(vendor)
    assert schedules_on(ds, {label: "true"})
    assert not schedules_on(ds, {label: "false"})


def test_network_cards_of_accelerator_vendors_get_no_pod() -> None:
    """Intel's NIC and QuickAssist, the gVNIC, ENA and Huawei's NIC, labelled by NFD's defaults and
    by the GPU Operator's vendor-only configuration, start none of the kit's exporters; nor do the
    nodes of other instance types or Ascend labels."""
    devices = [("8086", "0200"), ("8086", "0b40"), ("1ae0", "0200"), ("1d0f", "0200"), ("1d0f", "0108"),
               ("19e5", "0200"), *SERVER]
    sets = daemonsets("fleet")
    for labels in (nfd_labels(devices), nfd_labels(devices, whitelist=GPU_OPERATOR_WHITELIST, fields=("vendor",))):
        assert "feature.node.kubernetes.io/pci-8086.present" in labels or \
            "feature.node.kubernetes.io/pci-0b40_8086.present" in labels
        labels |= {"node.kubernetes.io/instance-type": "m7i.48xlarge", "accelerator": "nvidia"}
        assert not [ds["metadata"]["name"] for ds in sets if schedules_on(ds, labels)], labels


def test_a_vendor_only_affinity_would_be_caught() -> None:
    """The check fails on the kit's former affinity (only ``pci-<vendor>.present``)."""
    (ds,) = daemonsets("tenstorrent")
    old = {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "feature.node.kubernetes.io/pci-1e52.present", "operator": "In", "values": ["true"]}]}]}}}}}}}
    default = nfd_labels([("1e52", "1200")])
    assert schedules_on(ds, default) and not schedules_on(old, default)

"""Every vendor list of README.md and docs/ is generated from the backends' declarations."""

from __future__ import annotations

import subprocess
import sys

from allsmi.collection import registry
from allsmi.cli import vendortables
from allsmi.schema.declarations import KubernetesResource, VendorDeclaration

from .docs_examples import REPO

XPU = VendorDeclaration(
    backend="xpu", vendor="intel", kind="gpu", product="Intel Data Center GPU Max",
    interface="xpu-smi", version_command=("xpu-smi", "--version"),
    kubernetes_resources=(KubernetesResource("gpu.intel.com/*", plugin="Intel GPU plugin"),),
    node_names=("card", "renderD"), device_nodes=("/dev/dri/renderD*",),
    env_vars=("ALLSMI_XPU_SMI",))


def test_generated_parts_equal_the_declarations() -> None:
    result = subprocess.run([sys.executable, "-m", "allsmi.cli.vendortables", "--check"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, ("run `python -m allsmi.cli.vendortables --write`: "
                                    + result.stderr)


def test_every_page_carries_its_generated_parts() -> None:
    expected = {"README.md": {"sentence"}, "docs/exporter.md": {"products"},
                "docs/configuration.md": {"vendors", "backends"},
                "docs/attribution.md": {"resource-vendors", "kubernetes", "node-names"},
                "docs/hardware-validation.md": {"hardware"}}
    assert set(expected) == set(vendortables.PAGES)
    for page, names in expected.items():
        text = (REPO / page).read_text(encoding="utf-8")
        assert {m.group("name") for m in vendortables.MARK.finditer(text)} == names, page


def test_the_built_in_backends_are_the_installed_ones() -> None:
    decls = vendortables.builtin_declarations()
    assert [d.backend for d in decls] == registry.hardware_names()
    for decl in decls:  # what the tables show is declared by every built-in backend
        assert decl.product and decl.interface and decl.version_command and decl.device_nodes
        assert decl.kubernetes_resources and decl.node_names is not None


def test_a_new_backend_appears_in_every_generated_part() -> None:
    """A backend added with its declarations shows up everywhere without editing the pages."""
    decls = (*vendortables.builtin_declarations(), XPU)
    for page in vendortables.PAGES:
        text = (REPO / page).read_text(encoding="utf-8")
        rendered = vendortables.render(text, decls)
        for match in vendortables.MARK.finditer(rendered):
            body, name = match.group("body"), match.group("name")
            # (the vendor list names vendors: "intel" is there already, once)
            wanted = {"vendors": "`intel`", "products": "Data Center GPU Max"}.get(name, "xpu")
            assert wanted in body, (page, name, body)
        assert rendered.count("`intel`") == text.count("`intel`")
    table = vendortables.kubernetes(decls)
    assert "| `gpu.intel.com/*` | `xpu` | Intel GPU plugin |" in table
    hardware = vendortables.hardware(decls)
    assert "`xpu-smi --version`" in hardware and "`ALLSMI_XPU_SMI`" in hardware
    assert "`cardN`" not in vendortables.node_names(decls)
    assert "`card<N>`" in vendortables.node_names(decls)


def test_a_stale_part_is_rewritten_and_rendering_is_stable() -> None:
    stale = "x <!-- vendors: backends -->`nvidia`<!-- /vendors --> y\n"
    rendered = vendortables.render(stale, vendortables.builtin_declarations())
    assert rendered != stale and "`gaudi`" in rendered
    assert vendortables.render(rendered, vendortables.builtin_declarations()) == rendered

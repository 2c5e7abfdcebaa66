"""The vendor lists and tables of README.md and docs/, generated from the backends' declarations.

A page marks each generated part with ``<!-- vendors: NAME -->`` ... ``<!-- /vendors -->``
(inline for a list in a sentence, on lines of their own around a table); :data:`RENDERERS`
says what each ``NAME`` becomes. Nobody edits those parts by hand: a new backend declares
its vendor (:mod:`allsmi.schema.declarations`) and ::

    python -m allsmi.cli.vendortables --write

rewrites them; ``--check`` (and ``tests/test_vendor_tables.py``) fails while a page differs
from the declarations. Only the backends shipped with allsmi (``allsmi.backends.*``) are
listed, so that a plug-in installed beside it does not change allsmi's own docs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable, Sequence

from allsmi.schema.declarations import VendorDeclaration

MARK = re.compile(r"<!-- vendors: (?P<name>[\w-]+) -->(?P<body>.*?)<!-- /vendors -->", re.S)
#: The pages that carry generated parts, relative to the repository root.
PAGES = ("README.md", "docs/attribution.md", "docs/configuration.md", "docs/exporter.md",
         "docs/hardware-validation.md")


def builtin_declarations() -> tuple[VendorDeclaration, ...]:
    """The declarations of the hardware backends shipped with allsmi, in name order."""
    from allsmi.collection import registry
    found = []
    for name in registry.hardware_names():
        cls = registry.load(name)
        if cls.__module__.startswith("allsmi.backends."):
            found.append(cls.declaration())
    return tuple(found)


def _words(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _code(items: Sequence[str]) -> str:
    return ", ".join(f"`{item}`" for item in dict.fromkeys(items))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def sentence(decls: Sequence[VendorDeclaration]) -> str:
    """``AMD Instinct (`amdsmi`), ... and Tenstorrent (`tt-smi`)``."""
    return _words([f"{d.product or d.backend} (`{d.interface}`)" if d.interface
                   else d.product or d.backend for d in decls])


def products(decls: Sequence[VendorDeclaration]) -> str:
    return _words([d.product or d.backend for d in decls])


def vendors(decls: Sequence[VendorDeclaration]) -> str:
    """The schema vendors (what a rule's ``vendor`` matches)."""
    return _code([d.vendor for d in decls])


def backends(decls: Sequence[VendorDeclaration]) -> str:
    """The backend names (what a rule's ``backend`` matches)."""
    return _code([d.backend for d in decls])


def resource_vendors(decls: Sequence[VendorDeclaration]) -> str:
    """What ``[attribution.resource_names]`` may name: a backend or a vendor."""
    return _code([name for d in decls for name in (d.backend, d.vendor)])


def kubernetes(decls: Sequence[VendorDeclaration]) -> str:
    rows = ["| resource name | allsmi backend | device ids written by the plugin |", "|---|---|---|"]
    for d in decls:
        for res in d.kubernetes_resources:
            how = res.plugin + ("" if res.id_kind == "auto" else f" (ids read as `{res.id_kind}`)")
            rows.append(f"| `{res.pattern}` | `{d.backend}` | {_cell(how)} |")
    return "\n" + "\n".join(rows) + "\n"


def node_names(decls: Sequence[VendorDeclaration]) -> str:
    rows = ["| allsmi backend | device-node names (`<name><index>`, also as a `/dev/...` path) |",
            "|---|---|"]
    for d in decls:
        names = [f"`{n}<N>`" if n else "`/dev/.../<N>`" for n in (d.backend, *d.node_names)]
        rows.append(f"| `{d.backend}` | {', '.join(dict.fromkeys(names))} |")
    return "\n" + "\n".join(rows) + "\n"


def hardware(decls: Sequence[VendorDeclaration]) -> str:
    rows = ["| backend | devices | read through | version of the vendor interface | device nodes | "
            "environment |", "|---|---|---|---|---|---|"]
    for d in decls:
        version = f"`{' '.join(d.version_command)}`" if d.version_command else "-"
        rows.append(f"| `{d.backend}` | {d.product} | `{d.interface}` | {version} | "
                    f"{_code(d.device_nodes) or '-'} | {_code(d.env_vars) or '-'} |")
    return "\n" + "\n".join(rows) + "\n"


RENDERERS: dict[str, Callable[[Sequence[VendorDeclaration]], str]] = {
    "sentence": sentence, "products": products, "vendors": vendors, "backends": backends,
    "resource-vendors": resource_vendors, "kubernetes": kubernetes, "node-names": node_names,
    "hardware": hardware,
}


def render(text: str, decls: Sequence[VendorDeclaration]) -> str:
    """``text`` with every generated part rendered from ``decls`` (an unknown name: ValueError)."""
    def one(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in RENDERERS:
            raise ValueError(f"unknown generated part {name!r} (known: {', '.join(RENDERERS)})")
        return f"<!-- vendors: {name} -->{RENDERERS[name](decls)}<!-- /vendors -->"
    return MARK.sub(one, text)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in (["--check"], ["--write"]):
        print("usage: python -m allsmi.cli.vendortables --check | --write", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[2]
    decls = builtin_declarations()
    stale = []
    for page in PAGES:
        path = root / page
        text = path.read_text(encoding="utf-8")
        new = render(text, decls)
        if new != text:
            stale.append(page)
            if args == ["--write"]:
                path.write_text(new, encoding="utf-8")
    verb = "rewritten" if args == ["--write"] else "differ from the backends' declarations"
    for page in stale:
        print(f"{page}: {verb}", file=sys.stderr)
    return 1 if stale and args == ["--check"] else 0


if __name__ == "__main__":
    sys.exit(main())

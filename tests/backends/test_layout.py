"""backends/ shows the architecture: one package per vendor plus the shared part, names shared
between modules are public, and no module outgrows a screenful of seams."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
BACKENDS = REPO / "backends"
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for p in BACKENDS.rglob("*.py") if "__pycache__" not in p.parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_one_package_per_vendor_plus_the_shared_part() -> None:
    entry_points = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    built_in = {name: target for name, target in entry_points["allsmi.backends"].items()}
    folders = {p.name for p in BACKENDS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(built_in) | {"_common"}
    assert [p.name for p in BACKENDS.glob("*.py")] == ["__init__.py"]
    for name, target in built_in.items():
        assert target.split(":")[0] == f"allsmi.backends.{name}", (name, target)
        assert (BACKENDS / name / "__init__.py").is_file()


def test_no_module_over_400_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def _crossings(source: str) -> list[str]:
    """``from x import _y``, and ``m._y`` on a module ``m`` of allsmi imported by name."""
    tree = ast.parse(source)
    found: list[str] = []
    ours: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"from {'.' * node.level}{node.module or ''} import {alias.name}")
                if node.level or (node.module or "").startswith("allsmi"):
                    ours.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            ours.update(a.asname or a.name for a in node.names if a.name.startswith("allsmi"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in ours and _private(node.attr)):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_no_underscore_name_crosses_modules() -> None:
    """What a module shares with another, even inside its own vendor package, is public."""
    found = {str(p.relative_to(REPO)): c for p in _modules() if (c := _crossings(p.read_text()))}
    assert not found, found


#: Files allowed to cross for now, while a name they use waits to become public (none today).
_PENDING: set[str] = set()


def test_no_underscore_name_crosses_modules_in_allsmi_or_the_tests() -> None:
    """The same rule for the rest of the code: allsmi/ and the tests' own helpers and fakes."""
    paths = [p for root in ("allsmi", "tests") for p in sorted((REPO / root).rglob("*.py"))
             if "__pycache__" not in p.parts and not p.name.endswith("_pb2.py")]
    found = {rel: c for p in paths
             if (rel := str(p.relative_to(REPO))) not in _PENDING and (c := _crossings(p.read_text()))}
    assert not found, found


def test_the_crossing_check_sees_both_forms() -> None:
    planted = ("import pynvml\nfrom allsmi.backends.nvidia.devices import _Gpu\nfrom . import read\n"
               "read._cell(1)\npynvml._nvmlGetFunctionPointer('x')\nread.__name__\n")
    assert _crossings(planted) == ["from allsmi.backends.nvidia.devices import _Gpu", "read._cell"]

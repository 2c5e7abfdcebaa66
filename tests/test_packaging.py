"""The package installs as `allsmi` with backends under `allsmi.backends`, never as `backends`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .wheelhouse import offline_pip_env

REPO = Path(__file__).resolve().parents[1]


def _package_folders(root: Path) -> set[str]:
    """Every package of the tree as installed: allsmi/** as ``allsmi.*``, backends/** as
    ``allsmi.backends.*``."""
    found = {"allsmi"} | {".".join(("allsmi", *p.parent.relative_to(root / "allsmi").parts))
                          for p in (root / "allsmi").rglob("__init__.py")}
    found |= {".".join(("allsmi", "backends", *p.parent.relative_to(root / "backends").parts))
              for p in (root / "backends").rglob("__init__.py")}
    return found


def test_packages_are_found_not_listed() -> None:
    """No hand-kept package list: a new vendor folder must need no packaging edit."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "packages" not in data["tool"]["setuptools"]
    assert data["tool"]["setuptools"]["package-dir"] == {"allsmi": "allsmi", "allsmi.backends": "backends"}


def _build_wheel(source: Path, out: Path) -> list[str]:
    """The files of the wheel pip builds of ``source`` (its build requirements from the
    wheelhouse, the index off: ``tests/wheelhouse.py``)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(out), str(source)], check=True, timeout=300, capture_output=True,
                   env=offline_pip_env())
    return zipfile.ZipFile(next(out.glob("allsmi-*.whl"))).namelist()


def test_wheel_maps_backends_under_allsmi(tmp_path: Path) -> None:
    """Built from a copy of the tree with one more vendor folder: every package folder, the
    new one included, lands in the wheel under ``allsmi``, with no edit to the packaging."""
    import shutil
    source = tmp_path / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for name in ("allsmi", "backends"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    (source / "backends" / "zzvendor").mkdir()
    (source / "backends" / "zzvendor" / "__init__.py").write_text('"""A new vendor."""\n')
    (source / "backends" / "zzvendor" / "read.py").write_text("VALUE = 1\n")
    names = _build_wheel(source, tmp_path / "wheel")
    packages = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packages == _package_folders(REPO) | {"allsmi.backends.zzvendor"}
    assert "allsmi/backends/zzvendor/read.py" in names
    assert "allsmi/backends/nvidia/__init__.py" in names
    assert "allsmi/backends/simulated/scenarios/mixed.toml" in names
    assert not [n for n in names if n.startswith("backends/")]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(next((tmp_path / "wheel").glob("allsmi-*.whl"))).read(entry_points).decode()
    assert "[allsmi.backends]" in text and "allsmi.backends.nvidia:NvidiaBackend" in text


def test_no_top_level_backends_package_is_importable() -> None:
    code = "import importlib.util, sys; sys.path.remove('') if '' in sys.path else None; " \
           "print(importlib.util.find_spec('backends'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                         timeout=60, check=True).stdout.strip()
    assert out == "None"

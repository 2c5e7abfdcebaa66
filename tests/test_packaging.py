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

REPO = Path(__file__).resolve().parents[1]


def _declared() -> set[str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return set(data["tool"]["setuptools"]["packages"])


def test_every_package_folder_is_declared() -> None:
    found = {"allsmi." + ".".join(p.parent.relative_to(REPO / "allsmi").parts)
             for p in (REPO / "allsmi").rglob("__init__.py")}
    found = {f.rstrip(".") for f in found} | {"allsmi.backends"}
    found |= {"allsmi.backends." + ".".join(p.parent.relative_to(REPO / "backends").parts)
              for p in (REPO / "backends").rglob("__init__.py") if p.parent != REPO / "backends"}
    assert found == _declared()


def test_wheel_maps_backends_under_allsmi(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(tmp_path), str(REPO)], check=True, timeout=300, capture_output=True)
    wheel = next(tmp_path.glob("allsmi-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "allsmi/backends/nvidia.py" in names
    assert "allsmi/backends/scenarios/mixed.toml" in names
    assert not [n for n in names if n.startswith("backends/")]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[allsmi.backends]" in text and "allsmi.backends.nvidia:NvidiaBackend" in text


def test_no_top_level_backends_package_is_importable() -> None:
    code = "import importlib.util, sys; sys.path.remove('') if '' in sys.path else None; " \
           "print(importlib.util.find_spec('backends'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                         timeout=60, check=True).stdout.strip()
    assert out == "None"

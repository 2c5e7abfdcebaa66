"""A plug-in distribution made for a test, as ``pip install`` of a third party's package would
leave it: a site folder holding its ``dist-info`` (``METADATA`` and ``entry_points.txt``) and its
modules, and the environment that puts that folder and this checkout on the path."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Mapping

REPO = Path(__file__).resolve().parents[1]


def plugin_site(root: Path, name: str, entry_points: str,
                modules: Mapping[str, str]) -> tuple[dict[str, str], Path]:
    """The environment for a subprocess that finds the distribution ``name`` (its entry points
    ``entry_points``, its modules ``modules``: module name -> source, dedented) under
    ``root/site``, and that folder."""
    site = root / "site"
    dist = site / f"{name}-1.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(entry_points)
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)])), site

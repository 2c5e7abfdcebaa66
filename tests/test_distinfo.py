"""allsmi.support.distinfo answers as importlib.metadata does, or not at all.

Each check runs in a fresh interpreter whose ``sys.path`` starts with made-up
site directories, and compares the fast reader with importlib.metadata itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

COMPARE = r"""
import json, sys
sys.path[:0] = json.loads(sys.argv[1])
from importlib import metadata
from allsmi.support import distinfo
out = {}
for group in json.loads(sys.argv[2]):
    fast = distinfo.entry_points(group)
    try:
        real = [[e.name, e.value] for e in metadata.entry_points(group=group)]
    except Exception as exc:
        real = type(exc).__name__
    out[group] = {"fast": None if fast is None else [[e.name, e.value] for e in fast], "real": real}
versions = {}
for name in json.loads(sys.argv[3]):
    try:
        real = metadata.version(name)
    except metadata.PackageNotFoundError:
        real = None
    versions[name] = {"fast": distinfo.version(name), "real": real}
print(json.dumps({"groups": out, "versions": versions, "allsmi_metadata": "importlib.metadata" in sys.modules}))
"""


def _compare(paths: list[Path], groups: list[str], versions: list[str] = ()) -> dict:  # type: ignore[assignment]
    result = subprocess.run([sys.executable, "-c", COMPARE, json.dumps([str(p) for p in paths]),
                             json.dumps(groups), json.dumps(list(versions))],
                            capture_output=True, text=True, timeout=120, check=True)
    return json.loads(result.stdout)


def _dist(site: Path, folder: str, entry_points: str | None = None, version: str = "1.0") -> None:
    info = site / folder
    info.mkdir(parents=True)
    name = folder.split("-")[0]
    meta = "PKG-INFO" if folder.endswith(".egg-info") else "METADATA"
    (info / meta).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\nVersion: 9\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def test_same_entry_points_and_versions_as_importlib_metadata(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "zz_vendor-1.0.dist-info",
          "# a comment\n[console_scripts]\nzz = zz_vendor.cli:main\n\n"
          "[allsmi.backends]\n  zzvendor = zz_vendor.backend:ZzBackend  \nzzsim=zz_vendor:Sim.Inner\n",
          version="1.0")
    # the same distribution again, later on sys.path and spelled differently: ignored
    _dist(second, "ZZ.Vendor-2.0.dist-info", "[allsmi.backends]\nzzvendor = other:Other\n", version="2.0")
    # another distribution claiming the same name: listed too, the registry keeps the first
    _dist(second, "yy_vendor-0.1.dist-info", "[allsmi.backends]\nzzvendor = yy:Clash\nyy = yy:Yy\n")
    _dist(second, "legacy_pkg-3.0.egg-info", "[allsmi.backends]\nlegacy = legacy_pkg:Backend\n", version="3.0")
    _dist(second, "no_entry_points-1.0.dist-info", version="4.0.post1")
    out = _compare([first, second], ["allsmi.backends", "console_scripts", "pytest11", "nothing"],
                   ["zz-vendor", "ZZ_VENDOR", "legacy-pkg", "no_entry_points", "nvidia-ml-py", "absent-pkg"])
    for group, answer in out["groups"].items():
        assert answer["fast"] == answer["real"], group
    backends = out["groups"]["allsmi.backends"]["fast"]
    assert ["zzvendor", "zz_vendor.backend:ZzBackend"] in backends and ["zzvendor", "other:Other"] not in backends
    assert ["legacy", "legacy_pkg:Backend"] in backends
    for name, answer in out["versions"].items():
        assert answer["fast"] == answer["real"], name
    assert out["versions"]["zz-vendor"]["fast"] == "1.0" and out["versions"]["absent-pkg"]["fast"] is None


def test_unsure_layouts_are_left_to_importlib_metadata(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist(site, "broken-1.0.dist-info", "[allsmi.backends]\nthis line has no equals sign\n")
    out = _compare([site], ["allsmi.backends"])
    answer = out["groups"]["allsmi.backends"]
    assert answer["fast"] is None and isinstance(answer["real"], str)  # importlib.metadata itself raises

    extras = tmp_path / "extras"
    _dist(extras, "extra-1.0.dist-info", "[allsmi.backends]\nx = extra.mod:Backend [cuda]\n")
    out = _compare([extras], ["allsmi.backends"])
    assert out["groups"]["allsmi.backends"]["fast"] is None
    assert ["x", "extra.mod:Backend [cuda]"] in out["groups"]["allsmi.backends"]["real"]


def test_zip_on_sys_path_is_left_to_importlib_metadata(tmp_path: Path) -> None:
    import zipfile
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
        zf.writestr("zipped-1.0.dist-info/entry_points.txt", "[allsmi.backends]\nzipped = zipped:B\n")
    out = _compare([archive], ["allsmi.backends"], ["zipped"])
    assert out["groups"]["allsmi.backends"]["fast"] is None
    assert ["zipped", "zipped:B"] in out["groups"]["allsmi.backends"]["real"]
    assert out["versions"]["zipped"] == {"fast": "1.0", "real": "1.0"}  # through importlib.metadata


def test_the_installed_backends_are_found_without_importlib_metadata() -> None:
    code = ("import sys\nfrom allsmi.collection import registry\n"
            "print(registry.names(), 'importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert "'nvidia'" in out and "'simulated'" in out and out.strip().endswith("False")


def test_each_site_directory_is_listed_once_until_it_changes(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One ``allsmi snapshot`` asks for the entry points twice and two versions: one listing
    of each directory serves them all; a distribution installed since is still found; after
    ``forget`` (the dashboard's start-up is over) the next question lists them again."""
    import os

    from allsmi.support import distinfo
    site = tmp_path / "site"
    _dist(site, "zz_vendor-1.0.dist-info", "[allsmi.backends]\nzz = zz_vendor:B\n")
    monkeypatch.setattr(sys, "path", [str(site)])
    # another test of this worker may have imported the importlib_metadata backport, whose
    # finder lists distributions too (then this module rightly leaves the answer to importlib)
    from importlib.machinery import PathFinder
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f is PathFinder
                                           or not hasattr(f, "find_distributions")])
    listed: list[str] = []
    real_listdir = os.listdir
    monkeypatch.setattr(distinfo.os, "listdir", lambda root: listed.append(root) or real_listdir(root))
    for _ in range(2):
        assert [(e.name, e.value) for e in distinfo.entry_points("allsmi.backends")] == [("zz", "zz_vendor:B")]
        assert distinfo.version("zz-vendor") == "1.0"
        assert distinfo.version("absent-pkg") is None
    assert listed == [str(site)]
    _dist(site, "yy_vendor-2.0.dist-info", "[allsmi.backends]\nyy = yy_vendor:B\n", version="2.0")
    os.utime(site, ns=(0, os.stat(site).st_mtime_ns + 1_000_000))  # a coarse clock cannot hide it
    assert distinfo.version("yy-vendor") == "2.0"
    assert sorted(e.name for e in distinfo.entry_points("allsmi.backends")) == ["yy", "zz"]
    assert listed == [str(site)] * 2
    distinfo.forget()  # a long-running process keeps no scan once its registry has loaded
    assert distinfo.version("zz-vendor") == "1.0"
    assert listed == [str(site)] * 3

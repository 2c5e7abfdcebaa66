"""The layering is enforced: statically by import-linter, and at run time in a subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("textual", "rich", "prometheus_client")
VENDOR = ("pynvml", "amdsmi", "furiosa_smi", "furiosa_smi_py")


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    return str(exe) if exe.exists() else (shutil.which("lint-imports") or "lint-imports")


def _installed_layout(tmp: Path) -> Path:
    """The tree as a wheel installs it (``backends/`` inside ``allsmi/``): what import-linter must scan."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "allsmi", tmp / "allsmi", ignore=ignore)
    shutil.copytree(REPO / "backends", tmp / "allsmi" / "backends", ignore=ignore)
    return tmp


def test_import_linter_contracts_hold(tmp_path: Path) -> None:
    import os
    staged = _installed_layout(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(staged)}
    # Run from the staged tree so that the checkout's own allsmi/ is not on sys.path first.
    result = subprocess.run([_lint_imports(), "--no-cache", "--config", str(REPO / "pyproject.toml")],
                            cwd=staged, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    assert "Consumers never import each other KEPT" in result.stdout


def _modules_after(code: str) -> set[str]:
    probe = (f"{code}\nimport sys, json\n"
             "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         check=True).stdout.strip().splitlines()[-1]
    import json
    return set(json.loads(out))


def test_core_imports_no_ui_or_exporter_library() -> None:
    loaded = _modules_after("import allsmi, allsmi.schema, allsmi.fields, allsmi.config, allsmi.collector, "
                            "allsmi.registry, allsmi.output, allsmi.usage, allsmi.cli.main, allsmi.cli.snapshot")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_snapshot_json_and_csv_paths_import_no_heavy_library(tmp_path: Path) -> None:
    for fmt in ("json", "csv"):
        code = ("import sys, atexit, json\n"
                "def report():\n"
                "    sys.stderr.write('MODULES=' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
                "atexit.register(report)\n"
                "sys.argv = ['allsmi', 'snapshot', '--simulate', 'mixed', '--format', '" + fmt + "']\n"
                "from allsmi.cli.main import main\n"
                "main()\n")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        import json
        modules = set(json.loads(result.stderr.split("MODULES=")[-1]))
        assert not modules & set(HEAVY), (fmt, modules & set(HEAVY))
        assert not modules & set(VENDOR), (fmt, modules & set(VENDOR))


def test_listing_backends_imports_no_vendor_library() -> None:
    loaded = _modules_after("from allsmi import registry\nregistry.names()\n"
                            "import allsmi.cli.backends_cmd")
    assert not loaded & set(VENDOR)
    assert "allsmi" in loaded

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
    assert "Vendor packages never import each other KEPT" in result.stdout
    assert "The shared backend parts know no vendor KEPT" in result.stdout


def _modules_after(code: str) -> set[str]:
    probe = (f"{code}\nimport sys, json\n"
             "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         check=True).stdout.strip().splitlines()[-1]
    import json
    return set(json.loads(out))


def test_core_imports_no_ui_or_exporter_library() -> None:
    loaded = _modules_after("import allsmi, allsmi.schema, allsmi.schema.fields, allsmi.config, allsmi.collection.collector, "
                            "allsmi.collection.registry, allsmi.output, allsmi.usage, allsmi.cli.main, allsmi.cli.snapshot")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_snapshot_json_and_csv_paths_import_no_heavy_library(tmp_path: Path) -> None:
    for fmt in ("json", "csv", "processes-csv"):
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
    loaded = _modules_after("from allsmi.collection import registry\nregistry.names()\n"
                            "import allsmi.cli.backends_cmd")
    assert not loaded & set(VENDOR)
    assert "allsmi" in loaded


# -- start-up: what `allsmi snapshot` imports (benchmarks/startup.py measures the time) ------------

#: Never imported by a plain `allsmi snapshot --format json|csv`: the click command tree (the fast
#: path of allsmi/cli/fast.py), importlib.metadata (allsmi/support/distinfo.py reads the entry points) and
#: psutil (allsmi/collection/host.py reads /proc on Linux).
STARTUP_FREE = ("click", "importlib.metadata", "psutil")


def _snapshot_modules(args: list[str], env: dict[str, str] | None = None) -> set[str]:
    import json
    import os
    code = ("import sys, atexit, json\n"
            "def report():\n"
            "    sys.stderr.write('MODULES=' + json.dumps(sorted(sys.modules)))\n"
            "atexit.register(report)\n"
            f"sys.argv = ['allsmi', *{args!r}]\n"
            "from allsmi.cli.main import main\n"
            "main()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0 and result.stdout, result.stderr
    return set(json.loads(result.stderr.split("MODULES=")[-1]))


def test_plain_snapshots_import_neither_click_nor_importlib_metadata_nor_psutil() -> None:
    free = set(STARTUP_FREE) if sys.platform.startswith("linux") else set(STARTUP_FREE) - {"psutil"}
    for args in (["snapshot", "--format", "json"], ["snapshot", "--simulate", "mixed", "--format", "csv"],
                 ["--simulate", "mixed", "snapshot"]):
        modules = _snapshot_modules(args)
        assert not modules & free, (args, modules & free)
        assert not {m.split(".")[0] for m in modules} & set(HEAVY), args


def test_vendor_bindings_are_imported_only_where_their_vendor_may_be() -> None:
    from allsmi.backends._common import presence
    from allsmi.backends.amd import AmdBackend
    from allsmi.backends.amd.loader import library_paths
    from allsmi.backends.nvidia import NvidiaBackend
    from allsmi.backends.nvidia.nvml import DRIVER_PATHS, LIBRARY, LIBRARY_PATHS

    modules = _snapshot_modules(["snapshot", "--format", "json"])
    nvidia_here = presence.any_node((*NvidiaBackend.device_nodes, *DRIVER_PATHS)) or \
        presence.library_findable(LIBRARY, LIBRARY_PATHS)
    amd_here = presence.any_node(AmdBackend.device_nodes) or \
        presence.library_findable("libamd_smi.so", library_paths())
    assert ("pynvml" in modules) == nvidia_here
    assert ("amdsmi" in modules) == amd_here
    # nor their backend classes: a vendor certainly absent is answered by its package alone
    assert ("allsmi.backends.nvidia.backend" in modules) == nvidia_here
    assert ("allsmi.backends.amd.backend" in modules) == amd_here


def test_a_library_file_makes_the_backend_ask_the_binding(tmp_path: Path) -> None:
    """Where the loader would find the library, the binding is imported and asked; a file that
    is no library gives the same "not found" reasons as no file at all."""
    import json
    import os
    libs = tmp_path / "lib"
    libs.mkdir()
    (libs / "libnvidia-ml.so.1").write_bytes(b"not an ELF file")
    rocm = tmp_path / "rocm"
    (rocm / "lib").mkdir(parents=True)
    (rocm / "lib" / "libamd_smi.so").write_bytes(b"not an ELF file")
    code = ("import sys, json\nfrom allsmi.backends.nvidia import NvidiaBackend\n"
            "from allsmi.backends.amd import AmdBackend\n"
            "probes = {b.name: b.probe() for b in (NvidiaBackend(), AmdBackend())}\n"
            "out = {name: p.reason for name, p in probes.items()}\n"
            "# a failed import leaves no module behind: amdsmi's printed words show it ran\n"
            "out['imported'] = ['pynvml'] * ('pynvml' in sys.modules) + \\\n"
            "    ['amdsmi'] * ('loader_output' in probes['amd'].details or 'amdsmi' in sys.modules)\n"
            "print(json.dumps(out))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ROCM_PATH", "ROCM_HOME", "LD_LIBRARY_PATH")}

    def probe(extra: dict[str, str]) -> dict[str, object]:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=120, env={**env, **extra}, check=True)
        return json.loads(result.stdout.strip().splitlines()[-1])

    with_files = probe({"LD_LIBRARY_PATH": str(libs), "ROCM_PATH": str(rocm)})
    assert with_files["imported"] == ["pynvml", "amdsmi"]
    assert with_files["nvidia"] == "libnvidia-ml.so.1 not found (no NVIDIA driver installed)"
    assert str(with_files["amd"]).startswith("libamd_smi.so not found")
    without = probe({})
    if not without["imported"]:  # this machine has neither vendor: answered from the file system
        assert without["nvidia"] == with_files["nvidia"] and without["amd"] == with_files["amd"]


#: What running a tool needs: none of it is loaded while no command-line vendor has its tool.
TOOL_RUNNING = ("allsmi.backends._common.runner", "allsmi.backends._common.jsonout",
                "allsmi.backends._common.cells", "allsmi.backends._common.stream", "subprocess",
                "shutil", "tempfile", "selectors", "concurrent.futures")


def _cli_backends() -> dict[str, tuple[str, ...]]:
    """Every installed command-line backend (a :class:`CliToolBackend`, so a new vendor is
    checked without being named here) -> its declared environment variables."""
    from allsmi.collection import registry
    from allsmi.backends._common.clibackend import CliToolBackend
    found = {}
    for name in registry.hardware_names():
        cls = registry.load(name)
        if issubclass(cls, CliToolBackend):
            found[name] = cls.declaration().env_vars
    return found


def _package(name: str) -> str:
    """The vendor package the entry point names (``allsmi.backends.gaudi``)."""
    from allsmi.collection import registry
    return str(registry.entry_point(name).value).partition(":")[0]


def _no_tools_env(tmp_path: Path) -> dict[str, str]:
    """No vendor tool on PATH and every backend's declared override variable unset."""
    import os
    from allsmi.collection import registry
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    declared = {var for decl in registry.declarations() for var in decl.env_vars}
    env = {k: v for k, v in os.environ.items() if k not in declared}
    return {**env, "PATH": str(empty)}


def test_cli_vendors_load_no_parser_or_tool_runner_without_their_tool(tmp_path: Path) -> None:
    """With no vendor tool on PATH (and none in the vendors' install directories, which this
    machine is checked for), a snapshot loads none of an absent command-line vendor's modules
    besides its package's declaration (not even its backend class: the registry's
    DeferredBackend answers from the package's quick probe) and nothing that runs a tool; a
    simulation, which takes the impersonated classes' declarations, loads no parser or runner."""
    import json
    env = _no_tools_env(tmp_path)
    cli = _cli_backends()
    assert {"furiosa", "gaudi", "rebellions", "tenstorrent"} <= set(cli)  # the check sees them
    # Each backend's probe answer, and what importing its class alone loads (its package's
    # light part: the class and its probe).
    code = ("import json, sys\nfrom allsmi.collection import registry\nout = {}\n"
            f"for n in {sorted(cli)!r}:\n"
            "    before = set(sys.modules)\n    cls = registry.load(n)\n"
            "    imported = sorted(set(sys.modules) - before)\n"
            "    out[n] = [cls().probe().available, imported]\n"
            "print(json.dumps(out))\n")
    found = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      timeout=120, env=env, check=True).stdout.strip().splitlines()[-1])
    light = {m for _, imported in found.values() for m in imported}
    # Importing a backend's class never loads what runs a tool (whether or not it is found).
    assert not light & set(TOOL_RUNNING), light & set(TOOL_RUNNING)
    absent = [_package(name) for name, (available, _) in found.items() if not available]
    for args in (["snapshot", "--format", "json"], ["snapshot", "--simulate", "mixed", "--format", "json"]):
        modules = _snapshot_modules(args, env)
        simulated = "--simulate" in args
        loaded = {m for package in absent for m in modules if m.startswith(package + ".")
                  and not (simulated and m in light)}
        assert not loaded, (args, loaded)
        if len(absent) == len(cli):
            assert not modules & set(TOOL_RUNNING), (args, modules & set(TOOL_RUNNING))
        # attribution: only the sources that run (no job directory, no simulation here)
        if "--simulate" not in args:
            assert not modules & {"allsmi.attribution.hpcjob", "allsmi.attribution.simulated"}, args


def test_a_found_tool_loads_its_parser(tmp_path: Path) -> None:
    """The other side: where a tool is found, opening the backend imports what reads it (here a
    tt-smi that prints no device), so the laziness above is no missing import."""
    import json
    import os
    env = _no_tools_env(tmp_path)
    tool = tmp_path / "empty-bin" / "tt-smi"
    tool.write_text("#!/bin/sh\necho 'No Tenstorrent devices found'\nexit 1\n")
    tool.chmod(0o755)
    code = ("import sys, json\nfrom allsmi.backends.tenstorrent import TenstorrentBackend\n"
            "b = TenstorrentBackend()\nprobe = b.probe()\nb.open()\nsamples = b.sample()\n"
            "print(json.dumps([probe.available, len(samples), "
            "[m for m in sys.modules if m.startswith('allsmi.backends.tenstorrent.')]]))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**env, "ALLSMI_TT_SMI": str(tool), "PATH": env["PATH"] + os.pathsep + "/bin"},
                            check=True)
    available, count, modules = json.loads(result.stdout.strip().splitlines()[-1])
    assert available and count == 0
    assert set(modules) == {"allsmi.backends.tenstorrent.backend", "allsmi.backends.tenstorrent.decode",
                            "allsmi.backends.tenstorrent.snapshot"}


def test_amd_reading_modules_wait_for_a_loaded_amdsmi() -> None:
    """Where the amdsmi package cannot be imported, the AMD probe says so without importing the
    reading modules (they are loaded once amdsmi is)."""
    import json
    code = ("import sys, json\nsys.modules['amdsmi'] = None\n"
            "from allsmi.backends.amd import AmdBackend\nprobe = AmdBackend().probe()\n"
            "print(json.dumps([probe.available, probe.reason, "
            "[m for m in sys.modules if m.startswith('allsmi.backends.amd.')]]))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=True)
    available, reason, modules = json.loads(result.stdout.strip().splitlines()[-1])
    assert not available and reason
    assert set(modules) <= {"allsmi.backends.amd.backend", "allsmi.backends.amd.loader",
                            "allsmi.backends.amd.locate"}, modules


def test_nvidia_reading_modules_wait_for_a_loaded_nvml() -> None:
    """Where pynvml cannot be imported, the NVIDIA probe says so without importing the device
    model or the reads (they are loaded by open(), once NVML is)."""
    import json
    code = ("import sys, json\nsys.modules['pynvml'] = None\n"
            "from allsmi.backends.nvidia import NvidiaBackend\nprobe = NvidiaBackend().probe()\n"
            "print(json.dumps([probe.available, probe.reason, "
            "[m for m in sys.modules if m.startswith('allsmi.backends.nvidia.')]]))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=True)
    available, reason, modules = json.loads(result.stdout.strip().splitlines()[-1])
    assert not available and reason
    assert set(modules) == {"allsmi.backends.nvidia.backend", "allsmi.backends.nvidia.nvml"}, modules

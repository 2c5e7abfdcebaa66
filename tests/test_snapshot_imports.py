"""What a one-shot ``allsmi snapshot --format json`` on 8 fake H100s imports (issue 36, target 3).

Each module here costs start-up time and is not needed for a snapshot of an NVIDIA machine
with no configuration: the other vendors' loaders, the waiting classification's settings (no
``[activity]`` table and no holder), the consumers, click. The snapshot runs as a subprocess
under the benchmark's harness (the test suite's fake libnvidia-ml under the real pynvml), and
a small wrapper reports ``sys.modules`` at exit. ``benchmarks/startup.py`` measures the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "benchmarks" / "_fake_nvml_run.py"

#: Made lazy for the one-shot snapshot; each must stay out of it.
NOT_IMPORTED = (
    "allsmi.backends.amd.loader",  # the quick probe reads the file system (amd/locate.py)
    "allsmi.hostactivity.settings",  # validated only where [activity] or [accounting] is written
    "allsmi.usage", "allsmi.fairshare",
    "allsmi.support.tomlkeys",  # no configuration file: nothing to locate keys in
    "csv", "allsmi.schema.fields",  # the JSON document (output.py imports them for the CSV formats)
    "glob",  # the quick probes match device nodes themselves (backends/_common/presence.py)
    "allsmi.exporter", "allsmi.dashboard", "allsmi.accounting",
    "click", "importlib.metadata", "psutil", "grpc", "pyarrow", "jinja2", "pygal", "bcrypt",
    # the NVIDIA readers of a first cycle are plain threads (backends/nvidia/schedule.py), and
    # the modules on the way log only on failure (allsmi/support/lazylog.py): ~20 M instructions
    "concurrent.futures", "logging",
)


def _snapshot(tmp_path: Path, *args: str) -> tuple[dict, set[str]]:
    document, modules, _ = _snapshot_threads(tmp_path, *args)
    return document, modules


def _snapshot_threads(tmp_path: Path, *args: str) -> tuple[dict, set[str], list[str]]:
    """The document, the modules imported and the names of the threads started."""
    pytest.importorskip("pynvml")
    code = ("import atexit, json, runpy, sys, threading\n"
            "started = []\n"
            "start = threading.Thread.start\n"
            "def counted(self):\n"
            "    started.append(self.name)\n"
            "    start(self)\n"
            "threading.Thread.start = counted\n"
            "atexit.register(lambda: sys.stderr.write('MODULES=' + json.dumps([sorted(sys.modules), started])))\n"
            f"sys.argv = [{str(HARNESS)!r}, '8', '-', '--', 'allsmi', 'snapshot', *{list(args)!r}]\n"
            f"runpy.run_path({str(HARNESS)!r}, run_name='__main__')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path)  # no user configuration
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    modules, threads = json.loads(result.stderr.split("MODULES=")[-1])
    return json.loads(result.stdout), set(modules), threads


def test_a_one_shot_snapshot_imports_only_what_it_needs(tmp_path: Path) -> None:
    document, modules = _snapshot(tmp_path, "--format", "json")
    assert len(document["devices"]) == 8 and {b["name"]: b["status"] for b in document["backends"]}["nvidia"] == "ok"
    loaded = {name for name in NOT_IMPORTED if name in modules or any(m.startswith(name + ".") for m in modules)}
    assert not loaded, loaded


def test_a_one_shot_snapshot_starts_only_the_nvidia_threads(tmp_path: Path) -> None:
    """The NVIDIA backend's worker and the reader its cycles start on (more readers only where
    the reads are slow: the schedule's hedge); no attribution source, closer or pool thread."""
    _, _, threads = _snapshot_threads(tmp_path, "--format", "json")
    assert threads.count("allsmi-backend-nvidia") == 1 and "allsmi-nvml-first" in threads, threads
    assert all(name in ("allsmi-backend-nvidia", "allsmi-nvml-first") or name.startswith("allsmi-nvml_")
               for name in threads), threads
    assert len(threads) <= 2 + 8, threads


def test_a_written_activity_table_is_still_checked_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "allsmi").mkdir()
    (tmp_path / "allsmi" / "config.toml").write_text("[activity]\nhost_cpu_fraction = 2\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
    result = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--format", "json"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**env, "XDG_CONFIG_HOME": str(tmp_path)})
    assert result.returncode == 2 and result.stdout == ""
    assert "activity.host_cpu_fraction" in result.stderr and "line 2" in result.stderr, result.stderr


def test_amd_without_the_amdsmi_package_is_answered_without_its_backend() -> None:
    """A plain install (no ``allsmi[amd]``) says "not installed" from the quick probe, as the
    backend's probe says it, without importing the backend (nor a thread to ask it on)."""
    code = ("import importlib.util, json, sys\n"
            "real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'amdsmi' else real(name, *a)\n"
            "from allsmi.backends import amd\n"
            "quick = amd.quick_probe({})\n"
            "imported = 'allsmi.backends.amd.backend' in sys.modules\n"
            "probe = amd.AmdBackend().probe()\n"
            "print(json.dumps([imported, [quick.available, quick.reason, quick.details],"
            " [probe.available, probe.reason, probe.details]]))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=True)
    imported, quick, probe = json.loads(result.stdout.strip().splitlines()[-1])
    assert not imported
    assert quick == probe and quick[1].startswith("the amdsmi Python package is not installed"), (quick, probe)


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    """``allsmi snapshot | head -c1``: the pipe closes under the write; the command exits 1
    without a Python traceback (nothing it could do about it is a bug)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", "snapshot", "--simulate", "mixed",
                             "--format", "prometheus"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path, env={**env, "XDG_CONFIG_HOME": str(tmp_path)})
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(1) == b"#"
    proc.stdout.close()  # the reader leaves before the document (tens of KiB) is written
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in stderr, stderr

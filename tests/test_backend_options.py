"""``[backends.NAME]`` tables: each backend declares its options once (name, default, range), the
config is checked against the declarations when it is read (exit 2, file, line, key), and the
backend reads the same declarations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from allsmi.collection import registry
from allsmi.backend_api import BackendError
from allsmi.schema.declarations import BackendOption

from .conftest import run_allsmi

DOCS = Path(__file__).resolve().parents[1] / "docs" / "backends"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


@pytest.mark.parametrize(("table", "line", "key", "fragment"), [
    ('[backends.nvidia]\ngpm = "false"\n', 2, "backends.nvidia.gpm", "true or false"),
    ("[backends.nvidia]\nworkers = 0\n", 2, "backends.nvidia.workers", "1 to 256, whole"),
    ("[backends.nvidia]\nworkers = 2.5\n", 2, "backends.nvidia.workers", "whole number"),
    ("[backends.nvidia]\nprocesses = 1\n", 2, "backends.nvidia.processes", "true or false"),
    ("[backends.nvidia]\ngpu = false\n", 2, "backends.nvidia.gpu", "allowed: workers"),
    ('[backends.gaudi]\nmode = "sometimes"\n', 2, "backends.gaudi.mode", '"loop" or "oneshot"'),
    ("[backends.gaudi]\ninterval_seconds = 0\n", 2, "backends.gaudi.interval_seconds", "0.1 to 3600"),
    ("[backends.neuron]\nmonitor_period_seconds = nan\n", 2, "backends.neuron.monitor_period_seconds",
     "must be a number"),
    ('[backends.furiosa]\nmethod = "sdks"\n', 2, "backends.furiosa.method", '"auto" or "sdk" or "cli"'),
    ('[backends.intel]\nsysfs_root = ""\n', 2, "backends.intel.sysfs_root", "non-empty string"),
    ('[backends.tpu]\nmetrics_address = "a\\u001b[2Jb"\n', 2, "backends.tpu.metrics_address",
     "printable"),
    ("[backends.amd]\nworkers = 2\n", 2, "backends.amd.workers", "allowed: none"),
    ("[backends.simulated]\nx = 1\n", 2, "backends.simulated.x", "allowed: none"),
    ("\n[backends.nvidai]\ngpm = false\n", 2, "backends.nvidai", "no backend is called 'nvidai'"),
])
def test_a_bad_backend_table_stops_every_command_naming_file_line_and_key(
        tmp_path: Path, table: str, line: int, key: str, fragment: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(table)
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert f"line {line}, key '{key}'" in result.stderr and str(config) in result.stderr
    assert fragment in result.stderr


def test_doctor_lists_every_bad_option(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[backends.nvidia]\ngpm = "no"\nworkers = -1\n[backends.gaudi]\ncolour = 1\n')
    result = run_allsmi("doctor", "--config", str(config))
    assert result.returncode == 2
    for key in ("backends.nvidia.gpm", "backends.nvidia.workers", "backends.gaudi.colour"):
        assert f"key '{key}'" in result.stdout + result.stderr


def test_every_option_at_its_default_is_accepted(tmp_path: Path) -> None:
    """A file setting every declared option of every backend to its default is valid."""
    lines = []
    for declaration in registry.declarations():
        lines.append(f"[backends.{declaration.backend}]")
        lines.extend(f"{o.name} = {_toml(o.default)}" for o in declaration.options or ())
    config = tmp_path / "config.toml"
    config.write_text("\n".join(lines) + "\n")
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json", "--config", str(config))
    assert result.returncode == 0, result.stderr


def test_every_builtin_backend_declares_its_options_and_documents_them() -> None:
    for declaration in registry.declarations():
        assert declaration.options is not None, f"{declaration.backend} declares no options"
        page = (DOCS / f"{declaration.backend}.md").read_text()
        for option in declaration.options:
            assert re.search(rf"`[^`\n]*\b{option.name}`|^{option.name} = ", page, re.M), \
                f"docs/backends/{declaration.backend}.md does not document {option.name}"


def test_option_values_and_problems() -> None:
    flag = BackendOption("gpm", True)
    assert flag.value({}) is True and flag.value({"gpm": False}) is False
    assert flag.problem("false") and flag.problem(0)
    count = BackendOption("workers", 8, minimum=1, maximum=256)
    assert count.value({"workers": 3.0}) == 3 and isinstance(count.value({"workers": 3.0}), int)
    assert count.problem(True) and count.problem(float("inf")) and count.problem(257)
    choice = BackendOption("mode", "loop", choices=("loop", "oneshot"))
    assert choice.value({"mode": " OneShot "}) == "oneshot"
    with pytest.raises(ValueError, match="option mode: must be"):
        choice.value({"mode": "never"})
    text = BackendOption("root", "/sys")
    assert text.value({"root": " /host/sys "}) == "/host/sys"
    assert text.problem("x" * 5000) and text.problem("a\nb") and text.problem(3)
    # a probe never raises: a value the option does not take is its default there
    from allsmi.backends.furiosa import DECLARATION
    assert DECLARATION.probe_value({"method": "sdks"}, "method") == "auto"
    assert DECLARATION.probe_value({"method": " CLI "}, "method") == "cli"


def test_a_backend_built_in_code_with_a_bad_option_fails_to_open() -> None:
    """Outside a config file (a backend built in code) the backend's own read refuses it: an
    ``error`` status naming the option, never a silent default."""
    from allsmi.backends.nvidia import NvidiaBackend
    backend = NvidiaBackend(options={"gpm": "yes"})
    with pytest.raises(BackendError, match="option gpm: must be true or false"):
        backend.open()
    from allsmi.backends.furiosa import FuriosaBackend
    with pytest.raises(BackendError, match="option method"):
        FuriosaBackend(options={"method": "sdks"}).open()
    from allsmi.backends.neuron import NeuronBackend
    with pytest.raises(BackendError, match="monitor_period_seconds"):
        NeuronBackend(options={"monitor_period_seconds": -1}).open()


def test_backends_json_lists_each_backends_options() -> None:
    import json
    result = run_allsmi("backends", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    nvidia = {o["name"]: o for o in rows["nvidia"]["options"]}
    assert nvidia["gpm"] == {"name": "gpm", "default": True, "takes": "true or false",
                             "meaning": "read GPM activity on GPUs that have it"}
    assert nvidia["workers"]["takes"] == "1 to 256, whole"
    assert rows["amd"]["options"] == [] and rows["simulated"]["options"] == []


@pytest.mark.parametrize("kwargs", [{"minimum": 1}, {"maximum": 10}, {},
                                    {"minimum": 1, "maximum": float("inf")},
                                    {"minimum": float("nan"), "maximum": 10},
                                    {"minimum": 1, "maximum": 10**400},
                                    {"minimum": True, "maximum": 10},
                                    {"minimum": 6, "maximum": 10}])
def test_a_number_option_declares_both_finite_ends_around_its_default(kwargs: dict) -> None:
    """Every setting has a range: a number option without both ends (a plug-in's), with an end
    that is no finite number, or whose default is outside them, is a declaration error naming
    the option. Before, ``BackendOption("depth", 5, minimum=1)`` took ``depth = 10**400``."""
    with pytest.raises(ValueError, match="option depth: "):
        BackendOption("depth", 5, **kwargs)
    assert BackendOption("depth", 5, minimum=1, maximum=10).range_text() == "1 to 10, whole"


PLUGIN = '''
from allsmi.backend_api import Backend, ProbeResult
from allsmi.schema.declarations import BackendOption


class Opt(Backend):
    name = "zzopt"
    vendor = "zz"
    declared_options = (BackendOption("depth", 5, "how deep", minimum=1, maximum=MAXIMUM),)

    def probe(self):
        return ProbeResult(True)

    def open(self):
        self.check_options()

    def sample(self):
        return []
'''


@pytest.mark.parametrize("maximum", ["None", "64"])
def test_a_plug_in_s_number_option_never_takes_a_value_without_bound(tmp_path: Path,
                                                                    maximum: str) -> None:
    """A plug-in backend whose number option declares no upper end fails to load, saying why
    (its status, never a value of 400 digits taken); one that declares it refuses
    ``depth = <400 digits>`` as every built-in option does: exit 2 naming file, line and key."""
    import json
    import subprocess
    import sys

    from .pluginsite import plugin_site
    env, _ = plugin_site(tmp_path, "zzopt", "[allsmi.backends]\nzzopt = zzopt:Opt\n",
                         {"zzopt": PLUGIN.replace("MAXIMUM", maximum)})
    config = tmp_path / "config.toml"
    config.write_text(f'[backends]\nenabled = ["zzopt"]\n[backends.zzopt]\ndepth = {"9" * 400}\n')
    result = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--format", "json",
                             "--config", str(config)], env=env, capture_output=True, text=True,
                            timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    if maximum == "None":
        assert result.returncode == 0, result.stderr
        (status,) = json.loads(result.stdout)["backends"]
        assert status["status"] == "error", status
        assert "option depth: a number option declares its minimum and maximum" \
            in status["message"], status
    else:
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert f"{config}, line 4, key 'backends.zzopt.depth'" in result.stderr, result.stderr
        assert "1 to 64, whole" in result.stderr

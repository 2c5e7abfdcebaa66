"""A new vendor is exactly its folder, fixtures, tests, docs page and entry point.

In a scratch copy of the repository, a toy vendor ``acme`` with two tools (``acme-ls --json``
once per sample, and ``acme-mon``, which keeps printing one JSON report per line) is added by
writing only ``backends/acme/``, ``fixtures/acme/``, ``tests/contract/scenarios_acme.py``,
``docs/backends/acme.md`` and one entry-point line in ``pyproject.toml``, then running the
documented generator. Every layer check then covers it without further edits: import-linter
(including a broken contract when ``acme`` imports another vendor), the contract suite and the
fault matrix (each tool faulted on its own), the docs tests (its tool's flag, its variables), the
generated vendor tables, and the probe-import check.

``pip install -e .`` is emulated: the copy's ``allsmi.backends`` is its ``backends/`` (a link, as
the editable install maps it) and the entry points its ``pyproject.toml`` adds are written into
a ``dist-info`` directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from allsmi.collection import registry

REPO = Path(__file__).resolve().parents[1]

INIT = '''
    """Acme NPUs through acme-ls (the devices) and acme-mon (a running monitor): a toy vendor."""
    from allsmi.backends._common.declared import lazy_attribute, tool_absent
    from allsmi.backends._common.toolpath import VendorTool
    from allsmi.schema.declarations import KubernetesResource, VendorDeclaration

    TOOL = VendorTool(("acme-ls",), "ALLSMI_ACME_LS")
    MONITOR = VendorTool(("acme-mon",), "ALLSMI_ACME_MON")
    DECLARATION = VendorDeclaration(
        backend="acme", vendor="acme", kind="npu", product="Acme NPU", interface="acme-ls, acme-mon",
        version_command=("acme-ls", "--version"),
        kubernetes_resources=(KubernetesResource("acme.example/*", plugin="Acme plugin: the index"),),
        node_names=("acme",), device_nodes=("/dev/acme[0-9]*",), env_vars=(TOOL.env_var, MONITOR.env_var),
        tool_flags=("--json",))


    def quick_probe(options=None):
        return tool_absent(TOOL)


    def __getattr__(name):
        return lazy_attribute(__name__, name)
'''

BACKEND = '''
    """The Acme backend: acme-ls --json each sample, acme-mon's newest report."""
    from allsmi.backends._common.clibackend import CliToolBackend
    from allsmi.backends.acme import DECLARATION, MONITOR, TOOL


    def device_rows(text):
        import json
        rows = json.loads(text)
        if not isinstance(rows, list) or not all(
                isinstance(r, dict) and isinstance(r.get("serial"), str) and isinstance(r.get("mib"), int)
                and isinstance(r.get("milliwatts"), (int, float)) for r in rows):
            raise ValueError("not a list of devices")
        return rows


    def monitor_report(line):
        import json
        report = json.loads(line)
        if not isinstance(report, dict):
            raise ValueError("not a report")
        return {k: v.get("busy") if isinstance(v, dict) and isinstance(v.get("busy"), (int, float)) else None
                for k, v in report.items()}


    class AcmeBackend(CliToolBackend, declared=DECLARATION):
        tool_spec = TOOL
        extra_tools = (MONITOR,)
        unreported_fields = frozenset()

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self._ls = None
            self._monitor = None

        def open(self):
            from allsmi.backends._common.reports import NewestReport
            self.close()
            self._ls = self.require_tool()
            self._monitor = NewestReport([self.require_extra(MONITOR)], monitor_report, label="acme-mon",
                                         first_report_timeout=self.timeout_seconds,
                                         stale_after=3 + self.timeout_seconds)
            self._monitor.start()

        def sample(self):
            from allsmi.backends._common.runner import backend_errors
            from allsmi.schema import DeviceSample
            self.warnings = []
            if self._ls is None:
                self.open()
            tool = self.tool(self._ls)
            with backend_errors():
                rows = tool.parse(tool.run("--json"), device_rows)
            busy = self._monitor.newest(self.warnings)
            return [DeviceSample(id=f"acme:{r['serial']}", vendor=self.vendor, kind=self.kind,
                                 backend=self.display_name, index=n, health="ok",
                                 memory_total_bytes=r["mib"] * 2**20, power_watts=r["milliwatts"] / 1000,
                                 utilization_percent=busy.get(r["serial"]), processes=None)
                    for n, r in enumerate(rows)]

        def close(self):
            monitor, self._monitor = self._monitor, None
            if monitor is not None:
                monitor.close()
            self._ls = None
'''

SCENARIOS = '''
    """Contract scenarios for the toy Acme vendor."""
    from allsmi.backends.acme import MONITOR, TOOL, AcmeBackend

    from . import standin
    from .fixture_truth import json_value
    from .scenario import FIXTURES, CliTool, Scenario, expect

    ACME = FIXTURES / "acme"


    def _absent(env):
        env.monkeypatch.setenv(TOOL.env_var, str(env.tmp_path / "nothing"))
        return AcmeBackend()


    def _two(env):
        bindir = env.tmp_path / "bin"
        ls = standin.write_standin(bindir, "acme-ls", {"--json": standin.route(ACME, "ls.json")})
        mon = standin.write_standin(bindir, "acme-mon", {"": standin.route(ACME, "mon.jsonl", every=0.2)})
        env.monkeypatch.setenv(TOOL.env_var, str(ls))
        env.monkeypatch.setenv(MONITOR.env_var, str(mon))
        return AcmeBackend()


    SCENARIOS = [
        Scenario("absent", _absent, None),
        # where in the fixture each reading is, in the unit acme-ls states (its key names it);
        # busy 42.5 % as the monitor says
        Scenario("two", _two, 2, dict([expect(
            "acme:A1", power_watts=json_value(ACME / "ls.json", "serial=A1/milliwatts", "mW"),
            memory_total_bytes=json_value(ACME / "ls.json", "serial=A1/mib", "MiB"), utilization_percent=42.5)])),
    ]
    CLI = (CliTool(env_var=TOOL.env_var, executable="acme-ls", partial=ACME / "ls.json", calls=("--json",),
                   drift={"oldest": "two", "newest": "two", "na-fields": "two", "64-devices": "two"}),
           CliTool(env_var=MONITOR.env_var, executable="acme-mon", partial=ACME / "mon.jsonl", calls=("",),
                   stream=True))
'''

DOCS = '''
    # Acme backend (`acme`)

    A toy vendor with two tools: `acme-ls --json` lists the devices once per sample, and `acme-mon`
    keeps printing one report per line, of which the newest is read. Their paths can be set with
    `ALLSMI_ACME_LS` and `ALLSMI_ACME_MON`.
'''


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


def _scratch_copy(tmp: Path) -> Path:
    """The repository's files (tracked and new, not ignored) copied to ``tmp/clone``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    clone = tmp / "clone"
    for name in filter(None, files):
        source = REPO / name
        if source.is_file() or source.is_symlink():
            target = clone / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return clone


def _add_acme(clone: Path) -> None:
    """Exactly what a contributor writes: the folder, fixtures, scenario file, docs page and the
    entry-point line."""
    _write(clone / "backends" / "acme" / "__init__.py", INIT)
    _write(clone / "backends" / "acme" / "backend.py", BACKEND)
    _write(clone / "fixtures" / "acme" / "ls.json",
           '[{"serial": "A1", "mib": 16384, "milliwatts": 17500}, {"serial": "B2", "mib": 8192, "milliwatts": 9000}]')
    _write(clone / "fixtures" / "acme" / "mon.jsonl", '{"A1": {"busy": 42.5}, "B2": {"busy": 7.0}}\n')
    _write(clone / "fixtures" / "acme" / "README.md", "Written for the scratch-clone test; not a capture.\n")
    _write(clone / "tests" / "contract" / "scenarios_acme.py", SCENARIOS)
    _write(clone / "docs" / "backends" / "acme.md", DOCS)
    pyproject = clone / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    anchor = '[project.entry-points."allsmi.backends"]\n'
    pyproject.write_text(text.replace(anchor, anchor + 'acme = "allsmi.backends.acme:AcmeBackend"\n'),
                         encoding="utf-8")


def _install(clone: Path, site: Path) -> dict[str, str]:
    """What ``pip install -e .`` of the copy does, for the parts allsmi reads: ``allsmi.backends``
    is ``backends/``, and the copy's new entry points are installed metadata."""
    (clone / "allsmi" / "backends").symlink_to(clone / "backends", target_is_directory=True)
    text = (clone / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split('[project.entry-points."allsmi.backends"]\n', 1)[1].split("\n[", 1)[0]
    declared = dict(re.findall(r'^(\w+) = "([^"]+)"', section, re.M))
    installed = set(registry.names())
    new = {name: target for name, target in declared.items() if name not in installed}
    assert new == {"acme": "allsmi.backends.acme:AcmeBackend"}, new
    dist = site / "allsmi_acme-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: allsmi-acme\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[allsmi.backends]\n" + "".join(f"{n} = {t}\n" for n, t in new.items()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALLSMI_", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(clone), str(site)])
    return env


def _lint(clone: Path, env: dict[str, str], tmp: Path) -> str:
    staged = tmp / "staged"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "backends")
    shutil.copytree(clone / "allsmi", staged / "allsmi", ignore=ignore)
    shutil.copytree(clone / "backends", staged / "allsmi" / "backends",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint if lint.exists() else "lint-imports"), "--no-cache",
                             str(clone / "pyproject.toml")], cwd=staged, capture_output=True, text=True,
                            timeout=300, env=dict(env, PYTHONPATH=str(staged)))
    return result.stdout + result.stderr


@pytest.mark.long(25)
@pytest.mark.timeout(600)
def test_a_two_tool_streaming_vendor_needs_only_its_own_files(tmp_path: Path) -> None:
    clone = _scratch_copy(tmp_path)
    _add_acme(clone)
    env = _install(clone, tmp_path / "site")

    generator = subprocess.run([sys.executable, "-m", "allsmi.cli.vendortables", "--write"], cwd=clone,
                               env=env, capture_output=True, text=True, timeout=120)
    assert generator.returncode == 0, generator.stderr
    assert "Acme NPU (`acme-ls, acme-mon`)" in (clone / "README.md").read_text(encoding="utf-8")

    report = _lint(clone, env, tmp_path / "lint-ok")
    assert "0 broken" in report and "Vendor packages never import each other KEPT" in report, report
    # The contracts name no vendor, yet they cover acme: importing another vendor breaks one.
    with open(clone / "backends" / "acme" / "backend.py", "a", encoding="utf-8") as handle:
        handle.write("\nfrom allsmi.backends.gaudi import DECLARATION as _GAUDI  # noqa: E402\n")
    report = _lint(clone, env, tmp_path / "lint-broken")
    assert "Vendor packages never import each other BROKEN" in report, report
    _write(clone / "backends" / "acme" / "backend.py", BACKEND)  # the clean backend again

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "tests/contract/test_backend_contract.py", "tests/contract/test_cli_faults.py",
         "tests/contract/test_cli_readings.py",
         "tests/test_vendor_tables.py", "tests/test_layers.py", "tests/test_docs.py",
         "-k", "acme or vendor_tables or cli_vendors_load_no_parser or flags_named_in_prose "
               "or environment_variables_in_docs or code_names_in_docs"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=560)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    # each tool's 11 fault cells, its calls checked and faulted and its garbage cell, the contract
    # and drift cells, the tables and the docs and layer checks
    assert passed >= 2 * (11 + 3) + 8, summary

"""A made-up vendor registered only inside the test joins the contract suite and the fault
matrix from its entry point and its scenario file alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..pluginsite import plugin_site
from .test_cli_faults import FAULTS

FAKE_BACKEND = '''
    """A made-up vendor: a CLI tool printing a JSON list of devices. As docs/architecture.md
    asks, importing it and probing load no parser and no tool runner: the module imports the
    backend class and the tool search only; what reads the tool is imported by sample()."""
    from allsmi.backends._common.clibackend import CliToolBackend
    from allsmi.backends._common.toolpath import VendorTool
    from allsmi.schema.declarations import KubernetesResource

    ENV_VAR = "ALLSMI_ZZ_SMI"


    class ZzBackend(CliToolBackend):
        name = "zzvendor"
        vendor = "zzvendor"
        kind = "npu"
        product = "Zz NPU"
        tool_spec = VendorTool(("zz-smi",), ENV_VAR)
        version_command = ("zz-smi", "--version")
        device_nodes = ("/dev/zz[0-9]*",)
        node_names = ("zz",)
        kubernetes_resources = (KubernetesResource("zz.example/*"),)

        def open(self):
            self._tool = self.require_tool()

        def sample(self):
            import json

            from allsmi.backends._common.runner import backend_errors
            from allsmi.schema import DeviceSample
            tool = self.tool(self._tool)
            with backend_errors():
                rows = tool.parse(tool.run("--json"), json.loads)
            return [DeviceSample(id=f"zz:{r['serial']}", vendor="zzvendor", kind="npu", backend="zzvendor",
                                 index=n, power_watts=r["milliwatts"] / 1000,
                                 memory_total_bytes=r["mib"] * 1024 * 1024, health="ok", processes=None)
                    for n, r in enumerate(rows)]
'''

FAKE_SCENARIOS = '''
    import json
    from pathlib import Path

    from tests.contract import standin
    from tests.contract.fixture_truth import json_value
    from tests.contract.scenario import CliTool, Scenario, expect

    from zz_backend import ENV_VAR, ZzBackend

    DIR = Path(__file__).parent
    ROWS = [{"serial": "A1", "milliwatts": 17500, "mib": 16384}, {"serial": "B2", "milliwatts": 25000, "mib": 8192}]
    (DIR / "zz-two.json").write_text(json.dumps(ROWS))
    (DIR / "zz-cut.json").write_text(json.dumps(ROWS)[:30])


    def _absent(env):
        env.monkeypatch.setenv(ENV_VAR, str(env.tmp_path / "nothing"))
        return ZzBackend()


    def _two(env):
        exe = standin.write_standin(env.tmp_path / "bin", "zz-smi", {"--json": {"file": str(DIR / "zz-two.json")}})
        env.monkeypatch.setenv(ENV_VAR, str(exe))
        return ZzBackend()


    SCENARIOS = [
        Scenario("absent", _absent, None),
        Scenario("two", _two, 2, dict([expect("zz:A1", power_watts=json_value(DIR / "zz-two.json", "serial=A1/milliwatts", "mW"),
                                              memory_total_bytes=json_value(DIR / "zz-two.json", "serial=A1/mib", "MiB"))])),
    ]
    CLI = CliTool(env_var=ENV_VAR, executable="zz-smi", partial=DIR / "zz-cut.json", calls=("--json",),
                  drift={"oldest": "two", "newest": "two", "na-fields": "two", "64-devices": "two"})
'''


@pytest.mark.long(15)
def test_a_new_vendor_joins_from_its_entry_point_and_scenario_file_alone(tmp_path: Path) -> None:
    """A made-up seventh vendor, registered only here: both suites run it, nothing else changes."""
    env, _ = plugin_site(tmp_path, "zzvendor", "[allsmi.backends]\nzzvendor = zz_backend:ZzBackend\n",
                         {"zz_backend": FAKE_BACKEND, "allsmi_scenarios_zzvendor": FAKE_SCENARIOS})
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    # Its probe loads no parser and no tool runner (the rule docs/architecture.md states).
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, json\nfrom zz_backend import ZzBackend\n"
         "ZzBackend().probe()\nprint(json.dumps(sorted(sys.modules)))"],
        env=env, capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(probe.stdout.strip().splitlines()[-1]))
    assert not loaded & {"allsmi.backends._common.runner", "subprocess", "selectors"}, loaded
    # In this process (-n 0): four xdist workers, each importing and collecting the three
    # modules for a few cells, took four times the CPU of the cells themselves.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-k", "zzvendor",
         "tests/contract/test_backend_contract.py", "tests/contract/test_cli_faults.py",
         "tests/contract/test_cli_readings.py"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    # 2 contract cells (+1 scenarios check, +1 readings read from the fixture), every fault cell, 4 drift cells, its call checked
    # against its declaration and faulted alone
    assert passed >= 3 + len(FAULTS) + 4 + 2, summary

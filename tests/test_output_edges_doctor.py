"""``allsmi doctor`` with a plug-in whose ``probe()`` says odd things: the report (text and
``--json``) is written whole, exit 0, never a traceback; unknown is ``null`` / N/A."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .pluginsite import plugin_site

PLUGIN = '''
from allsmi.backend_api import Backend, ProbeResult
from allsmi.schema import DeviceSample


class Odd(Backend):
    name = "zzodd"
    vendor = "zz"

    def probe(self):
        return ProbeResult(True, details={"nan": float("nan"), "raw": b"1.2", "obj": object(),
                                          "inf": [1, float("inf")], "version": "1.0"})

    def open(self):
        pass

    def sample(self):
        return [DeviceSample(id="zz:0", vendor="zz", kind="gpu", backend="zzodd")]


class NoDetails(Odd):
    name = "zznone"

    def probe(self):
        return ProbeResult(False, reason=None, details=None)
'''


def _doctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env, _ = plugin_site(tmp_path, "zzodd",
                         "[allsmi.backends]\nzzodd = zzodd:Odd\nzznone = zzodd:NoDetails\n",
                         {"zzodd": PLUGIN})
    config = tmp_path / "config.toml"
    config.write_text('[backends]\nenabled = ["zzodd", "zznone"]\n')
    return subprocess.run([sys.executable, "-m", "allsmi", "doctor", "--timeout", "2",
                           "--config", str(config), *args], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_doctor_json_with_odd_probe_details_is_strict_json(tmp_path: Path) -> None:
    result = _doctor(tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout, parse_constant=lambda word: refuse_constant(word))
    probes = {b["name"]: b["probe"] for b in report["backends"]}
    details = probes["zzodd"]["details"]
    assert details["nan"] is None and details["inf"] == [1, None]  # unknown, never NaN
    assert details["raw"] == "1.2" and details["version"] == "1.0"
    assert details["obj"].startswith("<object object")
    assert probes["zznone"] == {"available": False, "reason": "", "details": {}}


def test_doctor_text_with_a_probe_without_details_is_written(tmp_path: Path) -> None:
    result = _doctor(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("[+] zzodd") for line in lines)
    assert any(line.startswith("[-] zznone") for line in lines)
    assert "      nan: N/A" in lines and "nan: nan" not in result.stdout


def refuse_constant(word: str) -> None:
    raise AssertionError(f"{word} in strict JSON")


def test_probe_details_that_are_no_mapping_are_said_not_dropped() -> None:
    from types import SimpleNamespace

    from allsmi.cli.doctor import probe_report
    report = probe_report(SimpleNamespace(available=True, reason=None, details=["a", "b"]))
    assert report["details"] == {"(details)": "not a mapping: list"}
    report = probe_report(SimpleNamespace(available=False, reason="x",
                                          details={"tool": b"/opt/\xffbin", "n": float("nan"),
                                                   "at": Path("/opt/x"), "esc": "a\x1bb"}))
    assert report["details"]["tool"] == "/opt/\ufffdbin" and report["details"]["n"] is None
    assert report["details"]["at"] == "/opt/x" and "\x1b" not in report["details"]["esc"]

"""The registry's DeferredBackend: a vendor package's declaration and quick probe stand in for
its backend class, which is imported only once the vendor may be present."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Sequence

import pytest

from allsmi.collection import registry
from allsmi.backend_api import Backend, BackendError, ProbeResult
from allsmi.schema.declarations import VendorDeclaration
from allsmi.schema import DeviceSample

BUILT_IN = ("amd", "furiosa", "gaudi", "nvidia", "rebellions", "tenstorrent")


@pytest.mark.parametrize("name", BUILT_IN)
def test_each_vendor_package_declares_what_its_backend_class_does(name: str) -> None:
    package = registry.vendor_package(registry.entry_point(name))
    assert package is not None, name
    assert package.DECLARATION == registry.load(name).declaration()


def test_declarations_come_from_the_packages_alone() -> None:
    code = ("import sys, json\nfrom allsmi.collection import registry\nd = registry.declarations()\n"
            "print(json.dumps([[x.backend for x in d], "
            "sorted(m for m in sys.modules if m.endswith('.backend'))]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    names, backends = json.loads(out.strip().splitlines()[-1])
    assert set(BUILT_IN) <= set(names)
    assert backends == [], backends


def test_instantiate_defers_every_built_in_vendor() -> None:
    built = {b.display_name: b for b in registry.instantiate()}
    for name in BUILT_IN:
        backend = built[name]
        assert isinstance(backend, registry.DeferredBackend)
        assert backend.declaration() == registry.load(name).declaration()


class _Real(Backend):
    name = "fake"
    vendor = "fake"
    opened = 0

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "", {"seen": str(self.options.get("x"))})

    def open(self) -> None:
        type(self).opened += 1

    def sample(self) -> Sequence[DeviceSample]:
        self.warnings = ["one row skipped"]
        return []


class _Entry:
    def __init__(self, target: Any) -> None:
        self.value = "fake_vendor:FakeBackend"
        self.target = target
        self.loads = 0

    def load(self) -> Any:
        self.loads += 1
        if isinstance(self.target, Exception):
            raise self.target
        return self.target


def _package(answer: ProbeResult | None) -> types.ModuleType:
    module = types.ModuleType("fake_vendor")
    module.DECLARATION = VendorDeclaration(backend="fake", vendor="fake", kind="npu",  # type: ignore[attr-defined]
                                           device_nodes=("/dev/fake[0-9]*",))
    module.quick_probe = lambda options: answer  # type: ignore[attr-defined]
    return module


def test_an_absent_vendor_is_answered_without_its_class() -> None:
    entry = _Entry(_Real)
    absent = ProbeResult(False, "no fake device", {"searched": "/dev/fake*"})
    backend = registry.DeferredBackend("fake", entry, _package(absent))
    assert backend.quick_probe() == absent
    assert backend.probe() == absent
    assert entry.loads == 0 and backend.backend is None
    assert backend.declaration().device_nodes == ("/dev/fake[0-9]*",)


def test_a_vendor_that_may_be_present_gets_its_real_backend() -> None:
    entry = _Entry(_Real)
    backend = registry.DeferredBackend("fake", entry, _package(None), timeout_seconds=2.0,
                                       options={"x": 3})
    assert backend.quick_probe() is None
    probe = backend.probe()
    assert probe.available and probe.details == {"seen": "3"}  # built with the same options
    assert isinstance(backend.backend, _Real) and backend.backend.timeout_seconds == 2.0
    before = _Real.opened
    backend.open()
    backend.warnings = []
    assert list(backend.sample()) == []
    assert _Real.opened == before + 1 and entry.loads == 1
    assert backend.warnings == ["one row skipped"]  # the collector reads them here
    backend.close()


def test_a_class_that_cannot_be_imported_is_reported_not_raised() -> None:
    entry = _Entry(ImportError("No module named 'fake_vendor.backend'"))
    backend = registry.DeferredBackend("fake", entry, _package(None))
    probe = backend.probe()
    assert probe.available and "cannot load backend: ImportError" in probe.details["error"]
    with pytest.raises(BackendError, match="cannot load backend"):
        backend.open()
    assert entry.loads == 1  # not retried every cycle


def test_a_failing_quick_probe_leaves_the_question_to_the_backend() -> None:
    module = _package(None)

    def broken(options: Any) -> ProbeResult | None:
        raise RuntimeError("odd environment")
    module.quick_probe = broken  # type: ignore[attr-defined]
    backend = registry.DeferredBackend("fake", _Entry(_Real), module)
    assert backend.quick_probe() is None
    assert backend.probe().available


def test_a_tool_that_appears_loads_the_backend_and_reads_it(tmp_path: Path) -> None:
    """End to end through the CLI: with ``tt-smi`` found, the Tenstorrent backend is imported
    and run (here a tool that finds no board); without it, it never is."""
    tool = tmp_path / "tt-smi"
    tool.write_text("#!/bin/sh\necho 'No Tenstorrent devices found'\nexit 1\n")
    tool.chmod(0o755)
    code = ("import sys, atexit, json\n"
            "def report():\n"
            "    sys.stderr.write('MODULES=' + json.dumps(sorted(sys.modules)))\n"
            "atexit.register(report)\n"
            "sys.argv = ['allsmi', 'snapshot', '--format', 'json']\n"
            "from allsmi.cli.main import main\nmain()\n")
    declared = {var for d in registry.declarations() for var in d.env_vars}
    env = {k: v for k, v in os.environ.items() if k not in declared}
    for with_tool in (True, False):
        extra = {"ALLSMI_TT_SMI": str(tool)} if with_tool else {}
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=120, env={**env, **extra, "PATH": "/bin:/usr/bin"})
        assert result.returncode == 0, result.stderr
        status = {b["name"]: b for b in json.loads(result.stdout)["backends"]}["tenstorrent"]
        modules = set(json.loads(result.stderr.split("MODULES=")[-1]))
        assert ("allsmi.backends.tenstorrent.backend" in modules) == with_tool, with_tool
        if with_tool:
            assert status["status"] == "ok", status
        else:
            assert status["status"] == "unavailable" and "tt-smi not found" in status["message"]

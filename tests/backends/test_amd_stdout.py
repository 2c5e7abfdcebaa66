"""amdsmi must never write to our stdout: it carries ``snapshot --format json``.

Without libamd_smi.so, ``import amdsmi`` prints two lines to stdout before it
raises ``KeyError``. These tests run fresh interpreters, so that the import
really happens and its output really goes to the process's fd 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from allsmi.backends.amd import loader
from allsmi.backends.amd.loader import AmdsmiLoadError, load_amdsmi, quiet_stdout

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # Point every ROCm search path at an empty folder; ld.so's own paths remain.
    env["ROCM_PATH"] = env["ROCM_HOME"] = str(tmp_path)
    env.pop("LD_LIBRARY_PATH", None)
    # With PYTHONUNBUFFERED, CPython makes C stdio unbuffered too; the real
    # case (a pipe, fully buffered) is the one that can leak later.
    env.pop("PYTHONUNBUFFERED", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_probe_in_a_fresh_process_prints_only_what_we_print(tmp_path: Path) -> None:
    result = _run("""
        import json, sys
        from allsmi.backends.amd import AmdBackend
        imported_early = "amdsmi" in sys.modules
        backend = AmdBackend()
        probe = backend.probe()
        try:
            backend.open()
            opened = "yes"
        except Exception as exc:
            opened = type(exc).__name__ + ": " + str(exc)
        backend.close()
        print(json.dumps({"imported_early": imported_early, "available": probe.available,
                          "reason": probe.reason, "open": opened}))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout               # nothing but our JSON line
    report = json.loads(lines[0])
    assert result.stdout == json.dumps(report) + "\n"
    assert report["imported_early"] is False            # importing the backend loads no amdsmi
    if report["available"]:
        pytest.skip("libamd_smi.so is installed on this machine")
    assert report["reason"] == loader.LIBRARY_MISSING_REASON
    assert report["open"] == "BackendUnavailable: " + loader.LIBRARY_MISSING_REASON
    assert "Unable to find libamd_smi.so" not in result.stdout + result.stderr


def test_quiet_stdout_catches_python_fd_and_buffered_c_output(tmp_path: Path) -> None:
    result = _run("""
        import ctypes, os, sys
        from allsmi.backends.amd.loader import quiet_stdout
        libc = ctypes.CDLL(None)
        print("before", flush=True)
        with quiet_stdout() as captured:
            print("python print")
            sys.__stdout__.write("dunder stdout\\n")
            os.write(1, b"raw fd write\\n")
            libc.printf(b"c printf without newline")   # sits in libc's buffer: a pipe is fully buffered
        print("after")
        sys.stderr.write(repr(captured.text))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "before\nafter\n"
    for text in ("python print", "dunder stdout", "raw fd write", "c printf without newline"):
        assert text in result.stderr


def test_quiet_stdout_restores_fd_1_after_an_exception(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError):
        with quiet_stdout():
            os.write(1, b"hidden\n")
            raise RuntimeError("boom")
    os.write(1, b"visible\n")
    out, _ = capfd.readouterr()
    assert out == "visible\n"


def test_load_reports_the_missing_library(capfd: pytest.CaptureFixture[str]) -> None:
    try:
        load_amdsmi()
    except AmdsmiLoadError as exc:
        assert exc.reason == loader.LIBRARY_MISSING_REASON
        assert "Unable to find libamd_smi.so" in exc.output
    else:
        pytest.skip("libamd_smi.so is installed on this machine")
    out, _ = capfd.readouterr()
    assert out == ""


def test_load_reports_a_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)     # makes `import amdsmi` fail
    with pytest.raises(AmdsmiLoadError, match="amdsmi Python package is not installed"):
        load_amdsmi()


def test_an_uninstalled_amdsmi_is_reported_without_capturing_stdout(monkeypatch) -> None:
    """A plain install (no amdsmi) says so without the capture's temporary file and fd juggling."""
    import importlib.util
    import sys as _sys

    from allsmi.backends.amd import loader

    real = importlib.util.find_spec
    monkeypatch.delitem(_sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "amdsmi" else real(name, *a))

    def no_capture():
        raise AssertionError("stdout captured for a package that is not installed")
    monkeypatch.setattr(loader, "quiet_stdout", no_capture)
    with pytest.raises(loader.AmdsmiLoadError) as caught:
        loader.load_amdsmi()
    assert "amdsmi Python package is not installed" in str(caught.value)
    assert "pip install 'allsmi[amd]'" in str(caught.value)

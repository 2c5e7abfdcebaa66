"""The shared parts of the command-line backends (backends/_common/): finding the tool, reading
JSON from stdout, reading cells against the declared ranges, running calls at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from allsmi.schema import units
from allsmi.backends._common.cells import CellReader, index_key, int_cell, shorten, text_of
from allsmi.backends._common.clibackend import CliToolBackend
from allsmi.backends._common.jsonout import JsonOutputError, read_json
from allsmi.backends._common.runner import ToolError, run_concurrently
from allsmi.backends._common.toolpath import VendorTool
from allsmi.schema.fields import BY_FIELD


def _exe(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


# --- VendorTool and CliToolBackend -----------------------------------------------------------

TOOL = VendorTool(("zz-smi", "zz-stat"), "ALLSMI_ZZ_SMI", ("/nonexistent/zz",))


class ZzBackend(CliToolBackend):
    tool_spec = TOOL
    name = vendor = "zz"
    kind = "npu"

    def open(self) -> None:
        self.require_tool()

    def sample(self) -> list:  # type: ignore[override]
        return []

    def close(self) -> None:
        return None


def test_the_current_name_wins_over_the_old_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALLSMI_ZZ_SMI", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    old = _exe(tmp_path / "vendor", "zz-stat")
    assert TOOL.find([str(tmp_path / "vendor")]) == str(old)
    new = _exe(tmp_path / "vendor", "zz-smi")
    assert TOOL.find([str(tmp_path / "vendor")]) == str(new)
    assert TOOL.find() is None  # the declared directories hold neither
    assert TOOL.missing() == ("neither zz-smi nor zz-stat found on PATH or in /nonexistent/zz "
                              "(set ALLSMI_ZZ_SMI to the full path of either)")


def test_an_override_that_is_no_executable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _exe(tmp_path / "bin", "zz-smi")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("ALLSMI_ZZ_SMI", str(tmp_path / "nothing"))
    assert TOOL.find() is None  # no silent fall-back to PATH
    assert TOOL.missing() == f"ALLSMI_ZZ_SMI={str(tmp_path / 'nothing')!r} is not an executable file"
    probe = ZzBackend().probe()
    assert not probe.available and probe.reason == TOOL.missing()


def test_the_probe_looks_and_reports_path_and_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _exe(tmp_path / "bin", "zz-smi")
    monkeypatch.delenv("ALLSMI_ZZ_SMI", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    backend = ZzBackend()
    assert backend.probe().details == {"tool": str(exe)}
    backend.tool_version = "1.2.3"
    assert backend.probe().details == {"tool": str(exe), "tool_version": "1.2.3"}
    assert backend.tool(str(exe)).timeout == backend.timeout_seconds


def test_the_probe_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: object, search_dirs: object = None) -> str:
        raise PermissionError("PATH unreadable")

    monkeypatch.setattr(VendorTool, "find", broken)
    probe = ZzBackend().probe()
    assert not probe.available and probe.reason == "cannot look for zz-smi/zz-stat: PATH unreadable"


# --- read_json ---------------------------------------------------------------------------------

def _devices(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("devices"), list)


def test_a_whole_document_is_read_as_it_is() -> None:
    assert read_json(' {"devices": []}\n', "zz-smi -j") == ({"devices": []}, [])
    assert read_json("[1, 2]", "zz-smi -j") == ([1, 2], [])


def test_text_around_the_wanted_document_is_ignored_with_a_note() -> None:
    text = 'Warning: deprecated\n{"other": 1}\n\x1b[32m{"devices": [1]}\x1b[0m\ntrailer\n'
    value, notes = read_json(text, "zz-smi -j", find=_devices)
    assert value == {"devices": [1]}
    assert notes == ["ignored 40 characters of non-JSON text around zz-smi -j's JSON"]
    with pytest.raises(JsonOutputError, match="did not print JSON"):
        read_json(text, "zz-smi -j")  # without find, surrounding text is no document


def test_a_list_inside_other_text_is_found() -> None:
    def rows(value: object) -> bool:
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)

    value, notes = read_json('WARNING: x\n[{"a": 1}]', "zz-ls -j", find=rows)
    assert value == [{"a": 1}] and notes == ["ignored 11 characters of non-JSON text around zz-ls -j's JSON"]
    # A list inside a document that is not the wanted one is not taken for it.
    value, _ = read_json('[INFO] {"ids": [{"b": 2}]}\n[{"a": 1}]\n', "zz-ls -j", find=rows)
    assert value == [{"a": 1}]
    # A banner in brackets before a document cut short: still truncated, not "no JSON".
    with pytest.raises(JsonOutputError, match="^zz-ls -j printed truncated JSON"):
        read_json('[INFO] starting\n[{"a": 1}, {"a', "zz-ls -j", find=rows)


@pytest.mark.parametrize("text", ['{"devices": [{"name": "A', '{"devices": [1, 2',
                                  'banner\n{"devices": [{"name": "A'])
def test_a_document_cut_short_is_truncated(text: str) -> None:
    with pytest.raises(JsonOutputError, match=r"^zz-smi -j printed truncated JSON.*not JSON"):
        read_json(text, "zz-smi -j", find=_devices)


@pytest.mark.parametrize(("text", "message"), [
    ("", "^zz-smi -j printed nothing on stdout$"),
    ("  \n\x1b[0m\n", "^zz-smi -j printed nothing on stdout$"),
    ("Segmentation fault (core dumped)\n", r"^zz-smi -j did not print JSON \(not JSON: .*'Segmentation fault"),
    ('{"devices": [1] oops}', "did not print JSON"),
])
def test_no_json_is_said_so(text: str, message: str) -> None:
    with pytest.raises(JsonOutputError, match=message):
        read_json(text, "zz-smi -j", find=_devices)
    assert issubclass(JsonOutputError, ValueError)  # Tool.parse turns it into ToolOutputError


# --- cells ---------------------------------------------------------------------------------------

def test_identity_cells() -> None:
    assert [text_of(v) for v in (" rbln0 ", 7, "N/A", None, True, 1.5)] == ["rbln0", "7", None, None, None, None]
    assert [int_cell(v) for v in (5, "5", "5.7", "x", True, None)] == [5, 5, None, None, None, None]
    assert [index_key(v) for v in (0, "0", " 3 ", "npu1", False, "N/A")] == [0, 0, 3, "npu1", None, None]


def test_shorten_flattens_and_cuts() -> None:
    assert shorten("a\n  b\tc") == "a b c"
    assert shorten("x" * 100, 10) == "x" * 9 + "…" and len(shorten("x" * 100, 10)) == 10
    assert shorten({"k": 1}) == "{'k': 1}"


def test_cells_out_of_the_declared_range_are_unknown_with_a_warning() -> None:
    warnings: list[str] = []
    cells = CellReader("npu0", warnings)
    top = BY_FIELD["temperature_celsius"].maximum
    assert top is not None
    assert cells.measure("45C", 45.0, "temperature", "temperature_celsius") == 45.0
    assert cells.measure("999C", 999.0, "temperature", "temperature_celsius") is None
    assert cells.measure(f"{top}C", top, "temperature", "temperature_celsius") == top
    assert cells.measure("hot", None, "temperature", "temperature_celsius") is None
    assert cells.measure("N/A", None, "temperature", "temperature_celsius") is None  # no value: no warning
    assert cells.plausible(-1.0, "power", "power_watts") is None
    assert cells.plausible(0.5, "power limit", "power_limit_watts", minimum=1.0) is None
    assert cells.plausible(4.0, "voltage", maximum=5.0) == 4.0 and cells.plausible(6.0, "voltage", maximum=5.0) is None
    assert cells.size("-5", "memory.used") is None and cells.size("2", "memory.used", default_unit="mib") == 2 << 20
    assert cells.number("ERR!", units.parse_power_watts, "power.draw value", "power_watts") is None
    assert cells.number("35 W", units.parse_power_watts, "power.draw value", "power_watts") == 35.0
    assert warnings == ["npu0: implausible temperature '999C'; reported as unknown",
                        "npu0: unreadable temperature 'hot'; reported as unknown",
                        "npu0: implausible power -1.0; reported as unknown",
                        "npu0: implausible power limit 0.5; reported as unknown",
                        "npu0: implausible voltage 6.0; reported as unknown",
                        "npu0: implausible memory.used '-5'; reported as unknown",
                        "npu0: unreadable power.draw value 'ERR!'; reported as unknown"]


# --- run_concurrently ----------------------------------------------------------------------------

def test_calls_run_at_once_and_failures_come_back_in_place() -> None:
    barrier = threading.Barrier(3, timeout=5)

    def meet(value: str) -> str:
        barrier.wait()  # returns only when all three calls are running at the same time
        return value

    def fail() -> str:
        barrier.wait()
        raise ToolError("zz-smi exited with status 3")

    started = time.monotonic()
    got = run_concurrently({"a": lambda: meet("A"), "b": lambda: meet("B"), "c": fail})
    assert time.monotonic() - started < 5
    assert got["a"] == "A" and got["b"] == "B"
    assert isinstance(got["c"], ToolError) and str(got["c"]) == "zz-smi exited with status 3"
    assert list(got) == ["a", "b", "c"]
    assert run_concurrently({"only": lambda: threading.current_thread().name}) == {
        "only": threading.current_thread().name}


def test_presence_matches_paths_as_glob_does(tmp_path: Path) -> None:
    """The device-node patterns are matched without importing glob, with glob's answers."""
    import glob

    from allsmi.backends._common.presence import matching
    for name in ("nvidia0", "nvidia12", "nvidiactl", ".nvidia3", "renderD128", "card0"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "accel0").write_text("")
    (tmp_path / "link9").symlink_to(tmp_path / "missing")  # a dangling link still matches
    patterns = ["nvidia[0-9]*", "nvidiactl", "nvidia*", ".nvidia*", "renderD*", "link[0-9]", "none*",
                "none", "sub/accel[0-9]*", "s*/accel*", "sub/", "missing/x*", "[", "card[!1]"]
    for pattern in patterns:
        full = str(tmp_path / pattern)
        assert sorted(matching(full)) == sorted(glob.glob(full)), pattern


def test_the_quick_probes_import_no_glob() -> None:
    import subprocess
    import sys
    code = ("import sys\n"
            "from allsmi.backends._common import presence\n"
            "presence.any_node(('/dev/kfd', '/dev/dri/renderD*', '/dev/nvidia[0-9]*'))\n"
            "presence.library_findable('libamd_smi.so')\n"
            "print('glob' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    assert out == ["False"]


# --- all-ones sentinels in tool cells ---------------------------------------------------------

@pytest.mark.parametrize(("raw", "sentinel"), [
    (4294967295, True), ("4294967295", True), ("4294967295uW", True), (" 18446744073709551615 ", True),
    ("0xFFFFFFFF", True), ("2147483647", True), (4294967295.0, True), ("65535 W", True),
    ("4294967294", False), ("42.5 W", False), ("N/A", False), (True, False), ("-1", False),
])
def test_is_sentinel(raw: object, sentinel: bool) -> None:
    from allsmi.backends._common.cells import is_sentinel
    assert is_sentinel(raw) is sentinel


def test_sentinel_cells_are_unknown_whatever_they_convert_to() -> None:
    """4294967295 µW is 4294.97 W, inside the power range: still the tool's "no reading"."""
    from allsmi.backends._common.cells import whole_cell
    warnings: list[str] = []
    read = CellReader("dev0", warnings)
    assert read.measure("4294967295uW", units.parse_power_watts("4294967295uW", "uw"), "power",
                        "power_watts") is None
    assert read.measure("65535", 65535.0, "power", "power_watts") is None
    assert read.size("18446744073709551615", "memory") is None
    assert whole_cell("4294967295", "dev0", "ecc", warnings) is None
    assert whole_cell(0xFFFFFFFFFFFFFFFF, "dev0", "bytes", warnings) is None
    assert warnings == []
    # 65535 is an ordinary byte or MiB count, and a counter may pass through all ones
    assert read.measure("65535", 65535 * units.MIB, "memory", "memory_used_bytes") == 65535 * units.MIB
    assert read.size("65535", "memory") == 65535
    assert whole_cell("65535", "dev0", "ecc", warnings) == 65535
    assert whole_cell("4294967295", "dev0", "heartbeat", warnings, sentinels=False) == 4294967295


# --- the locale a tool prints numbers in ------------------------------------------------------

def test_tools_print_numbers_in_the_c_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a German locale a tool that honours it prints ``45,5``: tools run with
    ``LC_NUMERIC=C``, the user's ``LC_ALL`` kept for everything else (as ``LANG``)."""
    import sys

    from allsmi.backends._common.runner import run_tool, tool_environment
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("LC_TIME", "fr_FR.UTF-8")
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    env = tool_environment()
    assert (env["LC_NUMERIC"], env["LANG"], "LC_ALL" in env, "LC_TIME" in env) == \
        ("C", "de_DE.UTF-8", False, False)
    assert tool_environment({"LANG": "de_DE.UTF-8", "LC_TIME": "fr_FR"}) == {
        "LANG": "de_DE.UTF-8", "LC_TIME": "fr_FR", "LC_NUMERIC": "C"}
    script = "import os; print(os.environ.get('LC_ALL'), os.environ.get('LC_NUMERIC'))"
    result = run_tool([sys.executable, "-c", script], timeout=10)
    assert result.stdout.split() == ["None", "C"]
    from allsmi.backends._common.stream import LineStream
    lines: list[str] = []
    stream = LineStream([sys.executable, "-c", script], on_line=lines.append)
    stream.start()
    deadline = time.monotonic() + 10
    while not lines and time.monotonic() < deadline:
        time.sleep(0.02)
    stream.close()
    assert lines and lines[0].split() == ["None", "C"]

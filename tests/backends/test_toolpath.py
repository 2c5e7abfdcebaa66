"""backends/_common/toolpath.which answers as shutil.which does (it exists so probes need no shutil)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from allsmi.backends._common.toolpath import find_tool, which

pytestmark = pytest.mark.skipif(os.name != "posix", reason="elsewhere shutil.which answers itself")


@pytest.fixture()
def layout(tmp_path: Path) -> Path:
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    tool = tmp_path / "b" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (tmp_path / "a" / "tool").write_text("not executable\n")          # found by name, not runnable
    (tmp_path / "a" / "tool").chmod(0o644)
    (tmp_path / "c" / "tool").mkdir()                                # a directory of that name
    later = tmp_path / "c" / "other"
    later.write_text("#!/bin/sh\n")
    later.chmod(0o755)
    return tmp_path


@pytest.mark.parametrize("path", [
    "{a}:{b}:{c}", "{c}:{b}", "{a}:{c}", "{c}:{c}:{b}", "", ":", "{b}:", "::{b}", "/nonexistent:{b}",
    None,
])
@pytest.mark.parametrize("name", ["tool", "other", "missing", "sh", "{b}/tool", "{a}/tool", "./tool"])
def test_which_agrees_with_shutil(layout: Path, monkeypatch: pytest.MonkeyPatch,
                                  path: str | None, name: str) -> None:
    dirs = {k: str(layout / k) for k in ("a", "b", "c")}
    monkeypatch.chdir(layout / "b")
    if path is None:
        monkeypatch.delenv("PATH", raising=False)
    else:
        monkeypatch.setenv("PATH", path.format(**dirs))
    executable = name.format(**dirs)
    assert which(executable) == shutil.which(executable)


def test_find_tool_order(layout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(layout / "a"))
    monkeypatch.delenv("ALLSMI_TEST_TOOL", raising=False)
    assert find_tool("tool", "ALLSMI_TEST_TOOL") is None
    assert find_tool("tool", "ALLSMI_TEST_TOOL", [str(layout / "c"), str(layout / "b")]) == \
        str(layout / "b" / "tool")
    monkeypatch.setenv("ALLSMI_TEST_TOOL", str(layout / "a" / "tool"))   # override not runnable
    assert find_tool("tool", "ALLSMI_TEST_TOOL", [str(layout / "b")]) is None
    monkeypatch.setenv("ALLSMI_TEST_TOOL", sys.executable)
    assert find_tool("tool", "ALLSMI_TEST_TOOL") == sys.executable

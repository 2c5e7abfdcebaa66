"""Which files allsmi writes for other readers (0644) and which stay owner-only (0600).

node_exporter's textfile collector runs as another user (``prometheus``), so
what is written for it must be world-readable whatever the umask; everything
else (snapshots that may list processes' users and command lines, billing
exports) is owner-only.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from .conftest import allsmi_exe, require_tool, run_allsmi


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def umask_077() -> None:
    os.umask(0o077)


def run_strict(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI under ``umask 077``, the strictest a cron job or unit may have."""
    import sys
    return subprocess.run([sys.executable, "-m", "allsmi", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, preexec_fn=umask_077,  # noqa: PLW1509
                          env={**os.environ, "XDG_CONFIG_HOME": str(cwd)})


def test_snapshot_prometheus_file_is_world_readable(tmp_path: Path) -> None:
    target = tmp_path / "allsmi.prom"
    target.write_text("old\n")
    target.chmod(0o600)  # left by an older allsmi: replaced by a readable file
    out = run_strict("snapshot", "--simulate", "mixed", "--format", "prometheus", "-o", str(target),
                     cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert mode(target) == 0o644
    text = target.read_text()
    assert "allsmi_device_info{" in text and "command=" not in text  # no process details
    promtool = require_tool("promtool", "prometheus")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".allsmi.prom")] == []


def test_snapshot_json_and_csv_files_are_owner_only(tmp_path: Path) -> None:
    for fmt in ("json", "csv"):
        target = tmp_path / f"snap.{fmt}"
        out = run_allsmi("snapshot", "--simulate", "mixed", "--format", fmt, "-o", str(target))
        assert out.returncode == 0, out.stderr
        assert mode(target) == 0o600


def test_export_textfile_readable_and_bill_owner_only(tmp_path: Path) -> None:
    out = run_strict("export", "--simulate", "mixed", "--since", "2026-01-01T00:00:00Z",
                     "--until", "2026-01-01T00:10:00Z", "-o", "bill.csv", "--textfile",
                     "allsmi_export.prom", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert mode(tmp_path / "allsmi_export.prom") == 0o644
    assert mode(tmp_path / "bill.csv") == 0o600


def test_output_to_a_fifo_writes_through_it_and_leaves_it_a_fifo(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``--output /dev/null`` (or any device or pipe) is written to, never renamed over: as root,
    a rename would have replaced the device node with a regular file."""
    import json as _json
    import os as _os
    import stat as _stat
    import subprocess as _subprocess
    import threading

    from .conftest import allsmi_exe

    fifo = tmp_path / "pipe"
    _os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = _subprocess.run(allsmi_exe() + ["snapshot", "--simulate", "mixed", "--format", "json",
                                            "--output", str(fifo)],
                             capture_output=True, text=True, timeout=120)
    reader.join(timeout=30)
    assert result.returncode == 0, result.stderr
    assert _stat.S_ISFIFO(_os.stat(fifo).st_mode)
    assert _json.loads(got[0])["schema_version"] == 1


@pytest.mark.parametrize("args", [
    ["snapshot", "--simulate", "mixed"], ["doctor"], ["backends"], ["--version"],
    # two hours replayed, not today's (up to a day's replay, 2.4 s of CPU late in the day)
    ["export", "--simulate", "mixed", "--since", "2026-11-02T09:00:00Z",
     "--until", "2026-11-02T11:00:00Z"],
], ids=["snapshot", "doctor", "backends", "--version", "export"])
def test_a_closed_standard_output_is_a_failure_not_a_silent_success(args: list[str]) -> None:
    """Started with fd 1 closed (``allsmi snapshot >&-``), Python drops every print: a command
    exited 0 having written nothing (``doctor``, ``backends``), or with a traceback
    (``snapshot``, ``export``). Each now says it could not write, and exits 1."""
    result = subprocess.run(allsmi_exe() + args, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert result.returncode == 1, result.stderr
    assert result.stderr == "allsmi: cannot write the output to standard output: standard output is closed\n"


def test_a_closed_standard_output_does_not_stop_a_command_that_writes_a_file(tmp_path) -> None:
    out = tmp_path / "s.json"
    result = subprocess.run(allsmi_exe() + ["snapshot", "--simulate", "mixed", "--output", str(out)],
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            timeout=120, preexec_fn=lambda: os.close(1))
    assert result.returncode == 0 and out.read_text().startswith("{"), result.stderr

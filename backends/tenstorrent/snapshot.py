"""Getting one JSON snapshot out of ``tt-smi``, whichever version is installed.

* tt-smi 3.0.5 and later print the snapshot to stdout for ``-s``;
  ``--snapshot_no_tty`` turns off progress bars and colour when there is no
  terminal. That is the first command tried.
* Older tt-smi does not know ``--snapshot_no_tty`` (argparse exits 2 with
  "unrecognized arguments") and writes ``-s`` snapshots to a file, printing
  "Saved tt-smi log to: PATH". For those, the reader switches to
  ``tt-smi -s -f <private temp file>``, reads the file and deletes it, so no
  snapshot files pile up in the user's home directory.

stdout may carry a progress line or ANSI colour around the JSON; the first
JSON object holding a ``device_info`` list is taken.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from typing import Any

from allsmi.backends._common.cells import shorten
from allsmi.backends._common.jsonout import JsonOutputError, read_json
from allsmi.backends._common.runner import (DEFAULT_MAX_OUTPUT, Tool, ToolError, ToolFailed, ToolResult,
                                             says_no_devices)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SAVED = re.compile(r"Saved tt-smi log to:\s*(?P<path>\S+)")
_UNKNOWN_FLAG = re.compile(r"unrecognized arguments?:.*snapshot_no_tty", re.IGNORECASE | re.DOTALL)
#: What tt-smi says when there is nothing to report on: no hardware, not a fault
#: (only when that one line is its whole output; see ``says_no_devices``).
NO_HARDWARE = re.compile(
    r"no tenstorrent (driver|devices?|chips?|boards?)|no (tenstorrent )?(devices?|chips?) (were )?"
    r"(found|detected)", re.IGNORECASE)

STDOUT_MODE = "stdout"
FILE_MODE = "file"


def _is_snapshot(value: Any) -> bool:
    return isinstance(value, dict) and "device_info" in value


def extract_snapshot(text: str) -> dict[str, Any]:
    """The snapshot object inside tt-smi's stdout; :class:`ValueError` if there is none.

    Progress lines and colour around it are expected from tt-smi 3.0.5 on, so they are
    dropped without a note.
    """
    snapshot, _ = read_json(text, "tt-smi", find=_is_snapshot)
    if not _is_snapshot(snapshot):
        raise JsonOutputError(f"tt-smi printed JSON without device_info: {shorten(text, 80)!r}")
    return snapshot


class SnapshotReader:
    """Runs tt-smi once per call and returns the decoded snapshot, remembering what worked."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.mode = STDOUT_MODE

    def close(self) -> None:
        """Nothing is kept open: a file-mode snapshot's private directory lives for one read."""

    def read(self, timeout: float, warnings: list[str]) -> dict[str, Any] | None:
        """One snapshot; ``None`` when tt-smi positively reports no driver or no devices.

        Raises :class:`ToolTimeout` (the child was killed), :class:`ToolError`
        (could not run, exited non-zero or died: the message names the status or
        signal and the first line of its output) or :class:`ValueError` (ran,
        but printed something that is not a snapshot).
        """
        tool = Tool(self.tool, timeout)
        started = time.monotonic()
        if self.mode == STDOUT_MODE:
            args: tuple[str, ...] = ("-s", "--snapshot_no_tty")
            result = tool.run(*args, ok_codes=range(-64, 256))
            if result.returncode == 2 and _UNKNOWN_FLAG.search(result.stderr + result.stdout):
                # Pre-3.0.5 tt-smi: no such flag, and -s writes a file instead.
                self.mode = FILE_MODE
                return self.read(max(0.1, timeout - (time.monotonic() - started)), warnings)
            return self._interpret(tool, args, result, None)
        # A private directory (0700) for each read, removed after it, whatever happened: one
        # kept between reads outlived a process that never closed its backend.
        with tempfile.TemporaryDirectory(prefix="allsmi-tt-smi-") as private:
            path = os.path.join(private, "snapshot.json")
            args = ("-s", "-f", path)
            return self._interpret(tool, args, tool.run(*args, ok_codes=range(-64, 256)), path)

    def _interpret(self, tool: Tool, args: tuple[str, ...], result: ToolResult,
                   our_file: str | None) -> dict[str, Any] | None:
        if says_no_devices(result, NO_HARDWARE):
            return None
        if result.returncode != 0:
            raise ToolFailed(tool.command(args), result)
        snapshot: dict[str, Any] | None = None
        problem: ValueError | None = None
        try:
            snapshot = extract_snapshot(result.stdout)
        except ValueError as exc:
            problem = exc
        if snapshot is None:
            saved = _SAVED.search(_ANSI.sub("", result.stdout + "\n" + result.stderr))
            candidates = [p for p in (our_file, saved.group("path") if saved else None) if p]
            for path in candidates:
                if os.path.isfile(path):
                    snapshot = self._read_file(path)
                    if our_file is None:
                        # This version writes files for -s: use a private file from now on.
                        self.mode = FILE_MODE
                    break
        if snapshot is None:
            raise problem or ValueError("tt-smi printed no snapshot")
        return snapshot

    @staticmethod
    def _read_file(path: str) -> dict[str, Any]:
        with open(path, "rb") as handle:
            data = handle.read(DEFAULT_MAX_OUTPUT + 1)
        if len(data) > DEFAULT_MAX_OUTPUT:
            raise ToolError(f"tt-smi snapshot file {path} is larger than {DEFAULT_MAX_OUTPUT} bytes")
        return extract_snapshot(data.decode("utf-8", "replace"))

"""The one stand-in builder: a route-driven fake vendor CLI written into a test's tmp_path.

:func:`write_standin` copies ``fixtures/standin.py`` under the tool's name with
this interpreter in its shebang and writes its route table (see that file's
docstring for the route keys: ``file``, ``text``, ``stderr``, ``rc``, ``hang``,
``sleep``, ``die``, ``abort``, ``grandchild``, ``ignore_term``, ``partial``...).
Every vendor's scenarios and the fault matrix build their stand-ins with it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from .scenario import FIXTURES

STANDIN_SOURCE = FIXTURES / "standin.py"


def route(fixture_dir: Path | None = None, fixture: str | None = None, **behaviour: Any) -> dict[str, Any]:
    """One route: print ``fixture_dir/fixture`` (if given) and/or behave as ``behaviour`` says."""
    spec = dict(behaviour)
    if fixture is not None:
        spec["file"] = str((fixture_dir or FIXTURES) / fixture)
    return spec


def write_standin(directory: Path, executable: str, routes: Mapping[str, Mapping[str, Any]], *,
                  default: Mapping[str, Any] | None = None, placeholders: Iterable[str] = (),
                  unknown: str = "clap") -> Path:
    """Write an executable stand-in named ``executable`` answering ``routes``; return its path.

    ``routes`` maps the exact argument string to a route; ``default`` answers
    anything else (without it, an unknown argument fails like ``unknown``,
    ``clap`` or ``argparse``, does). Calls are logged to ``calls.log`` next to it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / executable
    exe.write_text(f"#!{sys.executable} -S\n" + STANDIN_SOURCE.read_text())
    exe.chmod(0o755)
    config = {"routes": {k: dict(v) for k, v in routes.items()},
              "default": dict(default) if default is not None else None,
              "placeholders": list(placeholders), "unknown": unknown,
              "log": str(directory / "calls.log")}
    Path(str(exe) + ".json").write_text(json.dumps(config))
    return exe


def calls(directory: Path) -> list[str]:
    """The argument strings the stand-ins in ``directory`` were called with, in order."""
    log = directory / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def pids(pidfile: Path) -> list[int]:
    """Pids the stand-in (and its grandchildren) wrote to ``pidfile``."""
    try:
        return [int(line) for line in pidfile.read_text().split()]
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

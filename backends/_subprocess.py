"""Running vendor command-line tools safely.

Every vendor CLI call in allsmi goes through :func:`run_tool`: an argument
list (never a shell), a timeout, an output cap, both pipes drained while the
child runs (so a chatty stderr cannot deadlock it), the whole process group
killed on timeout, and the child always reaped.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

#: Default cap on what one call may print; vendor JSON for 64 devices is far below.
DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024


class ToolError(Exception):
    """The tool could not be run or failed; the message says why."""


class ToolTimeout(ToolError, TimeoutError):
    """The tool did not finish in time and was killed."""


@dataclass(frozen=True)
class ToolResult:
    """What a finished tool call produced."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    truncated: bool
    duration_seconds: float


def find_tool(executable: str, env_var: str | None = None,
              extra_dirs: Iterable[str] = ()) -> str | None:
    """Locate a vendor tool: the env override, then PATH, then the vendor's usual dirs.

    An env override that does not point at an executable file returns ``None``
    (the caller reports it) rather than silently falling back to PATH.
    """
    if env_var:
        override = os.environ.get(env_var)
        if override:
            return override if os.path.isfile(override) and os.access(override, os.X_OK) else None
    found = shutil.which(executable)
    if found:
        return found
    for directory in extra_dirs:
        candidate = os.path.join(directory, executable)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def describe_missing(executable: str, env_var: str | None) -> str:
    """A user-facing reason for a tool that :func:`find_tool` did not find."""
    if env_var and os.environ.get(env_var):
        return f"{env_var}={os.environ[env_var]!r} is not an executable file"
    hint = f" (set {env_var} to its full path)" if env_var else ""
    return f"{executable} not found on PATH or in the vendor's install directories{hint}"


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill a child started with ``start_new_session=True`` and its descendants, then reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                proc.kill()
            except ProcessLookupError:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable child
        pass
    for stream in (proc.stdout, proc.stderr, proc.stdin):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def run_tool(argv: Sequence[str], timeout: float,
             max_output: int = DEFAULT_MAX_OUTPUT,
             env: dict[str, str] | None = None) -> ToolResult:
    """Run ``argv`` and return its output; raise :class:`ToolError` if it cannot run.

    Output past ``max_output`` bytes (per stream) stops the child and marks the
    result ``truncated``. A non-zero exit is *not* an exception: callers decide
    (some tools exit non-zero with usable output). On timeout the process group
    is killed and :class:`ToolTimeout` raised.
    """
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, env=env, close_fds=True)
    except OSError as exc:
        raise ToolError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    sizes = {"stdout": 0, "stderr": 0}
    truncated = False
    deadline = started + timeout
    sel = selectors.DefaultSelector()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
        open_streams = 2
        while open_streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                kill_group(proc)
                raise ToolTimeout(f"{os.path.basename(argv[0])} did not finish within {timeout:g} s")
            for key, _ in sel.select(timeout=min(remaining, 0.5)):
                data = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                if not data:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                name = key.data
                room = max_output - sizes[name]
                if room > 0:
                    chunks[name].append(data[:room])
                    sizes[name] += min(len(data), room)
                if len(data) > room:
                    truncated = True
            if truncated:
                break
        if truncated:
            kill_group(proc)
        else:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise ToolTimeout(f"{os.path.basename(argv[0])} did not exit within {timeout:g} s") from None
    finally:
        sel.close()
        kill_group(proc)  # no-op for a reaped child; guarantees no zombie on any path
    return ToolResult(
        argv=tuple(argv), returncode=proc.returncode if proc.returncode is not None else -9,
        stdout=b"".join(chunks["stdout"]).decode("utf-8", "replace"),
        stderr=b"".join(chunks["stderr"]).decode("utf-8", "replace"),
        truncated=truncated, duration_seconds=time.monotonic() - started)

"""Running vendor command-line tools safely, and turning their failures into errors.

Every vendor CLI call in allsmi goes through :func:`run_tool`: an argument
list (never a shell), a timeout, an output cap, both pipes drained while the
child runs (so a chatty stderr cannot deadlock it), and the whole process group
killed with SIGKILL and reaped when the call ends, so neither a child that
ignores SIGTERM nor a grandchild still holding the pipes outlives it.

Backends use :class:`Tool` on top of it: one located executable, run with
:meth:`Tool.run`, which maps every way a run can go wrong to one exception
with a message a user can act on:

======================================  =============================================
what happened                           exception (message)
======================================  =============================================
cannot start (ENOENT, EACCES, ...)      :class:`ToolError` ("cannot run X: ...")
no answer within the timeout            :class:`ToolTimeout` ("X did not finish ...")
more output than the cap                :class:`ToolTruncated`
exit status not in ``ok_codes``         :class:`ToolFailed` ("X exited with status 3: <stderr line>")
killed by a signal                      :class:`ToolFailed` ("X was killed by signal SIGSEGV (11): ...")
output the parser cannot use            :class:`ToolOutputError` (via :meth:`Tool.parse`)
======================================  =============================================

:func:`backend_errors` turns any of them into the :class:`BackendError` the
collector reports (``timeout`` for :class:`ToolTimeout`, ``error`` otherwise).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from allsmi.backend_api import BackendError

# Finding a tool needs none of the modules that running one does (a probe only looks).
from .toolpath import describe_missing, find_tool  # noqa: F401 - re-exported

if TYPE_CHECKING:
    import subprocess

T = TypeVar("T")

#: Default cap on what one call may print; vendor JSON for 64 devices is far below.
DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024
#: After the tool itself has exited, how long a grandchild may keep its pipes open
#: before the group is killed and the output taken as complete.
PIPE_GRACE_SECONDS = 0.3
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class ToolError(Exception):
    """The tool could not be run or failed; the message says why."""


class ToolTimeout(ToolError, TimeoutError):
    """The tool did not finish in time and was killed."""


class ToolTruncated(ToolError):
    """The tool printed more than the output cap; it was killed and its output discarded."""


class ToolFailed(ToolError):
    """The tool ran but exited with a failing status or was killed by a signal.

    The message names the command, the exit status or signal and the first line
    of the tool's stderr (else stdout).
    """

    def __init__(self, command: str, result: "ToolResult") -> None:
        self.command = command
        self.result = result
        said = first_line(result.stderr) or first_line(result.stdout)
        super().__init__(f"{command} {describe_exit(result.returncode)}"
                         + (f": {said}" if said else " and printed no error message"))


class ToolOutputError(ToolError, ValueError):
    """The tool exited successfully but printed nothing usable."""


def describe_exit(returncode: int) -> str:
    """``exited with status 3`` or ``was killed by signal SIGSEGV (11)``."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    number = -returncode
    import signal
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "signal"
    return f"was killed by signal {name} ({number})"


def says_no_devices(result: "ToolResult", pattern: "re.Pattern[str]") -> bool:
    """True when the tool positively reported "no devices" rather than failing.

    That is: it exited by itself with status 0 or 1 (never a signal), and its
    whole output (stdout and stderr together) is one line that ``pattern``
    finds. A crash that mentions a missing device on the way (a traceback, a
    panic, an error about one device node) is more than one line, or a signal.
    """
    if result.returncode not in (0, 1) or result.truncated:
        return False
    lines = [line for line in _ANSI.sub("", result.stdout + "\n" + result.stderr).splitlines()
             if line.strip()]
    return len(lines) == 1 and pattern.search(lines[0]) is not None


def first_line(text: str, limit: int = 200) -> str:
    """The first non-blank line of ``text`` without ANSI colour, cut to ``limit`` characters."""
    for line in _ANSI.sub("", text).splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[:limit - 1] + "…"
    return ""


@dataclass(frozen=True)
class ToolResult:
    """What a finished tool call produced."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    truncated: bool
    duration_seconds: float


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill a child started with ``start_new_session=True`` and its descendants, then reap it.

    The group is killed even when the child itself has already exited: a
    grandchild (a helper the tool forked) may still be running in it. SIGKILL,
    because a tool that ignores SIGTERM must not outlive the call. The group id
    cannot be reused while any member is alive, so this never hits a stranger.
    """
    import signal
    import subprocess
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if proc.returncode is None:
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


#: The locale categories a tool reads how to print numbers from; see :func:`tool_environment`.
_NUMERIC_LOCALE = "C"


def tool_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a vendor tool runs in: this process's (or ``base``), with numbers in
    the C locale (``LC_NUMERIC=C``), so a tool that honours the locale prints ``45.5``, never
    a decimal comma (``45,5``) that its parser would misread as two CSV cells or no number.

    ``LC_ALL`` overrides every category, so where it is set its value moves to ``LANG`` (and
    the ``LC_*`` it overrode go): messages, text encoding and the rest stay as the user set
    them; only numbers change.
    """
    env = dict(os.environ if base is None else base)
    forced = env.pop("LC_ALL", None)
    if forced:
        for name in [n for n in env if n.startswith("LC_")]:
            del env[name]
        env["LANG"] = forced
    env["LC_NUMERIC"] = _NUMERIC_LOCALE
    return env


def run_tool(argv: Sequence[str], timeout: float,
             max_output: int = DEFAULT_MAX_OUTPUT,
             env: dict[str, str] | None = None) -> ToolResult:
    """Run ``argv`` and return its output; raise :class:`ToolError` if it cannot run.

    Output past ``max_output`` bytes (per stream) stops the child and marks the
    result ``truncated``. A non-zero exit is *not* an exception: callers decide
    (some tools exit non-zero with usable output). On timeout the process group
    is killed and :class:`ToolTimeout` raised. ``env`` defaults to :func:`tool_environment`.
    """
    import selectors  # imported when a tool runs, not when a backend only looks for one
    import subprocess
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
            env=tool_environment() if env is None else env, close_fds=True)
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
        exited_at: float | None = None
        while open_streams:
            now = time.monotonic()
            remaining = deadline - now
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > PIPE_GRACE_SECONDS:
                break  # the tool is done; whatever still holds its pipes is killed below
            if remaining <= 0:
                kill_group(proc)
                raise ToolTimeout(f"{os.path.basename(argv[0])} did not finish within {timeout:g} s")
            for key, _ in sel.select(timeout=min(remaining, 0.05 if exited_at else 0.2)):
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


@dataclass(frozen=True)
class Tool:
    """One located vendor executable and how to run it (see the module docstring)."""

    path: str
    timeout: float = 5.0
    max_output: int = DEFAULT_MAX_OUTPUT

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def command(self, args: Sequence[str]) -> str:
        """``tool arg arg`` for messages (the executable's base name, not its path)."""
        return " ".join((self.name, *args))

    def run(self, *args: str, timeout: float | None = None,
            ok_codes: Iterable[int] = (0,)) -> ToolResult:
        """Run the tool; return its result only when it exited with a status in ``ok_codes``.

        Raises :class:`ToolError` (cannot start), :class:`ToolTimeout`,
        :class:`ToolTruncated` or :class:`ToolFailed` (other status, or a signal).
        """
        budget = self.timeout if timeout is None else timeout
        if budget <= 0:
            raise ToolTimeout(f"{self.command(args)}: no time left in the {self.timeout:g} s budget")
        result = run_tool([self.path, *args], timeout=budget, max_output=self.max_output)
        if result.truncated:
            raise ToolTruncated(f"{self.command(args)} printed more than {self.max_output} bytes; "
                                "output discarded")
        if result.returncode not in tuple(ok_codes):
            raise ToolFailed(self.command(args), result)
        return result

    def parse(self, result: ToolResult, parser: Callable[[str], T]) -> T:
        """``parser(stdout)``; a :class:`ValueError` from it becomes :class:`ToolOutputError`."""
        try:
            return parser(result.stdout)
        except ToolError:
            raise
        except ValueError as exc:
            said = str(exc)
            if not said.startswith(self.name):
                said = f"{self.command(result.argv[1:])} printed unusable output: {said}"
            raise ToolOutputError(said) from exc


@contextlib.contextmanager
def backend_errors(context: str = "") -> Iterator[None]:
    """Re-raise any :class:`ToolError` as :class:`BackendError` (chained, so a timeout stays one)."""
    try:
        yield
    except ToolError as exc:
        raise BackendError(f"{context}{exc}") from exc


K = TypeVar("K")


def run_concurrently(calls: Mapping[K, Callable[[], T]]) -> dict[K, T | Exception]:
    """Each of ``calls`` (typically one tool run and its parse) on its own thread, all at
    once; what each returned, or the exception it raised, under its key.

    The tool calls bound their own time (:meth:`Tool.run`), so waiting for all of them
    waits at most for the slowest; one failing never hides the others' answers. One call
    runs on the caller's thread, without a pool.
    """
    def outcome(call: Callable[[], T]) -> T | Exception:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - returned to the caller, who decides
            return exc

    if len(calls) <= 1:
        return {key: outcome(call) for key, call in calls.items()}
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="allsmi-tool") as pool:
        futures = {key: pool.submit(outcome, call) for key, call in calls.items()}
        return {key: future.result() for key, future in futures.items()}

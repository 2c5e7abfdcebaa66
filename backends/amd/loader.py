"""Importing the ``amdsmi`` package without letting it write to our stdout.

``amdsmi`` loads ``libamd_smi.so`` when it is imported. When the library is
missing, the import prints two lines to stdout and then raises ``KeyError``
(amdsmi 7.0.2). ``amdsmi_init`` and the C library itself may print too. Our
stdout carries machine-readable output (``allsmi snapshot --format json``), so
every such call runs inside :func:`quiet_stdout`, which points file descriptor
1 at a temporary file for its duration: this catches Python ``print`` and C
``printf``/``write`` alike.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Iterator, TextIO

from allsmi.backends.amd.locate import (  # noqa: F401 - the names callers use here
    LIBRARY, LIBRARY_MISSING_REASON, library_paths, not_installed_reason, package_version, quick_absence)
from allsmi.backends.amd.locate import installed

#: How long :func:`quiet_stdout` waits for another thread's redirection to end.
LOCK_WAIT_SECONDS = 1.0

#: Held while fd 1 is redirected: two redirections must not interleave their
#: dup2 calls, or one would restore the other's temporary file as stdout.
_STDOUT_LOCK = threading.RLock()


@dataclass
class CapturedOutput:
    """What was written to stdout inside :func:`quiet_stdout` (filled on exit)."""

    text: str = ""


class AmdsmiLoadError(Exception):
    """``amdsmi`` could not be imported; ``str()`` is the reason for the user."""

    def __init__(self, reason: str, output: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.output = output


def _libc_fflush() -> Callable[[None], int] | None:
    try:
        return ctypes.CDLL(None).fflush  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # no dlopen(NULL), e.g. on Windows
        return None


_FFLUSH = _libc_fflush()


def _flush(*streams: TextIO | None) -> None:
    # Python buffers and C stdio buffers both hold bytes destined for fd 1;
    # they must be written out before fd 1 changes hands in either direction.
    for stream in streams:
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.flush()
    if _FFLUSH is not None:
        with contextlib.suppress(Exception):
            _FFLUSH(None)


@contextlib.contextmanager
def quiet_stdout() -> Iterator[CapturedOutput]:
    """Capture everything written to stdout (fd 1 and ``sys.stdout``) in the block.

    The captured text is returned in the yielded :class:`CapturedOutput` once
    the block exits; nothing reaches the real stdout. While the block runs,
    other threads' writes to fd 1 are captured too, so keep blocks short, and
    commands whose stdout is a document write it through a descriptor they
    duplicated before any backend ran (``allsmi.cli.snapshot.OriginalStdout``).
    """
    captured = CapturedOutput()
    if not _STDOUT_LOCK.acquire(timeout=LOCK_WAIT_SECONDS):
        # Another thread is stuck inside a redirected call (a library call that never
        # returned): fd 1 already points at its capture file, so this call's output is
        # kept off stdout anyway. Waiting for that thread could take for ever.
        yield captured
        return
    try:
        yield from _redirected(captured)
    finally:
        _STDOUT_LOCK.release()


def _redirected(captured: CapturedOutput) -> Iterator[CapturedOutput]:
    outer = sys.stdout
    _flush(outer, sys.__stdout__)
    try:
        saved_fd: int | None = os.dup(1)
    except OSError:  # fd 1 closed: nothing to protect at the fd level
        saved_fd = None
    import tempfile
    sink = tempfile.TemporaryFile()
    text_sink = io.StringIO()
    try:
        if saved_fd is not None:
            os.dup2(sink.fileno(), 1)
        with contextlib.redirect_stdout(text_sink):
            yield captured
    finally:
        _flush(outer, sys.__stdout__)
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
        sink.seek(0)
        raw = sink.read()
        sink.close()
        captured.text = text_sink.getvalue() + raw.decode("utf-8", "replace")


def load_amdsmi() -> ModuleType:
    """Import ``amdsmi`` with stdout captured; :class:`AmdsmiLoadError` says why it failed."""
    if "amdsmi" not in sys.modules and not installed("amdsmi"):
        # Not installed: the import would fail at once and print nothing, so no capture
        # (its temporary file and fd juggling) on every start of a plain install.
        raise AmdsmiLoadError(not_installed_reason(), "")
    reason = ""
    with quiet_stdout() as output:
        try:
            import amdsmi
        except ModuleNotFoundError as exc:
            if exc.name == "amdsmi":
                reason = not_installed_reason()
            else:
                reason = f"importing amdsmi failed: {exc}"
        except KeyError as exc:
            # amdsmi_wrapper looks the library up in a dict it failed to fill.
            if exc.args == ("libamd_smi.so",):
                reason = LIBRARY_MISSING_REASON
            else:
                reason = f"importing amdsmi failed: KeyError {exc}"
        except AttributeError as exc:
            # A library older than the wheel lacks symbols the wrapper binds.
            reason = (f"libamd_smi.so does not match the amdsmi {package_version() or '?'} "
                      f"Python package ({exc}); install the amdsmi wheel that ships with ROCm")
        except Exception as exc:  # noqa: BLE001 - any import failure means "absent"
            reason = f"importing amdsmi failed: {type(exc).__name__}: {exc}"
    if reason:
        raise AmdsmiLoadError(reason, output.text)
    return amdsmi

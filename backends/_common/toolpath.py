"""Finding a vendor's command-line tool, without importing what running it needs.

A backend's :meth:`probe` only asks whether its tool exists, on every start-up of
every command; this module answers that with :mod:`os` alone (no ``shutil``,
``subprocess`` or ``tempfile``), so that a machine without the vendor pays for
nothing else. Running the tool is :mod:`allsmi.backends._common.runner`, which
re-exports :func:`find_tool` and :func:`describe_missing`.
"""

from __future__ import annotations

import os
from typing import Iterable

from allsmi.schema.records import Record, record


def _runnable(path: str) -> bool:
    return os.path.exists(path) and os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path)


def which(executable: str) -> str | None:
    """:func:`shutil.which` with its default mode, for POSIX without importing ``shutil``.

    The same answer: a name with a directory part is checked as it is; otherwise each
    directory of ``PATH`` (the system's default path when it is unset, none when it is empty), in
    order, the first existing executable non-directory ``dir/name``. Elsewhere
    ``shutil.which`` itself answers (``tests/backends/test_toolpath.py`` compares both).
    """
    if os.name != "posix":  # pragma: no cover - PATHEXT and friends: let shutil decide
        import shutil
        return shutil.which(executable)
    if os.path.dirname(executable):
        return executable if _runnable(executable) else None
    path = os.environ.get("PATH", None)
    if path is None:
        try:
            path = os.confstr("CS_PATH")
        except (AttributeError, ValueError):  # no confstr() or no CS_PATH
            path = os.defpath
    if not path:  # PATH="" finds nothing; PATH=":" looks in the current directory
        return None
    seen: set[str] = set()
    for directory in path.split(os.pathsep):
        if directory in seen:
            continue
        seen.add(directory)
        candidate = os.path.join(directory, executable)
        if _runnable(candidate):
            return candidate
    return None


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
    found = which(executable)
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


@record
class VendorTool(Record):
    """What a command-line backend declares about its tool: the executables (in order of
    preference; later ones are older names), the environment variable that overrides the
    search with a full path, and the directories the vendor installs into besides ``PATH``."""

    executables: tuple[str, ...]
    env_var: str
    install_dirs: tuple[str, ...] = ()

    @property
    def executable(self) -> str:
        """The current name of the tool."""
        return self.executables[0]

    @property
    def label(self) -> str:
        """``rbln-smi/rbln-stat``: every name, for messages."""
        return "/".join(self.executables)

    def find(self, search_dirs: Iterable[str] | None = None) -> str | None:
        """The override when set (only if it is executable), else the first executable found
        on ``PATH`` or in ``search_dirs`` (default: the install directories)."""
        dirs = tuple(self.install_dirs if search_dirs is None else search_dirs)
        if os.environ.get(self.env_var):
            return find_tool(self.executable, self.env_var)
        for executable in self.executables:
            found = find_tool(executable, None, dirs)
            if found:
                return found
        return None

    def missing(self, search_dirs: Iterable[str] | None = None) -> str:
        """Why :meth:`find` found nothing, and what to set."""
        if len(self.executables) == 1 or os.environ.get(self.env_var):
            return describe_missing(self.executable, self.env_var)
        dirs = tuple(self.install_dirs if search_dirs is None else search_dirs)
        return (f"neither {' nor '.join(self.executables)} found on PATH or in "
                f"{', '.join(dirs) or 'the vendor directories'} "
                f"(set {self.env_var} to the full path of either)")

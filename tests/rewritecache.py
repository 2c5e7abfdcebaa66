"""Pytest's rewritten test modules, cached once by the xdist controller before its workers start.

Every worker imports every test module to collect it, and pytest rewrites the asserts of each
one (parse, rewrite, compile) unless its cache in ``__pycache__`` (``*-pytest-*.pyc``) is
current. Where ``PYTHONDONTWRITEBYTECODE`` is set, as on the development and CI machines, pytest
never writes that cache, so each of the six workers rewrote all the modules at every run: about
7 s of CPU each of the 9.7 s a worker took to collect (2.3 s with the cache), 45 s of CPU a run
on two cores. The controller writes the cache here, in as many processes as there are cores, with
pytest's own rewriting; the workers then read it as they would any cache (checked against each
file's size and modification time, so an edited test is rewritten afresh).

Only an optimisation: pytest's rewriting functions are not public, and where they are missing or
fail this does nothing and the workers rewrite as before.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def cache_rewritten_tests(config: Any, root: Path) -> None:
    """Write the rewritten-module cache of the test files the run collects (its arguments, or
    the test paths) and of every conftest under ``root``, where none is current. Called by the
    controller only, before its workers start."""
    try:
        from _pytest.assertion import rewrite
        state = config.stash[rewrite.assertstate_key]
        patterns = config.getini("python_files")
        here = Path(config.invocation_params.dir)
        args = [here / str(arg).split("::")[0] for arg in config.args]
    except (ImportError, AttributeError, KeyError):
        return
    from fnmatch import fnmatch
    files = set(root.rglob("conftest.py"))
    for arg in args:
        found = sorted(arg.rglob("*.py")) if arg.is_dir() else [arg] if arg.is_file() else []
        files.update(p for p in found if any(fnmatch(p.name, pat) for pat in patterns))
    stale = [p for p in sorted(files) if _stale(rewrite, p)]
    if not stale:
        return
    jobs = min(len(stale), os.cpu_count() or 1)
    if jobs == 1 or sys.platform == "win32":
        _write(rewrite, config, state, stale)
        return
    children = []
    for part in range(jobs):  # fork: each child inherits the configuration and writes its share
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                _write(rewrite, config, state, stale[part::jobs])
            finally:
                os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


def _stale(rewrite: Any, path: Path) -> bool:
    pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
    try:
        return rewrite._read_pyc(path, pyc) is None
    except (AttributeError, TypeError, OSError):
        return False


def _write(rewrite: Any, config: Any, state: Any, paths: list[Path]) -> None:
    for path in paths:
        try:
            cache_dir = rewrite.get_cache_dir(path)
            if not rewrite.try_makedirs(cache_dir):
                continue
            source_stat, code = rewrite._rewrite_test(path, config)
            rewrite._write_pyc(state, code, source_stat,
                               cache_dir / (path.name[:-3] + rewrite.PYC_TAIL))
        except (AttributeError, TypeError, OSError, SyntaxError):
            continue  # the worker rewrites it (and reports a syntax error itself)

"""The wheels the tests that run ``pip install`` take, with the index off: nothing is downloaded
inside a test.

Two tests install with pip: the image recipe's steps (``tests/deploy/test_containerfile.py``:
the lock ``deploy/image/requirements.txt``, then the tree itself) and the wheel of a copy of the
tree (``tests/test_packaging.py``). Both build the tree in pip's isolated build environment,
which installs ``pyproject.toml``'s ``[build-system] requires``. ``.ci/run`` downloads all of
those wheels into ``.wheelhouse/`` (git-ignored, kept while the lock and the build requirements
stay the same); the tests run pip with the index off (``PIP_NO_INDEX``, which
``tests/conftest.py`` sets for every process the suite starts) and the wheelhouse as pip's only
source. ``.ci/run`` fetches them in the background while the tests' environment installs, and a
test waits for that to end (``tests/background.py``). Where the wheelhouse lacks a wheel, the
tests are skipped with the commands that fetch it, and fail under CI
(``ALLSMI_REQUIRE_INTEGRATION``), as a missing tool does.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from .background import wait_for_install
from .conftest import unavailable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "deploy" / "image" / "requirements.txt"
#: Where ``.ci/run`` puts the wheels (``ALLSMI_WHEELHOUSE`` names another folder).
WHEELHOUSE = Path(os.environ.get("ALLSMI_WHEELHOUSE") or REPO / ".wheelhouse")
#: Written by ``.ci/run`` while it fills the wheelhouse in the background: the process's id.
INSTALLING = WHEELHOUSE.parent / f"{WHEELHOUSE.name}.installing"
#: What that process said.
INSTALL_LOG = WHEELHOUSE.parent / f"{WHEELHOUSE.name}.log"

_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def _normalized(name: str) -> str:
    """A distribution's name as its wheel's file name starts (PEP 427: runs of ``-_.`` as
    ``_``, lower case)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def build_requirements() -> list[str]:
    """``pyproject.toml``'s ``[build-system] requires`` (what pip's isolated build installs)."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return list(data["build-system"]["requires"])


def _wanted(lock: bool) -> list[tuple[str, str | None]]:
    """(normalized name, pinned version or ``None``) of every wheel a test needs."""
    wanted: list[tuple[str, str | None]] = []
    for requirement in build_requirements():
        match = _NAME.match(requirement)
        assert match, requirement
        wanted.append((_normalized(match[1]), None))
    if lock:
        wanted += [(_normalized(name), version)
                   for name, version in _PINNED.findall(LOCK.read_text(encoding="utf-8"))]
    return wanted


def missing_wheels(lock: bool = False) -> list[str]:
    """The wheels the wheelhouse lacks: the build requirements, and with ``lock`` every pin of
    the image's lock."""
    have = [p.name.lower() for p in WHEELHOUSE.glob("*.whl")] if WHEELHOUSE.is_dir() else []
    return [f"{name}{'==' + version if version else ''}" for name, version in _wanted(lock)
            if not any(w.startswith(f"{name}-{version.lower()}-" if version else f"{name}-")
                       for w in have)]


def offline_pip_env(lock: bool = False) -> dict[str, str]:
    """The environment of a pip that installs from the wheelhouse alone (the index off); the
    test is skipped (failed under CI) where the wheelhouse lacks a wheel it needs, once
    ``.ci/run``'s background download has ended."""
    wait_for_install(INSTALLING, lambda: not missing_wheels(lock))
    missing = missing_wheels(lock)
    if missing:
        fetch = [f"python3 -m pip download --only-binary :all: -d {WHEELHOUSE} "
                 + " ".join(repr(r) for r in build_requirements())]
        if lock:
            fetch.insert(0, f"python3 -m pip download --no-deps --only-binary :all: -d {WHEELHOUSE} "
                            f"--require-hashes -r {LOCK.relative_to(REPO)}")
        message = (f"{WHEELHOUSE} lacks {', '.join(missing)}: run .ci/run, or fetch them with "
                   + " && ".join(fetch))
        if INSTALL_LOG.exists():
            message += f"; .ci/run's download said: {INSTALL_LOG.read_text()[-2000:]}"
        unavailable(message)
    return {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELHOUSE),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

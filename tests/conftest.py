"""Shared fixtures: isolate every test from the developer's machine."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, NoReturn

import pytest

from . import offline
from .ordering import alone_throughout, arrange, is_alone, long_seconds
from .rewritecache import cache_rewritten_tests

REPO = Path(__file__).resolve().parents[1]
offline.install()  # no download, no host but loopback (tests/offline.py)


@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[None]:
    """A test that tried to reach beyond loopback fails, naming what it tried (the socket call
    itself failed as on a machine with no network: tests/offline.py)."""
    offline.reached()  # (a thread an earlier test left behind: not this test's doing)
    yield
    tried = offline.reached()
    if tried:
        pytest.fail("the test reached beyond loopback: " + "; ".join(tried[:5]), pytrace=False)


@pytest.fixture(scope="session")
def _homes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where each test's own empty home is made (a folder of the run's temporary directory)."""
    return tmp_path_factory.mktemp("homes", numbered=False)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, _homes: Path) -> None:
    """No user or system config, no vendor tool overrides leak in from the environment."""
    # A fresh home per test, named at random in its own folder: pytest's numbered ``mktemp``
    # lists the whole temporary directory to number a new one, and a worker's grows by a
    # folder (and its ``-current`` link) a test, so every test listed all the earlier ones
    # (1.4 s of CPU in 1000 trivial tests, most of their set-up; each ``tmp_path`` too).
    home = Path(tempfile.mkdtemp(prefix="home", dir=_homes))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    # Every ALLSMI_* variable (a new vendor's tool override included), except the
    # settings of the test suite itself (CI mode, the FOCUS validator's venv).
    keep = {"ALLSMI_REQUIRE_INTEGRATION", "ALLSMI_FOCUS_VENV"}
    # COLUMNS and LINES: pytest-xdist's workers have them (80x24); a dashboard started in a tmux
    # window would take them over the window's own size.
    for var in [v for v in os.environ if v.startswith("ALLSMI_") and v not in keep] + [
            "NO_COLOR", "COLUMNS", "LINES"]:
        monkeypatch.delenv(var, raising=False)


def locks_dir(run: str) -> Path:
    """The lock files of one run (the xdist controller's id names the run, so that every worker
    of one run, and only those, share them)."""
    return Path(tempfile.gettempdir()) / f"allsmi-tests-{run}"


_LOCKS = locks_dir(os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid())))
#: A directory of this run's own, shared by its workers and removed when the run ends.
RUN_DIR = _LOCKS
#: The runs whose workers this process (the xdist controller) started.
_RUNS: set[str] = set()


def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller caches pytest's rewritten test modules before its workers start, so
    that six workers do not each rewrite them all (tests/rewritecache.py)."""
    if (not hasattr(config, "workerinput") and config.getoption("numprocesses", None)
            and config.getoption("assertmode", "rewrite") == "rewrite"):
        cache_rewritten_tests(config, REPO / "tests")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    _RUNS.add(node.workerinput["testrunuid"])


def pytest_sessionfinish() -> None:
    """The controller removes its run's lock files once every worker is done (and a run
    without workers its own directory)."""
    for run in _RUNS:
        shutil.rmtree(locks_dir(run), ignore_errors=True)
    if not _RUNS and not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(_LOCKS, ignore_errors=True)


@contextlib.contextmanager
def _cpu_share(alone: bool) -> Iterator[None]:
    """Held around every test: shared, or exclusive for a test marked ``alone``. Waiting for
    the exclusive hold goes through a gate that new shared holders pass only when no exclusive
    holder waits, so an ``alone`` test is not starved by the other workers."""
    _LOCKS.mkdir(exist_ok=True)
    # The wait is not the test's time: pytest-timeout's alarm (signal method) is held while
    # waiting and armed again with what was left, so a test queued behind long `alone` tests
    # is not timed out before it starts. The waits end: every holder is a test with a timeout.
    left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
    with open(_LOCKS / "gate", "a") as gate, open(_LOCKS / "cpu", "a") as cpu:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(cpu, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
            if left > 0:
                signal.setitimer(signal.ITIMER_REAL, left)
        if not alone:
            _SHARED[:] = [gate, cpu]
        try:
            yield
        finally:
            _SHARED.clear()
            fcntl.flock(cpu, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


#: The lock files through which the running test holds its shared CPU share (under xdist).
_SHARED: list[Any] = []


@contextlib.contextmanager
def cpu_to_itself() -> Iterator[None]:
    """Within a test, the CPU share held as a test marked ``alone`` holds it, for as long as
    the ``with`` lasts: no other worker runs a test meanwhile. For a latency bound inside a
    test whose other stretches need no such hold (a wait of seconds for a server's deadline):
    the other workers go on while it waits. Such a test is marked ``alone(whole=False)``, so
    that it runs among the first tests, before any long one starts: the wait for the hold
    (new tests held back at the gate meanwhile) is then for short tests to end, not for a
    long one. Without xdist (or in a test held alone throughout), nothing."""
    if not _SHARED:
        yield
        return
    gate, cpu = _SHARED
    left, _ = signal.setitimer(signal.ITIMER_REAL, 0)  # (the wait is not the test's time)
    fcntl.flock(cpu, fcntl.LOCK_UN)  # (held shared while waiting, two of these would deadlock)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)  # new shared holders wait at the gate...
        fcntl.flock(cpu, fcntl.LOCK_EX)  # ...while those that hold it finish their tests
    finally:
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, left)
    try:
        yield
    finally:
        fcntl.flock(cpu, fcntl.LOCK_SH)  # (shared again before the gate opens)
        fcntl.flock(gate, fcntl.LOCK_UN)


#: How many tests marked ``alone`` this run collected (each worker collects them all).
ALONE_TESTS = 0
#: The longest a ``long`` test waits for the ``alone`` tests to end (a worker that died in one
#: leaves no file, and must not hold the others for ever).
ALONE_WAIT_SECONDS = 120.0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``alone`` first, the ``long`` ones spread over the workers' first
    slices (tests/ordering.py). Last, after ``-k`` and ``-m`` have deselected theirs: the
    slices are cut from what runs, and only the ``alone`` tests that run are waited for."""
    global ALONE_TESTS
    ALONE_TESTS = sum(map(is_alone, items))
    arrange(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def _alone_ended(nodeid: str) -> Path:
    return _LOCKS / f"alone-ended-{hashlib.sha1(nodeid.encode()).hexdigest()[:16]}"


def _wait_for_alone_tests() -> None:
    """Until every ``alone`` test of the run has ended (each leaves a file), at most
    :data:`ALONE_WAIT_SECONDS`: a long test started beside one would hold the CPU share it
    waits for, and every worker would wait behind it (tests/ordering.py). The wait is not the
    test's time (pytest-timeout's alarm is held, as in :func:`_cpu_share`)."""
    left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        deadline = time.monotonic() + ALONE_WAIT_SECONDS
        while time.monotonic() < deadline:
            if len(list(_LOCKS.glob("alone-ended-*"))) >= ALONE_TESTS:
                return
            time.sleep(0.2)
    finally:
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, left)


@pytest.fixture(autouse=True)
def _alone_when_timed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests marked ``alone`` (bounds on latency: the CPU of the other workers' tests would
    eat them) run while no other worker runs a test, and the ``long`` ones start after every
    ``alone`` one has ended; without xdist this does nothing."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    alone = is_alone(request.node)
    if not alone and long_seconds(request.node) > 0:
        _wait_for_alone_tests()
    with _cpu_share(alone_throughout(request.node)):
        yield


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """An ``alone`` test has ended (passed, failed, or skipped before its fixtures)."""
    if is_alone(item) and os.environ.get("PYTEST_XDIST_WORKER"):
        _LOCKS.mkdir(exist_ok=True)
        _alone_ended(item.nodeid).touch()


def allsmi_exe() -> list[str]:
    """The installed ``allsmi`` console script of the running interpreter's environment."""
    script = Path(sys.executable).with_name("allsmi")
    if script.exists():
        return [str(script)]
    found = shutil.which("allsmi")
    return [found] if found else [sys.executable, "-m", "allsmi"]


@contextlib.contextmanager
def loopback_server(handler: type) -> Iterator[str]:
    """``handler`` (an ``http.server`` request handler class) served on 127.0.0.1 in a thread,
    for as long as the ``with`` lasts: its base URL."""
    import http.server
    import threading
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def run_allsmi(*args: str, env: dict[str, str] | None = None, timeout: float = 60,
               cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, capturing output."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(allsmi_exe() + list(args), capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd=cwd, stdin=subprocess.DEVNULL)


def require_tool(name: str, package: str) -> str:
    """Path of a system tool a test needs; skip where absent, but fail under CI.

    ``.ci/run`` installs the Debian packages and sets ``ALLSMI_REQUIRE_INTEGRATION=1``
    so that a missing tool can never turn CI green by skipping.
    """
    path = shutil.which(name)
    if path:
        return path
    unavailable(f"{name} not found (apt-get install {package})")


def unavailable(message: str) -> NoReturn:
    """What a test needs is missing (``message``: what, and how to get it): skip the test with
    that reason, but fail it under CI (``.ci/run`` sets ``ALLSMI_REQUIRE_INTEGRATION=1`` after
    installing everything), so that a missing tool never turns CI green by skipping."""
    if os.environ.get("ALLSMI_REQUIRE_INTEGRATION"):
        pytest.fail(message)
    pytest.skip(message)

"""Contract scenarios for the Rebellions backend, and the stand-in ``rbln-smi`` they use.

The stand-in is the shared one (:mod:`tests.contract.standin`): it prints a
fixture file, exits non-zero, hangs, or dies. The backend is pointed at it
through ``ALLSMI_RBLN_SMI`` (or through PATH, for the ``rbln-stat`` fallback).
"""

from __future__ import annotations

import os
from pathlib import Path

from allsmi.backends.rebellions import ENV_VAR, RebellionsBackend

from . import standin
from .scenario import FIXTURES, Scenario, ScenarioEnv

RBLN_FIXTURES = FIXTURES / "rebellions"


def write_standin(directory: Path, executable: str = "rbln-smi", *, fixture: str | None = None,
                  text: str | None = None, stderr: str = "", exit_code: int = 0,
                  hang: bool = False, die: bool | str = False, **behaviour: object) -> Path:
    """A stand-in ``rbln-smi``/``rbln-stat`` (the shared one) that answers every call the same way.

    It prints ``fixture`` (a file under ``fixtures/rebellions``) or ``text`` on
    stdout and ``stderr`` on stderr, then hangs, kills itself (``die``: True for
    SIGKILL or a signal name), or exits with ``exit_code``. Its pid goes to
    ``<executable>.pid``; calls are logged (see :func:`tests.contract.standin.calls`).
    """
    spec = standin.route(RBLN_FIXTURES, fixture, text=text or "", stderr=stderr, rc=exit_code,
                         hang=hang, die=die, pidfile=str(directory / f"{executable}.pid"), **behaviour)
    return standin.write_standin(directory, executable, {}, default=spec)


def backend_for(env: ScenarioEnv, fixture: str | None = None, *, executable: str = "rbln-smi",
                via_path: bool = False, timeout_seconds: float = 5.0, **standin: object) -> RebellionsBackend:
    """A backend whose tool is a stand-in printing ``fixture``.

    ``via_path`` puts the stand-in alone on PATH (no env override, no vendor
    directories) to exercise discovery; otherwise ``ALLSMI_RBLN_SMI`` names it.
    """
    bindir = env.tmp_path / "bin"
    path = write_standin(bindir, executable, fixture=fixture, **standin)  # type: ignore[arg-type]
    if via_path:
        env.monkeypatch.delenv(ENV_VAR, raising=False)
        env.monkeypatch.setenv("PATH", str(bindir))
    else:
        env.monkeypatch.setenv(ENV_VAR, str(path))
    # Fixture pids are fictitious: no local owner, no open /dev/rbln nodes.
    return RebellionsBackend(timeout_seconds=timeout_seconds, search_dirs=(),
                             lookup_user=lambda pid: None, lookup_nodes=lambda pid: None)


def _tools_absent(env: ScenarioEnv) -> RebellionsBackend:
    empty = env.tmp_path / "empty"
    empty.mkdir()
    env.monkeypatch.delenv(ENV_VAR, raising=False)
    env.monkeypatch.setenv("PATH", str(empty))
    return RebellionsBackend(search_dirs=(str(empty),))


def _override_not_executable(env: ScenarioEnv) -> RebellionsBackend:
    env.monkeypatch.setenv(ENV_VAR, os.path.join(str(env.tmp_path), "missing", "rbln-smi"))
    return RebellionsBackend(search_dirs=())


SCENARIOS: list[Scenario] = [
    Scenario("no-hardware-tools-absent", _tools_absent, None),
    Scenario("no-hardware-override-not-executable", _override_not_executable, None),
    Scenario("no-hardware-tool-sees-no-device",
             lambda env: backend_for(env, "rbln-smi-no-devices.json"), None),
    Scenario("atom-plus-4-cards-loaded",
             lambda env: backend_for(env, "rbln-smi-kmd3.0-ca22x4-loaded.json"), 4),
    Scenario("atom-4-cards-rbln-stat-fallback",
             lambda env: backend_for(env, "rbln-stat-kmd1.3-ca02x4.json",
                                     executable="rbln-stat", via_path=True), 4),
    # 2 cards (parents) + 8 dies (children).
    Scenario("atom-max-2-cards-8-dies",
             lambda env: backend_for(env, "rbln-smi-kmd3.0-ca25x2-atom-max.json"), 10),
    Scenario("atom-plus-8-cards-repeated-npu",
             lambda env: backend_for(env, "rbln-smi-kmd3.0-ca22x8-shared-npu.json"), 8),
    Scenario("atom-plus-8-cards-four-jobs",
             lambda env: backend_for(env, "rbln-smi-kmd3.0-ca22x8-four-jobs.json"), 8),
    Scenario("atom-plus-na-cells",
             lambda env: backend_for(env, "rbln-smi-kmd2.0-ca12x2-na-cells.json"), 2),
    # 6 rows: a string, a row without identity and a duplicate are skipped.
    Scenario("malformed-device-rows",
             lambda env: backend_for(env, "rbln-smi-malformed-device-row.json"), 3),
    Scenario("malformed-process-rows",
             lambda env: backend_for(env, "rbln-smi-malformed-process-row.json"), 2),
    Scenario("numeric-values-variant",
             lambda env: backend_for(env, "rbln-smi-numeric-values.json"), 1),
]

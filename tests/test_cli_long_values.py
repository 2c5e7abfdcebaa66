"""Absurdly long input, from the outside: a value of 100,000 characters in a flag, a variable or
the configuration is refused in one readable line (the value cut to its start and its length,
``allsmi.schema.text.clipped``), and a path too long for the system (``ENAMETOOLONG``) is an error or
an absent file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.schema.text import MAX_SHOWN, clipped

from .conftest import run_allsmi

HUGE = "x" * 100_000
#: A path whose last component is longer than any file system's 255 bytes.
TOO_LONG = "/tmp/" + "y" * 300


def test_clipped_cuts_each_long_value_to_its_start_and_length() -> None:
    message = clipped(f"$ALLSMI_HOSTNAME: {HUGE!r}: a host name must be printable")
    assert message == f"$ALLSMI_HOSTNAME: '{'x' * 120}…' (100000 characters): a host name must be printable"
    spaced = clipped(f"got {'a b ' * 1000!r}, expected a number")
    assert spaced.endswith("…' (4000 characters), expected a number")
    assert clipped("/p" * 600 + " not found") == "/p" * 60 + "… (1200 characters) not found"
    assert clipped("/p" * 510) == "/p" * 510  # (a path of up to MAX_SHOWN characters and a few)
    short = f"unknown backend(s) {'y' * MAX_SHOWN!r}"
    assert clipped(short) == short  # (a value of up to MAX_SHOWN characters is shown whole)
    words = "word " * 500  # (long, but no long value in it)
    assert clipped(words) == words


@pytest.mark.parametrize("args, env, names", [
    (["export", "--simulate", "mixed", "--since", HUGE], {}, "invalid time"),
    (["export", "--simulate", "mixed", "--period", HUGE], {}, "unknown period"),
    (["export", "--simulate", "mixed", "--group-by", HUGE], {}, "--group-by"),
    (["snapshot", "--format", HUGE], {}, "--format"),
    (["snapshot", "--simulate", "mixed"], {"ALLSMI_HOSTNAME": HUGE}, "$ALLSMI_HOSTNAME"),
    (["snapshot", "--simulate", "mixed"], {"ALLSMI_BACKENDS": HUGE}, "$ALLSMI_BACKENDS"),
    (["snapshot", "--simulate", "mixed"], {"ALLSMI_SIMULATE_SPEED": HUGE}, "ALLSMI_SIMULATE_SPEED"),
    (["serve", "--simulate", "mixed"], {"ALLSMI_SERVE_INTERVAL": HUGE}, "ALLSMI_SERVE_INTERVAL"),
], ids=["--since", "--period", "--group-by", "--format", "ALLSMI_HOSTNAME", "ALLSMI_BACKENDS",
        "ALLSMI_SIMULATE_SPEED", "ALLSMI_SERVE_INTERVAL"])
def test_a_huge_value_is_refused_in_one_short_line(args: list[str], env: dict[str, str],
                                                   names: str) -> None:
    result = run_allsmi(*args, env=env)
    assert result.returncode == 2 and result.stdout == ""
    assert names in result.stderr and "(100000 characters)" in result.stderr, result.stderr[:500]
    assert len(result.stderr) < 2000, result.stderr[:500]


def test_a_huge_value_in_the_configuration_is_refused_in_one_short_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[collector]\ninterval_seconds = "{HUGE}"\n')
    result = run_allsmi("--config", str(config), "snapshot", "--simulate", "mixed")
    assert result.returncode == 2 and result.stdout == ""
    assert "line 2" in result.stderr and "interval_seconds" in result.stderr
    assert len(result.stderr) < 2000, result.stderr[:500]


@pytest.mark.parametrize("args, env, says", [
    (["snapshot", "--simulate", TOO_LONG], {}, "unknown scenario"),
    (["snapshot", "--simulate", TOO_LONG + ".toml"], {}, "File name too long"),
    (["export", "--simulate", "mixed", "--period", "today", "--tz", "Europe/" + "z" * 300], {},
     "unknown time zone"),
], ids=["--simulate NAME", "--simulate FILE", "--tz"])
def test_a_name_too_long_for_the_system_is_a_clear_error(args: list[str], env: dict[str, str],
                                                         says: str) -> None:
    result = run_allsmi(*args, env=env)
    assert result.returncode == 2 and result.stdout == "", result.stderr[-2000:]
    assert says in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("env", [{"ALLSMI_KUBELET_SOCKET": TOO_LONG}, {"XDG_CONFIG_HOME": TOO_LONG}],
                         ids=["ALLSMI_KUBELET_SOCKET", "XDG_CONFIG_HOME"])
def test_a_path_too_long_for_the_system_is_no_file(env: dict[str, str]) -> None:
    """No kubelet socket there, no configuration file there: the snapshot is taken as without
    them (attribution says the socket is absent), with no traceback."""
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "csv", env=env)
    assert result.returncode == 0 and result.stdout.startswith("id,vendor,"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    if "ALLSMI_KUBELET_SOCKET" in env:
        doctor = run_allsmi("doctor", env=env)
        assert "no kubelet pod-resources socket at" in doctor.stdout + doctor.stderr
        assert "Traceback" not in doctor.stdout + doctor.stderr


@pytest.mark.parametrize("args", [
    ["serve", "--simulate", "mixed", "--listen", "\udcff\udcfe:9477"],
    ["serve", "--simulate", "mixed", "--listen", "a" * 64 + ".example:9477"],
    ["view", "--hosts", "http://\udcff\udcfe:9477"],
    ["view", "--hosts", "a" * 64 + ".example:9477"],
], ids=["--listen bytes", "--listen label", "--hosts bytes", "--hosts label"])
def test_a_host_no_resolver_can_be_asked_is_refused_before_use(args: list[str]) -> None:
    """Bytes that are no UTF-8 (a shell's ``$'\\xff'``) or a label over 63 characters: the
    resolver is never asked (before, ``serve`` died with a traceback, ``view`` showed the
    codec's error as each refresh's problem)."""
    result = run_allsmi(*args, timeout=30)
    assert result.returncode == 2 and result.stdout == "", result.stderr[-2000:]
    assert "Traceback" not in result.stderr and ("HOST:PORT" in result.stderr
                                                 or "not a host name" in result.stderr)


def test_a_huge_value_in_a_scenario_or_in_doctor_s_report_is_cut(tmp_path: Path) -> None:
    """The configuration's and the scenario's errors are cut where they are made (ConfigError,
    ScenarioError): ``doctor`` reports them in text and JSON, not only on stderr."""
    config = tmp_path / "config.toml"
    config.write_text(f'[collector]\ninterval_seconds = "{HUGE}"\n')
    for extra in ([], ["--json"]):
        result = run_allsmi("--config", str(config), "doctor", *extra)
        assert result.returncode == 2, result.stderr[-500:]
        assert "(100000 characters)" in result.stdout and len(result.stdout) < 20_000
        assert len(result.stderr) < 2000
    scenario = tmp_path / "huge.toml"
    scenario.write_text(f'include = "{HUGE}"\n')
    result = run_allsmi("snapshot", "--simulate", str(scenario))
    assert result.returncode == 2 and len(result.stderr) < 2000, result.stderr[:500]

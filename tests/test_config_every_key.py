"""Every key of the config file refuses an absurd value the same way (docs/configuration.md):
exit code 2, nothing on stdout, no traceback, and a message naming the file, the line and the
dotted key.

Table-driven from :data:`NUMBERS` and :data:`CHOICES`, a catalogue of every numeric key (with
its documented range) and of every key taking one of a set of values or a kind of value. Most
cases are judged in-process by :func:`allsmi.cli.common.settings`, the function every command
runs on its ``--config`` (the whole file, every consumer's table included); a handful run the
CLI as a subprocess to check the same from the outside.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from allsmi.cli.common import settings
from allsmi.schema.numbers import MAX_INDEX

from . import refusals

#: A TOML integer too large for a float (``math.isfinite`` raises on it).
HUGE_INT = "1" + "0" * 400


class Key(NamedTuple):
    """One numeric key: its table (as written in the header), name, range and kind."""

    table: str
    key: str
    low: float
    high: float
    low_open: bool = False
    """The lowest value is excluded (``above 0``)."""
    whole: bool = False
    """Whole numbers only."""
    lead: str = ""
    """Lines written before the key, after the header (keys the table needs besides)."""
    tail: str = ""
    """Lines written after the key."""

    @property
    def dotted(self) -> str:
        """The key as the message names it."""
        if self.table == "[rules]":
            return f"rules[1].{self.key}"
        return f"{self.table}.{self.key}"


GROUP_TAIL = 'currency = "USD"\n'
#: Every numeric key of the file, with its documented range (both ends, inclusive unless
#: ``low_open``).
NUMBERS: tuple[Key, ...] = (
    Key("collector", "interval_seconds", 0.05, 3600),
    Key("collector", "backend_timeout_seconds", 0.05, 600),
    Key("collector", "history_size", 1, 100_000, whole=True),
    Key("backends.nvidia", "workers", 1, 256, whole=True),
    Key("backends.gaudi", "interval_seconds", 0.1, 3600),
    Key("backends.neuron", "monitor_period_seconds", 0.1, 3600),
    Key("groups.team", "price_per_device_hour", 0, 1e9, tail=GROUP_TAIL),
    Key("groups.team", "price_per_kwh", 0, 1e9, tail=GROUP_TAIL),
    Key("groups.team", "grid_gco2e_per_kwh", 0, 5000),
    Key("groups.team", "budget_per_month", 0, 1e15, tail=GROUP_TAIL),
    Key("[rules]", "index", 0, MAX_INDEX, whole=True, tail='resource_group = "team"\n'),
    Key("ledger", "interval_seconds", 1, 900, whole=True),
    Key("ledger", "retention_days", 0, 36_500, low_open=True),
    Key("ledger", "rollup_retention_days", 0, 36_500, low_open=True),
    Key("ledger", "max_gap_seconds", 0.05, 604_800),
    Key("ledger", "checkpoint_seconds", 0, 3600),
    Key("export", "coverage_threshold", 0, 1),
    Key("export", "timeout_seconds", 0.1, 3600),
    Key("accounting", "idle_threshold_percent", 0, 100),
    Key("accounting", "grid_gco2e_per_kwh", 0, 5000),
    Key("activity", "input_read_bytes_per_second", 0, 1e12, low_open=True),
    Key("activity", "input_blocked_fraction", 0, 1, low_open=True),
    Key("activity", "input_delay_fraction", 0, 1, low_open=True),
    Key("activity", "communication_bytes_per_second", 0, 1e13, low_open=True),
    Key("activity", "host_cpu_fraction", 0, 1, low_open=True),
    Key("activity", "host_throttled_fraction", 0, 1, low_open=True),
    Key("activity", "quiet_cpu_fraction", 0, 1),
    Key("attribution", "timeout_seconds", 0.05, 60),
    Key("serve", "interval_seconds", 0.05, 3600),
    Key("serve", "energy_max_gap_seconds", 0, 604_800, low_open=True),
    Key("serve", "max_holder_series", 0, 1_000_000, whole=True),
)


def absurd_values(key: Key) -> list[str]:
    """TOML values out of ``key``'s range or of another type."""
    values = ["1e300", HUGE_INT, f"-{HUGE_INT}", "-1", "nan", "inf", "-inf", "true",
              "[1]", "{ a = 1 }", "1979-05-27"]
    if key.low > 0 or key.low_open:
        values.append("0")
    if key.whole:
        values += ["2.5", str(int(key.high) + 1)]
    else:
        values.append(repr(key.high * 2))
    if key.table != "[rules]":  # (an index may be a glob: text is a pattern there)
        values.append('"5"')
    return values


class Case(NamedTuple):
    """A config file's text, and the line and dotted key its message must name."""

    text: str
    line: int
    key: str


def numeric_case(key: Key, value: str) -> Case:
    header = "[[rules]]" if key.table == "[rules]" else f"[{key.table}]"
    text = f"# allsmi: every key refuses an absurd value\n{header}\n{key.lead}"
    line = text.count("\n") + 1
    return Case(f"{text}{key.key} = {value}\n{key.tail}", line, key.dotted)


def plain_case(table: str, key: str, value: str, *, tail: str = "", dotted: str = "") -> Case:
    header = "[[rules]]" if table == "[rules]" else f"[{table}]"
    text = f"# allsmi: every key refuses an absurd value\n{header}\n{key} = {value}\n{tail}"
    return Case(text, 3, dotted or f"{table}.{key}")


#: Every other key: (table, key, refused values, lines after the key).
CHOICES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("node", "resource_group", ("1", '""', "true", '"a\\u0007b"'), ""),
    ("backends", "enabled", ('"nvidia"', '["no-such-backend"]', "[1]"), ""),
    ("backends.nvidia", "processes", ('"yes"', "1"), ""),
    ("backends.nvidia", "gpm", ('"yes"', "1"), ""),
    ("backends.nvidia", "pcie_throughput", ('"yes"', "1"), ""),
    ("backends.nvidia", "no_such_option", ("1",), ""),
    ("backends.gaudi", "mode", ('"bogus"', "1", "true"), ""),
    ("backends.gaudi", "firmware", ('"yes"',), ""),
    ("backends.gaudi", "processes", ("1",), ""),
    ("backends.furiosa", "method", ('"bogus"', "1"), ""),
    ("backends.furiosa", "processes", ('"no"',), ""),
    ("backends.tpu", "metrics_address", ("1", '""', '"a\\u0007"'), ""),
    ("backends.tpu", "sysfs_root", ("1", '""'), ""),
    ("backends.intel", "sysfs_root", ("1", '""'), ""),
    ("backends.intel", "proc_root", ("1", '""'), ""),
    ("groups.team", "partition_billing", ('"bogus"', "1"), ""),
    ("groups.team", "bill_by", ('"bogus"', "1"), ""),
    ("groups.team", "currency", ('"US"', "1", '"RMB"', '"yen"'), ""),
    ("groups.team", "labels", ("1", '"team"'), ""),
    ("groups.team", "no_such_key", ("1",), ""),
    ("[rules]", "host", ("1", '""'), 'resource_group = "team"\n'),
    ("[rules]", "vendor", ("true", '""'), 'resource_group = "team"\n'),
    ("[rules]", "resource_group", ("1", '""'), 'vendor = "nvidia"\n'),
    ("ledger", "path", ("1", '""', "true"), ""),
    ("export", "format", ('"bogus"', "1", "true"), ""),
    ("export", "group_by", ('"bogus"', "1", "true", "[1]", "{ a = 1 }"), ""),
    ("export", "tz", ('"Mars/Olympus_Mons"', "1"), ""),
    ("export", "prometheus", ('"ftp://example.com"', "1"), ""),
    ("export", "textfile", ("1", '""'), ""),
    ("export", "prometheus_user", ("1", '""', "true"), ""),
    ("export", "prometheus_password_file", ("1", '""'), ""),
    ("export", "prometheus_bearer_token_file", ("1", '""'), ""),
    ("export", "prometheus_ca_file", ("1", '""'), ""),
    ("export", "focus", ("1", '"x"'), ""),
    ("export.focus", "provider_name", ("1", '""'), ""),
    ("export.focus", "currency", ('"US"', "1", '"RMB"'), ""),
    ("accounting", "no_such_key", ("1",), ""),
    ("activity", "enabled", ('"yes"', "1"), ""),
    ("activity", "cgroup_root", ("1", '""', '"sys/fs/cgroup"', '"/a/../b"', "true"), ""),
    ("attribution", "sources", ('"kubernetes"', '["bogus"]', "[1]"), ""),
    ("attribution", "kubelet_socket", ("1", '""'), ""),
    ("attribution", "hpc_job_dir", ("1", '""'), ""),
    ("attribution", "proc_root", ("1", '""'), ""),
    ("attribution", "resource_names", ("1",), ""),
    ("serve", "listen", ('"nohost"', "1", '":99999"'), ""),
    ("serve", "processes", ('"yes"', "1"), ""),
    ("serve", "web_config", ("1", '""'), ""),
    ("serve", "ledger", ("1", '""'), ""),
    ("dashboard", "sort", ('"bogus"', "1"), ""),
    ("dashboard", "processes", ('"bogus"', "1"), ""),
    ("dashboard", "theme", ("1",), ""),
)

CASES = [pytest.param(numeric_case(key, value), id=f"{key.dotted}={value[:12]}")
         for key in NUMBERS for value in absurd_values(key)]
CASES += [pytest.param(plain_case(table, key, value, tail=tail,
                                  dotted=f"rules[1].{key}" if table == "[rules]" else ""),
                       id=f"{table}.{key}={value[:12]}")
          for table, key, values, tail in CHOICES for value in values]
CASES += [
    pytest.param(Case('# x\n[attribution.resource_names]\n"nvidia.com/gpu" = { vendor = '
                      '"nvidia", id = "bogus" }\n', 3, "attribution.resource_names.nvidia.com/gpu.id"),
                 id="attribution.resource_names.id=bogus"),
    pytest.param(Case('# x\n[attribution.resource_names]\n"nvidia.com/gpu" = "bogus"\n', 3,
                      "attribution.resource_names.nvidia.com/gpu"),
                 id="attribution.resource_names=bogus-vendor"),
    pytest.param(Case("# x\n[activity]\nhost_cpu_fraction = 0.5\nquiet_cpu_fraction = 0.6\n", 4,
                      "activity.quiet_cpu_fraction"), id="activity.quiet-above-host"),
    pytest.param(Case("# x\n[serve]\nenergy_max_gap_seconds = 1\ninterval_seconds = 2\n", 3,
                      "serve.energy_max_gap_seconds"), id="serve.gap-below-interval"),
    # refused by every command (and doctor), not only when `allsmi record` starts
    pytest.param(Case("# x\n[ledger]\nmax_gap_seconds = 1\n", 3, "ledger.max_gap_seconds"),
                 id="ledger.gap-below-interval"),
]
# [ledger] max_gap_seconds beside a [serve] table (which bridges the ledger's gap where it sets
# none of its own): before, text, a list, a date or 400 digits there were a traceback, exit 1
CASES += [pytest.param(Case(f'# x\n[serve]\nlisten = "127.0.0.1:0"\n[ledger]\nmax_gap_seconds = '
                            f'{value}\n', 5, "ledger.max_gap_seconds"),
                       id=f"ledger.max_gap_seconds-with-serve={value[:12]}")
          for value in absurd_values(NUMBERS[[k.dotted for k in NUMBERS].index(
              "ledger.max_gap_seconds")])]


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file alone is judged: no ``ALLSMI_*`` variable overrides a key."""
    import os
    for name in list(os.environ):
        if name.startswith("ALLSMI_"):
            monkeypatch.delenv(name)


def judged(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Any, str, str]:
    """The exit code, stdout and stderr of the config check every command runs."""
    return refusals.judged(capsys, config=path)


def assert_refused(case: Case, path: Path, code: Any, out: str, err: str) -> None:
    refusals.assert_refused(case.text, case.line, case.key, path, code, out, err)


@pytest.mark.parametrize("case", CASES)
def test_absurd_value_is_refused_with_file_line_and_key(case: Case, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.toml"
    path.write_text(case.text, encoding="utf-8")
    code, out, err = judged(path, capsys)
    assert_refused(case, path, code, out, err)


@pytest.mark.parametrize("key", NUMBERS, ids=lambda k: k.dotted)
def test_both_ends_of_each_range_are_accepted(key: Key, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The catalogue's ranges are the code's: each end (or just inside an open one) passes."""
    low = key.low if not key.low_open else (1 if key.whole else key.low + 1e-9)
    for value in (low, key.high):
        text = repr(int(value)) if key.whole or value == int(value) else repr(float(value))
        if key.dotted in ("serve.energy_max_gap_seconds", "ledger.max_gap_seconds") and value < 2:
            continue  # (below the sampling interval: refused, as the gap-below-interval cases)
        if key.table == "activity" and key.key == "host_cpu_fraction" and value <= 0.1:
            continue  # (not above quiet_cpu_fraction's default: refused, as documented)
        if key.table == "activity" and key.key == "quiet_cpu_fraction" and value >= 0.9:
            continue
        case = numeric_case(key, text)
        path = tmp_path / "config.toml"
        path.write_text(case.text, encoding="utf-8")
        code, out, err = judged(path, capsys)
        assert code == 0, f"{key.dotted} = {text} refused: {err}"


WHOLE = [key for key in NUMBERS if key.whole]


@pytest.mark.parametrize("key", WHOLE, ids=lambda k: k.dotted)
def test_every_whole_key_takes_one_rule(key: Key, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Whole, in every key whose range says so, is a TOML integer or a float with no fractional
    part (:func:`allsmi.schema.numbers.whole_setting`): ``history_size``, ``[ledger] interval_seconds``
    and ``workers`` took ``10.0`` where ``[serve] max_holder_series`` and ``[[rules]] index``
    refused it."""
    whole = 10.0 if key.low <= 10 <= key.high else float(key.low)
    path = tmp_path / "config.toml"
    path.write_text(numeric_case(key, repr(whole)).text, encoding="utf-8")
    code, out, err = judged(path, capsys)
    assert code == 0, f"{key.dotted} = {whole!r} refused: {err}"
    case = numeric_case(key, repr(whole + 0.5))
    path.write_text(case.text, encoding="utf-8")
    assert_refused(case, path, *judged(path, capsys))


def test_unknown_theme_is_refused_by_the_thorough_check(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``[dashboard] theme`` is judged among Textual's themes by ``allsmi doctor`` (and the
    dashboard) only; it is named there with its file, line and key."""
    path = tmp_path / "config.toml"
    path.write_text('# x\n[dashboard]\ntheme = "no-such-theme"\n', encoding="utf-8")
    found: list[Any] = []
    settings(str(path), None, None, None, parent={}, problems=found)
    assert [(p.line, p.key) for p in found] == [(3, "dashboard.theme")]
    assert str(path) in str(found[0])


#: From the outside: ``allsmi snapshot`` (its start-up fast path included) on a few cases.
OUTSIDE = [
    numeric_case(NUMBERS[0], "1e300"),
    numeric_case(NUMBERS[2], HUGE_INT),
    numeric_case(NUMBERS[1], "9" * 5000),  # (more digits than Python converts: tomllib's ValueError)
    numeric_case(next(k for k in NUMBERS if k.table == "serve"), '"5"'),
    numeric_case(next(k for k in NUMBERS if k.table == "attribution"), f"-{HUGE_INT}"),
    numeric_case(next(k for k in NUMBERS if k.key == "workers"), "2.5"),
    plain_case("export", "group_by", "1"),
    plain_case("export", "prometheus_user", "1"),
]


@pytest.mark.parametrize("case", OUTSIDE, ids=lambda c: f"{c.key}")
def test_cli_refuses_with_exit_2_from_the_outside(case: Case, tmp_path: Path) -> None:
    import os
    path = tmp_path / "config.toml"
    path.write_text(case.text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
    done = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", "mixed",
                           "--config", str(path)], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert_refused(case, path, done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("value", ["1.5", "true", "[1]", "-1", "nan"])
def test_a_rule_index_that_is_no_index_says_what_index_takes(value: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``[[rules]] index = 1.5`` (or ``true``) said "must be a non-empty string": an index is a
    whole device index or a glob, and the message says so (``1.0`` is whole, as in every
    whole-number setting: :func:`allsmi.schema.numbers.whole_setting`)."""
    path = tmp_path / "config.toml"
    path.write_text(f'[[rules]]\nresource_group = "a"\nindex = {value}\n', encoding="utf-8")
    code, out, err = judged(path, capsys)
    assert code == 2 and out == ""
    assert "line 3, key 'rules[1].index': must be a device index (0 to 2147483648, whole) or a " \
           "glob" in err, err

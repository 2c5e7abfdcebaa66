"""Configuration: discovery, precedence, validation errors naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.config import ConfigError, discover_path, load_config, parse_config
from allsmi.collection.groups import assign_groups
from allsmi.schema import DeviceSample

from .conftest import run_allsmi


def _err(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, Path("/etc/allsmi/config.toml"))
    return info.value


def test_discovery_order(tmp_path: Path) -> None:
    user = tmp_path / "xdg" / "allsmi" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert discover_path(None, env) == (user, False)
    assert discover_path(None, {**env, "ALLSMI_CONFIG": "/x.toml"}) == (Path("/x.toml"), True)
    assert discover_path("/flag.toml", {**env, "ALLSMI_CONFIG": "/x.toml"}) == (Path("/flag.toml"), True)


def test_relative_xdg_config_home_is_ignored(tmp_path: Path) -> None:
    """The XDG Base Directory spec: a relative ``$XDG_CONFIG_HOME`` is invalid and ignored, as if
    unset (``~/.config``), never resolved against the working directory."""
    home = tmp_path / "home"
    (home / ".config" / "allsmi").mkdir(parents=True)
    (home / ".config" / "allsmi" / "config.toml").write_text('[node]\nresource_group = "home"\n')
    (tmp_path / "relative" / "allsmi").mkdir(parents=True)  # (the working directory's: not it)
    (tmp_path / "relative" / "allsmi" / "config.toml").write_text('[node]\nresource_group = "cwd"\n')
    env = {"HOME": str(home), "XDG_CONFIG_HOME": "relative", "ALLSMI_CONFIG": ""}
    result = run_allsmi("doctor", "--simulate", "mixed", env=env, cwd=tmp_path, timeout=60)
    assert f"config {home / '.config' / 'allsmi' / 'config.toml'}" in result.stdout, result.stdout
    assert "default resource group 'home'" in result.stdout


def test_precedence_env_over_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[node]\nresource_group = "from-file"\n')
    assert load_config(path, {}).default_group == "from-file"
    assert load_config(path, {"ALLSMI_RESOURCE_GROUP": "from-env"}).default_group == "from-env"
    assert load_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "none")}).default_group == "default"


@pytest.mark.parametrize(("text", "line", "key", "fragment"), [
    ('[collector]\ninterval_seconds = "fast"\n', 2, "collector.interval_seconds", "number"),
    ('[collector]\n\nbackend_timeout_seconds = 0\n', 3, "collector.backend_timeout_seconds", "from 0.05 to 600"),
    ('[groups.a]\nprice_per_kwh = 0.1\ncurrency = "dollars"\n', 3, "groups.a.currency", "ISO 4217"),
    ('[groups.a]\nprice_per_kwh = 0.1\ncurrency = "RMB"\n', 3, "groups.a.currency", "ISO 4217"),
    ('[groups.a]\nlabels = { resource_group = "x" }\n', 2, "groups.a.labels.resource_group", "label"),
    ('[[rules]]\nresource_group = "a"\nvendor = "x"\n\n[[rules]]\nresource_group = "b"\n', 5, "rules[2]",
     "at least one"),
    ('[[rules]]\nvendor = "nvidia"\n', 1, "rules[1]", "resource_group"),
    ('[nodes]\n', 1, "nodes", "unknown key"),
    ('x = [\n', None, None, "invalid TOML"),
    ('[node]\nresource_group = "a"\nresource_group = "b"\n', 3, "node.resource_group", "invalid TOML"),
])
def test_errors_are_located(text: str, line: int | None, key: str | None, fragment: str) -> None:
    err = _err(text)
    assert err.line == line and err.key == key
    assert fragment in str(err) and "/etc/allsmi/config.toml" in str(err)


def test_a_label_name_with_a_trailing_newline_is_refused() -> None:
    """``$`` matched before a final newline: ``"team\\n"`` passed as a label name, and its series
    would have failed the whole scrape in Prometheus."""
    err = _err('[groups.a]\nlabels = { "team\\n" = "x" }\n')
    assert err.line == 2 and "label names must match" in str(err)


def test_rules_first_match_wins_and_partitions_follow_parent() -> None:
    config = parse_config("""
[[rules]]
resource_group = "a"
vendor = "nvidia"
index = "[0-3]"
[[rules]]
resource_group = "b"
model = "*h100*"
[[rules]]
resource_group = "host-pool"
host = "gpu-*"
""")
    def dev(i: int, vendor: str = "nvidia", parent: str | None = None, name: str = "NVIDIA H100") -> DeviceSample:
        return DeviceSample(id=f"{vendor}-{i}-{parent}", vendor=vendor, kind="gpu", backend=vendor, index=i,
                            name=name, parent=parent)
    out = assign_groups([dev(1), dev(5), dev(0, "amd", name="MI300X"), dev(0, parent="nvidia-5-None",
                                                                         name="MIG 1g.10gb")],
                        "node-1", config)
    assert [d.resource_group for d in out] == ["a", "b", "default", "b"]
    assert assign_groups([dev(0, "amd", name="MI300X")], "gpu-07", config)[0].resource_group == "host-pool"


def test_a_rule_can_name_the_backend_where_the_vendor_is_shared() -> None:
    """``vendor = "intel"`` matches every Intel backend; ``backend`` tells Gaudi from another."""
    config = parse_config("""
[[rules]]
resource_group = "max"
backend = "xpu"
[[rules]]
resource_group = "gaudi"
vendor = "intel"
backend = "gau*"
[[rules]]
resource_group = "other-intel"
vendor = "INTEL"
""")
    def dev(backend: str, i: int = 0) -> DeviceSample:
        return DeviceSample(id=f"{backend}-{i}", vendor="intel", kind="gpu", backend=backend, index=i)
    out = assign_groups([dev("gaudi"), dev("xpu"), dev("habana")], "node-1", config)
    assert [d.resource_group for d in out] == ["gaudi", "max", "other-intel"]
    err = _err('[[rules]]\nresource_group = "a"\nbackend = 3\n')
    assert err.line == 3 and err.key == "rules[1].backend"


def test_backend_rules_group_a_simulated_snapshot(tmp_path: Path) -> None:
    """From the outside: a ``backend`` rule assigns the Gaudi devices of the mixed scenario."""
    import json
    path = tmp_path / "c.toml"
    path.write_text('[[rules]]\nresource_group = "gaudi-pool"\nbackend = "gaudi"\n')
    result = run_allsmi("snapshot", "--simulate", "mixed", "--config", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)["devices"]
    gaudi = [d for d in devices if d["backend"] == "gaudi"]
    assert gaudi and all(d["resource_group"] == "gaudi-pool" for d in gaudi)
    assert all(d["resource_group"] != "gaudi-pool" for d in devices if d["backend"] != "gaudi")


def test_unknown_backend_in_config_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[backends]\nenabled = ["nvidia", "nvidai"]\n')
    result = run_allsmi("snapshot", "--config", str(path))
    assert result.returncode == 2
    assert "line 2" in result.stderr and "backends.enabled" in result.stderr and "nvidai" in result.stderr


# -- every setting has a range (issue 9, item 8) ------------------------------------------

@pytest.mark.parametrize("flags, fragment", [
    (("--interval", "1e300"), "--interval"),
    (("--interval", "inf"), "--interval"),
    (("--interval", "nan"), "expected a number from 0.05 to 3600, got 'nan'"),
    (("--interval", "0"), "--interval"),
    (("--timeout", "1e300"), "--timeout"),
    (("--timeout", "nan"), "expected a number from 0.05 to 600, got 'nan'"),
])
@pytest.mark.parametrize("command", ["record", "snapshot"])
def test_absurd_flags_exit_2_before_starting(tmp_path: Path, command: str,
                                             flags: tuple[str, ...], fragment: str) -> None:
    extra = ("--ledger", str(tmp_path / "l.db")) if command == "record" else ()
    result = run_allsmi(command, "--simulate", "mixed", *flags, *extra,
                        env={"XDG_CONFIG_HOME": str(tmp_path), "ALLSMI_CONFIG": ""}, timeout=30)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "l.db").exists()


@pytest.mark.parametrize(("text", "line", "key"), [
    ("[collector]\ninterval_seconds = 1e300\n", 2, "collector.interval_seconds"),
    ("[collector]\ninterval_seconds = inf\n", 2, "collector.interval_seconds"),
    ("[collector]\ninterval_seconds = nan\n", 2, "collector.interval_seconds"),
    ("[collector]\nbackend_timeout_seconds = 1e300\n", 2, "collector.backend_timeout_seconds"),
    ("[collector]\nhistory_size = 100000000000\n", 2, "collector.history_size"),
    ("[collector]\nhistory_size = 2.5\n", 2, "collector.history_size"),
    ("[groups.a]\nprice_per_device_hour = 1e300\ncurrency = \"EUR\"\n", 2,
     "groups.a.price_per_device_hour"),
    ("[ledger]\nretention_days = 1e300\n", 2, "ledger.retention_days"),
    ("[ledger]\nrollup_retention_days = 1e12\n", 2, "ledger.rollup_retention_days"),
    ("[ledger]\n\nmax_gap_seconds = 1e300\n", 3, "ledger.max_gap_seconds"),
    ("[ledger]\ninterval_seconds = 1e300\n", 2, "ledger.interval_seconds"),
    ("[export]\ntimeout_seconds = 1e300\n", 2, "export.timeout_seconds"),
])
def test_absurd_config_values_exit_2_naming_file_line_and_key(tmp_path: Path, text: str, line: int,
                                                              key: str) -> None:
    path = tmp_path / "allsmi.toml"
    path.write_text(text)
    command = ("export", "--period", "yesterday") if key.startswith("export.") else \
        ("record", "--simulate", "mixed")
    result = run_allsmi(*command, "--config", str(path), "--ledger", str(tmp_path / "l.db"),
                        timeout=30)
    assert result.returncode == 2, result.stderr
    assert f"{path}, line {line}, key '{key}'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_documented_ranges_match_the_code() -> None:
    """docs/configuration.md's range table states the bounds the code enforces."""
    from allsmi.accounting import settings
    from allsmi.cli.common import MAX_SIMULATE_SPEED
    from allsmi.config import HISTORY_RANGE, INTERVAL_RANGE, MAX_PRICE, TIMEOUT_RANGE
    import re
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    doc = re.sub(r"<!-- /?range[^>]*-->", "", doc)  # generated ranges (allsmi/cli/docranges.py)
    for needle in (f"`interval_seconds` | {INTERVAL_RANGE[0]:g} to {INTERVAL_RANGE[1]:g}",
                   f"`backend_timeout_seconds` | {TIMEOUT_RANGE[0]:g} to {TIMEOUT_RANGE[1]:g}",
                   f"`history_size` | {HISTORY_RANGE[0]:g} to {HISTORY_RANGE[1]:,}",
                   f"0 to {MAX_PRICE:g}", f"{settings.MAX_RETENTION_DAYS:,.0f}",
                   f"{settings.MAX_GAP_SECONDS:,.0f}", f"{MAX_SIMULATE_SPEED:,.0f}"):
        assert needle in doc, needle


def test_collector_loop_survives_a_failing_cycle() -> None:
    """A cycle that raises is logged and counted; the thread goes on collecting."""
    import threading
    import time

    from allsmi.collection.collector import Collector
    from allsmi.collection.host import HostSampler

    class Flaky(HostSampler):
        calls = 0

        def sample(self):  # type: ignore[no-untyped-def]
            Flaky.calls += 1
            if Flaky.calls % 2:
                raise OverflowError("cannot convert float infinity to integer")
            return super().sample()

    collector = Collector([], parse_config(""), interval_seconds=0.05, host_sampler=Flaky())
    try:
        collector.start()
        deadline = time.monotonic() + 30
        while (collector.cycle_errors < 3 or collector.latest is None) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert collector.cycle_errors >= 3 and collector.latest is not None
        assert any(t.name == "allsmi-collector" and t.is_alive() for t in threading.enumerate())
    finally:
        collector.close()


# -- issue 32, item 12: every command checks the whole file; doctor lists every problem --------

TYPOS = '[serve]\nbogus = 1\n\n[export]\nbogus = 1\n\n[ledger]\nbogus_key = 1\n'


@pytest.mark.parametrize("command", [
    ["snapshot", "--simulate", "mixed"],
    ["export", "--simulate", "mixed", "--period", "yesterday"],
    ["idle", "--simulate", "mixed", "--period", "yesterday"],
    ["record", "--simulate", "mixed", "--ledger", "{tmp}/l.db"],
    ["serve", "--simulate", "mixed", "--listen", "127.0.0.1:1"],
    ["view", "--simulate", "mixed"],
])
def test_every_command_refuses_a_typo_in_any_table(tmp_path: Path, command: list[str]) -> None:
    config = tmp_path / "config.toml"
    for text, line, key in ((TYPOS, 2, "serve.bogus"), ("[export]\nbogus = 1\n", 2, "export.bogus"),
                            ("[collector]\n\n[ledger]\nbogus_key = 1\n", 4, "ledger.bogus_key"),
                            ("[dashboard]\nbogus = 1\n", 2, "dashboard.bogus"),
                            ("[dashboard]\nsort = 'bogus'\n", 2, "dashboard.sort"),
                            ("[export]\ntz = 'Mars/Olympus'\n", 2, "export.tz"),
                            ("[export]\nprometheus = 'not a url'\n", 2, "export.prometheus")):
        config.write_text(text)
        result = run_allsmi(*[a.format(tmp=tmp_path) for a in command], "--config", str(config))
        assert result.returncode == 2, (command, text, result.stderr)
        assert result.stdout == "", command
        assert f"{config}, line {line}, key '{key}'" in result.stderr, (command, result.stderr)
    assert not (tmp_path / "l.db").exists()


def test_doctor_reports_every_problem_and_exits_2(tmp_path: Path) -> None:
    import json
    config = tmp_path / "config.toml"
    config.write_text('[collector]\ninterval_seconds = 2\nbogus_core = 1\n\n[serve]\nbogus = 1\n'
                      'listen = "nonsense"\n\n[export]\nbogus = 1\n\n[ledger]\nbogus_key = 1\n'
                      'interval_seconds = 7\n\n[accounting]\nidle_threshold_percent = 500\n\n'
                      '[dashboard]\ntheme = "nope"\n\n[activity]\ninput_read_bytes_per_second = -1\n'
                      'host_cpu_fraction = 0.05\n')
    result = run_allsmi("doctor", "--json", "--simulate", "mixed", "--config", str(config))
    assert result.returncode == 2, result.stderr
    report = json.loads(result.stdout)  # the whole report, diagnosed with the valid keys
    assert report["backends"] and report["config"] == str(config)
    found = [(p["line"], p["key"]) for p in report["config_problems"]]
    assert found == [(3, "collector.bogus_core"), (6, "serve.bogus"), (7, "serve.listen"),
                     (10, "export.bogus"), (13, "ledger.bogus_key"),
                     (14, "ledger.interval_seconds"), (17, "accounting.idle_threshold_percent"),
                     (20, "dashboard.theme"), (23, "activity.input_read_bytes_per_second"),
                     (24, "activity.host_cpu_fraction")]
    assert all(str(config) in p["text"] for p in report["config_problems"])
    for problem in report["config_problems"]:
        assert problem["text"] in result.stderr
    text = run_allsmi("doctor", "--simulate", "mixed", "--config", str(config))
    assert text.returncode == 2 and "config problems: 10" in text.stdout


def test_activity_thresholds_that_cross_blame_the_key_the_file_sets(tmp_path: Path) -> None:
    """quiet_cpu_fraction must stay below host_cpu_fraction: a file setting only one of them
    is told about that one, on its line."""
    config = tmp_path / "config.toml"
    for text, key in (("[activity]\nhost_cpu_fraction = 0.05\n", "activity.host_cpu_fraction"),
                      ("[activity]\nquiet_cpu_fraction = 0.95\n", "activity.quiet_cpu_fraction")):
        config.write_text(text)
        result = run_allsmi("snapshot", "--simulate", "mixed", "--config", str(config))
        assert result.returncode == 2 and result.stdout == ""
        assert f"{config}, line 2, key '{key}'" in result.stderr, result.stderr


def test_doctor_with_a_good_file_reports_no_problem(tmp_path: Path) -> None:
    import json
    config = tmp_path / "config.toml"
    config.write_text('[serve]\nlisten = ":9477"\n\n[ledger]\ninterval_seconds = 60\n')
    result = run_allsmi("doctor", "--json", "--simulate", "mixed", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config_problems"] == []


def test_a_snapshot_checks_serve_without_loading_the_command_line(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys
    config = tmp_path / "config.toml"
    config.write_text('[serve]\nlisten = ":9477"\n\n[ledger]\ninterval_seconds = 60\n')
    code = ("import sys, atexit, json\n"
            "atexit.register(lambda: sys.stderr.write('MODULES=' + json.dumps(sorted(sys.modules))))\n"
            f"sys.argv = ['allsmi', 'snapshot', '--simulate', 'mixed', '--config', {str(config)!r}]\n"
            "from allsmi.cli.main import main\nmain()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    modules = set(json.loads(result.stderr.split("MODULES=")[-1]))
    assert "click" not in modules and "textual" not in modules


def test_allsmi_backends_picks_the_backends_over_the_file(tmp_path: Path) -> None:
    """$ALLSMI_BACKENDS runs only the backends it names, over [backends] enabled; an unknown or
    empty list exits 2 naming the variable."""
    import json
    config = tmp_path / "config.toml"
    config.write_text('[backends]\nenabled = ["amd"]\n')
    out = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json", "--config", str(config),
                     env={"ALLSMI_BACKENDS": "nvidia, gaudi"})
    assert out.returncode == 0, out.stderr
    assert {d["backend"] for d in json.loads(out.stdout)["devices"]} == {"nvidia", "gaudi"}
    for value in ("nvidia,bogus", " , "):
        bad = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json",
                         env={"ALLSMI_BACKENDS": value})
        assert bad.returncode == 2 and bad.stdout == "", bad.stderr
        assert "$ALLSMI_BACKENDS" in bad.stderr and "installed: " in bad.stderr


@pytest.mark.parametrize("text, key", [
    ('[groups."inf\\u000aerence"]\nprice_per_device_hour = 1.0\n', "groups.inf\\nerence"),
    ('[[rules]]\nvendor = "amd"\nresource_group = "a\\u202eb"\n', "rules[1].resource_group"),
    ('[node]\nresource_group = "' + "g" * 300 + '"\n', "node.resource_group"),
])
def test_a_group_name_devices_could_never_carry_is_refused(tmp_path: Path, text: str, key: str) -> None:
    """A device's group is cleaned text (controls become spaces, long names are cut): a group
    named otherwise would never be matched by its prices or budget, so the file is refused."""
    config = tmp_path / "config.toml"
    config.write_text(text)
    out = run_allsmi("snapshot", "--simulate", "mixed", "--config", str(config))
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert f"key '{key}'" in out.stderr and "printable text" in out.stderr
    assert "\n" not in out.stderr.rstrip("\n")  # one line, the key's newline escaped
    env = run_allsmi("snapshot", "--simulate", "mixed", env={"ALLSMI_RESOURCE_GROUP": "x\ty"})
    assert env.returncode == 2 and "$ALLSMI_RESOURCE_GROUP" in env.stderr

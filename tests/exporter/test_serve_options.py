"""How ``allsmi serve`` merges flags, environment, the ``[serve]`` table and defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.cli.serve import DEFAULT_LISTEN, parse_listen, resolve_options
from allsmi.config import ConfigError, parse_config

CONFIG = """\
[collector]
interval_seconds = 4

[serve]
listen = "127.0.0.1:9555"
processes = true
web_config = "web.yml"
energy_max_gap_seconds = 90
ledger = "ledger.db"
"""


def resolve(flags=None, env=None, text=CONFIG, interval=None):
    config = parse_config(text, Path("/etc/allsmi/config.toml"))
    return resolve_options(flags or {}, config, env or {}, interval)


def test_file_values_apply_with_paths_relative_to_the_file() -> None:
    o = resolve()
    assert (o.host, o.port, o.processes, o.energy_max_gap) == ("127.0.0.1", 9555, True, 90.0)
    assert o.web_config == Path("/etc/allsmi/web.yml") and o.ledger == Path("/etc/allsmi/ledger.db")
    assert o.interval == 4.0


def test_environment_beats_file_and_flags_beat_both() -> None:
    env = {"ALLSMI_SERVE_LISTEN": "127.0.0.1:9666", "ALLSMI_SERVE_PROCESSES": "false",
           "ALLSMI_SERVE_ENERGY_MAX_GAP": "45", "ALLSMI_SERVE_INTERVAL": "3"}
    o = resolve(env=env)
    assert (o.port, o.processes, o.energy_max_gap, o.interval) == (9666, False, 45.0, 3.0)
    o = resolve({"listen": "[::1]:9777", "processes": True, "energy_max_gap_seconds": 5.0},
                env=env, interval=0.5)
    assert (o.host, o.port, o.processes, o.energy_max_gap, o.interval) == ("::1", 9777, True, 5.0, 0.5)


def test_defaults() -> None:
    o = resolve(text="")
    assert f"{o.host}:{o.port}" == DEFAULT_LISTEN
    assert o.processes is False and o.web_config is None and o.ledger is None
    assert o.energy_max_gap == 30.0  # max(30 s, 3 x 2 s default interval)
    assert resolve(text="[collector]\ninterval_seconds = 20\n").energy_max_gap == 60.0


def test_listen_forms() -> None:
    assert parse_listen(":9477") == ("", 9477)  # every interface, IPv4 and IPv6
    assert parse_listen("0.0.0.0:9477") == ("0.0.0.0", 9477)
    assert parse_listen("[::]:9477") == ("::", 9477)
    assert parse_listen("localhost:1") == ("localhost", 1)
    for bad in ("9477", "host:", "host:70000", "[::1]9477"):
        with pytest.raises(ValueError):
            parse_listen(bad)


@pytest.mark.parametrize("body, key", [
    ("[serve]\nlisten = 5\n", "serve.listen"),
    ("[serve]\nprocesses = \"maybe\"\n", "serve.processes"),
    ("[serve]\nenergy_max_gap_seconds = -1\n", "serve.energy_max_gap_seconds"),
    ("[serve]\nlisten = \"nowhere\"\n", "serve.listen"),
    ("[serve]\nport = 1\n", "serve.port"),
])
def test_bad_serve_values_name_the_key(body: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(text=body)
    assert err.value.key == key and err.value.line is not None


def test_default_gap_follows_accelerated_simulation_time() -> None:
    env = {"ALLSMI_SIMULATE_SPEED": "60"}
    config = parse_config("")
    assert resolve_options({}, config, env, 1.0, simulate=True).energy_max_gap == 30.0 * 60
    assert resolve_options({}, config, env, 1.0, simulate=False).energy_max_gap == 30.0
    # A configured gap is in real seconds too: simulated time runs 60 times faster.
    assert resolve_options({"energy_max_gap_seconds": 7.0}, config, env, 1.0,
                           simulate=True).energy_max_gap == 7.0 * 60


def test_max_holder_series_from_flag_environment_file_or_default() -> None:
    assert resolve().max_holder_series == 1000
    assert resolve(text=CONFIG + "max_holder_series = 50\n").max_holder_series == 50
    assert resolve(env={"ALLSMI_SERVE_MAX_HOLDER_SERIES": "7"},
                   text=CONFIG + "max_holder_series = 50\n").max_holder_series == 7
    assert resolve(flags={"max_holder_series": 0}).max_holder_series == 0
    for bad in ("-1", "1.5", "true", "2000000"):
        with pytest.raises(ConfigError, match="line 10.*max_holder_series"):
            resolve(text=CONFIG + f"max_holder_series = {bad}\n")
    with pytest.raises(ValueError, match="ALLSMI_SERVE_MAX_HOLDER_SERIES"):
        resolve(env={"ALLSMI_SERVE_MAX_HOLDER_SERIES": "many"})

"""Every key of every other input a user gives allsmi, fed an absurd value: the exporter's web
configuration (``serve --web-config``, and its reload), the dashboard's hosts file
(``view --hostfile``), the Prometheus password, token and CA files (flags or ``[export]``) and
the ``ALLSMI_*`` environment variables. Each refusal exits 2 with nothing on stdout, no
traceback, and one line naming the file (with the line and the key where the format has them)
or the variable. Most cases run in this process, through the function the command calls; a few
run the command itself (``TestFromOutside``)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import click
import pytest

from allsmi.accounting.prometheus.client import access_settings
from allsmi.cli.common import backends_from_environment, fail, simulation_speed
from allsmi.cli.serveoptions import resolve_options
from allsmi.config import ConfigError, load_config
from allsmi.dashboard.sources import cluster
from allsmi.dashboard.sources.cluster import HostfileError, read_hostfile
from allsmi.exporter import webconfig
from allsmi.exporter.webconfig import WebConfigError, load_web_config
from allsmi.exporter.webreload import WebConfigWatcher

from .conftest import require_tool

HASH = "$2b$04$" + "a" * 53  # a bcrypt hash's shape (cost 04)
TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def judged(call: Callable[[], Any], capsys: pytest.CaptureFixture[str]) -> tuple[Any, str, str]:
    """The exit code, stdout and stderr of ``call`` as the command sees them: the error it
    raises said with :func:`allsmi.cli.common.fail` (what each command does with it)."""
    code: Any = 0
    try:
        call()
    except (WebConfigError, HostfileError, ConfigError, ValueError) as exc:
        try:
            raise fail(str(exc))
        except click.exceptions.Exit as stop:
            code = stop.exit_code
    except click.exceptions.Exit as stop:
        code = stop.exit_code
    except Exception as exc:  # noqa: BLE001 - a crash is what these tests look for
        code = f"crashed: {exc!r}"
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(code: Any, out: str, err: str, names: str, line: int | None = None,
                   key: str | None = None, says: str = "") -> None:
    assert code == 2, f"exit {code}; stderr: {err!r}"
    assert out == ""
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and len(err) < 2000, err
    assert names in err, err
    if line is not None:
        assert f", line {line}" in err, err
    if key is not None:
        assert f"key '{key}'" in err, err
    assert says in err, err


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("openssl", "openssl")
    where = tmp_path_factory.mktemp("certs")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                    "-keyout", str(where / "server.key"), "-out", str(where / "server.crt"),
                    "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=60)
    (where / "empty.pem").write_bytes(b"")
    (where / "adir").mkdir()
    return where


# (name, the file's text, the line, the key, what the message says)
WEB_CASES = [
    ("unknown key", "bogus: 1\n", 1, "bogus", "unknown key"),
    ("min_version a list", TLS + "  min_version: [1]\n", 4, "tls_server_config.min_version", "TLS13"),
    ("min_version a number", TLS + "  min_version: 12\n", 4, "tls_server_config.min_version", "TLS10"),
    ("max_version below min_version", TLS + "  min_version: TLS13\n  max_version: TLS12\n", 5,
     "tls_server_config.max_version", "below min_version"),
    ("client_auth_type a list", TLS + "  client_auth_type: [x]\n", 4,
     "tls_server_config.client_auth_type", "NoClientCert"),
    ("client_auth_type a mapping", TLS + "  client_auth_type: {a: 1}\n", 4,
     "tls_server_config.client_auth_type", "NoClientCert"),
    ("client_auth_type unknown", TLS + "  client_auth_type: Sometimes\n", 4,
     "tls_server_config.client_auth_type", "NoClientCert"),
    ("prefer_server_cipher_suites text", TLS + "  prefer_server_cipher_suites: maybe\n", 4,
     "tls_server_config.prefer_server_cipher_suites", "true or false"),
    ("cert_file a huge path", "tls_server_config:\n  cert_file: " + "a" * 5000 + "\n  key_file: k\n",
     2, "tls_server_config.cert_file", "cannot use"),
    ("cert_file a control character", 'tls_server_config:\n  cert_file: "a\\x00b"\n  key_file: k\n',
     2, "tls_server_config.cert_file", "control characters"),
    ("cert_file a directory", "tls_server_config:\n  cert_file: adir\n  key_file: server.key\n",
     2, "tls_server_config.cert_file", "is a directory"),
    ("cert_file empty", "tls_server_config:\n  cert_file: ' '\n  key_file: server.key\n",
     2, "tls_server_config.cert_file", "file path"),
    ("cert_file a number", "tls_server_config:\n  cert_file: 12\n  key_file: server.key\n",
     2, "tls_server_config.cert_file", "file path"),
    ("key_file the certificate", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n",
     3, "tls_server_config.key_file", "cannot load"),
    ("client_ca_file empty", TLS + "  client_auth_type: RequireAndVerifyClientCert\n"
     "  client_ca_file: empty.pem\n", 5, "tls_server_config.client_ca_file", "cannot load"),
    ("hash not ASCII", 'basic_auth_users:\n  u: "$2b$10$' + "é" * 53 + '"\n', 2,
     "basic_auth_users.u", "bcrypt"),
    ("hash cost not ASCII digits", 'basic_auth_users:\n  u: "$2b$²²$' + "a" * 53 + '"\n', 2,
     "basic_auth_users.u", "from 04 to 31"),
    ("hash cost too high", 'basic_auth_users:\n  u: "$2b$99$' + "a" * 53 + '"\n', 2,
     "basic_auth_users.u", "from 04 to 31"),
    ("hash a list", "basic_auth_users:\n  u: [1]\n", 2, "basic_auth_users.u", "bcrypt"),
    ("users a list", "basic_auth_users: [1]\n", 1, "basic_auth_users", "bcrypt"),
    ("user name a control character", f'basic_auth_users:\n  "u\\x01": "{HASH}"\n', 1,
     "basic_auth_users", "control character"),
    ("header a control character", 'http_server_config:\n  headers:\n    X-Frame-Options: "de\\x01ny"\n',
     3, "http_server_config.headers.X-Frame-Options", "control characters"),
    ("header not allowed", "http_server_config:\n  headers:\n    Server: x\n", 3,
     "http_server_config.headers.Server", "may be set"),
    ("header a list", "http_server_config:\n  headers:\n    X-Frame-Options: [deny]\n", 3,
     "http_server_config.headers.X-Frame-Options", "text value"),
    ("http2 text", "http_server_config:\n  http2: maybe\n", 2, "http_server_config.http2",
     "true or false"),
    ("duplicate key", "basic_auth_users: {}\nbasic_auth_users: {}\n", 2, "basic_auth_users",
     "duplicate"),
    ("not a mapping", "- 1\n", None, None, "must be a mapping"),
    ("nested too deeply", "a: " + "[" * 3000 + "]" * 3000 + "\n", None, None, "nested too deeply"),
    ("malformed", "a: [\n", 2, None, "malformed YAML"),
]


@pytest.mark.parametrize("name, text, line, key, says", WEB_CASES, ids=[c[0] for c in WEB_CASES])
def test_web_config_keys(certs: Path, capsys: pytest.CaptureFixture[str], name: str, text: str,
                         line: int | None, key: str | None, says: str) -> None:
    web = certs / f"web-{abs(hash(name))}.yml"
    web.write_text(text, encoding="utf-8")
    assert_refused(*judged(lambda: load_web_config(web), capsys), str(web), line, key, says)


@pytest.mark.parametrize("name", ["not UTF-8", "huge", "a directory", "missing", "unreadable"])
def test_web_config_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    web, line, says = tmp_path / "web.yml", None, ""
    if name == "not UTF-8":
        web.write_bytes(b"basic_auth_users:\n  u: \xff\n")
        line, says = 2, "not UTF-8"
    elif name == "huge":
        web.write_bytes(b"#" * (webconfig.MAX_WEB_CONFIG_BYTES + 1))
        says = f"from 0 to {webconfig.MAX_WEB_CONFIG_BYTES}"
    elif name == "a directory":
        web.mkdir()
    elif name == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        web.write_text("{}\n")
        web.chmod(0)
    assert_refused(*judged(lambda: load_web_config(web), capsys), str(web), line, None, says)


@pytest.mark.parametrize("change", [
    TLS + "  min_version: [1]\n", TLS + "  min_version: TLS13\n  max_version: TLS12\n",
    "tls_server_config: {key_file: server.key, cert_file: " + "a" * 5000 + "}\n",
], ids=["a list", "below min_version", "a huge path"])
def test_a_bad_reload_keeps_the_web_config_in_use(certs: Path, caplog: pytest.LogCaptureFixture,
                                                  change: str) -> None:
    web = certs / "reloaded.yml"
    web.write_text(TLS)
    watcher = WebConfigWatcher(load_web_config(web), lambda new: None)
    kept = watcher.web
    web.write_text(change)
    with caplog.at_level(logging.ERROR, logger="allsmi.exporter.webreload"):
        assert watcher.check(now=0.0) is False
    assert watcher.web is kept and watcher.last_reload_ok is False and watcher.reload_errors == 1
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert str(web) in said and ", line " in said and "key 'tls_server_config." in said, said


# (name, the hosts file's bytes, the line, what the message says)
HOST_CASES = [
    ("a control character", b"gpu1:9477\nhttp://gpu\x012:9477\n", 2, "control character"),
    ("an escape sequence", b"gpu\x1b[31m:9477\n", 1, "control character"),
    ("a space", b"http://gpu 1:9477\n", 1, "space"),
    ("port 0", b"gpu1:0\n", 1, "from 1 to 65535"),
    ("port too large", b"gpu1:99999\n", 1, "from 1 to 65535"),
    ("a negative port", b"gpu1:-1\n", 1, "from 1 to 65535"),
    ("a host name too long", b"h" * 300 + b":9477\n", 1, "253"),
    ("broken IPv6", b"http://[::1:9477\n", 1, "not an http(s) URL"),
    ("not http", b"ftp://gpu1:21\n", 1, "not an http(s) URL"),
    ("not UTF-8", b"gpu1:9477\n\xff\n", 2, "not UTF-8"),
    ("empty", b"", None, "no hosts"),
    ("only comments", b"# gpu1:9477\n", None, "no hosts"),
]


@pytest.mark.parametrize("name, data, line, says", HOST_CASES, ids=[c[0] for c in HOST_CASES])
def test_hostfile_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: bytes,
                        line: int | None, says: str) -> None:
    hosts = tmp_path / "hosts.txt"
    hosts.write_bytes(data)
    assert_refused(*judged(lambda: read_hostfile(hosts), capsys), str(hosts), line, None, says)


@pytest.mark.parametrize("name", ["huge", "a directory", "missing"])
def test_hostfile_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    hosts, says = tmp_path / "hosts.txt", "cannot read"
    if name == "huge":
        hosts.write_bytes(b"#" * (cluster.MAX_HOSTFILE_BYTES + 1))
        says = f"from 0 to {cluster.MAX_HOSTFILE_BYTES}"
    elif name == "a directory":
        hosts.mkdir()
    assert_refused(*judged(lambda: read_hostfile(hosts), capsys), str(hosts), None, None, says)


# (the [export] key, the file's bytes, what the message says); each given by the config file
SECRET_CASES = [
    ("prometheus_bearer_token_file", b"tok\x1ben\n", "control character"),
    ("prometheus_bearer_token_file", b"tok\x00en\n", "control character"),
    ("prometheus_bearer_token_file", "t\u20acken\n".encode(), "not ASCII"),
    ("prometheus_bearer_token_file", b"", "one non-empty line"),
    ("prometheus_bearer_token_file", b"one\ntwo\n", "one non-empty line"),
    ("prometheus_bearer_token_file", b"\xff\xfe", "not UTF-8"),
    ("prometheus_bearer_token_file", b"x" * 70000, "larger than"),
    ("prometheus_bearer_token_file", None, "is a directory"),
    ("prometheus_bearer_token_file", "fifo", "it is a FIFO"),
    ("prometheus_ca_file", "fifo", "it is a FIFO"),
    ("prometheus_password_file", b"pass\x7fword\n", "control character"),
    ("prometheus_password_file", b"", "one non-empty line"),
    ("prometheus_ca_file", b"", "cannot load the CA file"),
    ("prometheus_ca_file", b"not a certificate\n", "cannot load the CA file"),
    ("prometheus_ca_file", None, "cannot load the CA file"),
]


@pytest.mark.parametrize("key, data, says", SECRET_CASES)
def test_prometheus_access_files_from_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 key: str, data: bytes | str | None,
                                                 says: str) -> None:
    secret = tmp_path / "secret"
    if data is None:
        secret.mkdir()
    elif data == "fifo":  # (no writer: read, it would wait forever)
        os.mkfifo(secret)
    else:
        secret.write_bytes(data)
    user = 'prometheus_user = "alice"\n' if key == "prometheus_password_file" else ""
    config = tmp_path / "config.toml"
    config.write_text(f'[export]\n{user}{key} = "secret"\n')
    code, out, err = judged(lambda: access_settings(load_config(str(config))), capsys)
    assert_refused(code, out, err, str(config), 3 if user else 2, f"export.{key}", says)
    assert str(secret) in err  # the secret's file too, never its content


def test_a_token_file_by_flag_names_the_file(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_bytes(b"a\x01b\n")
    assert_refused(*judged(lambda: access_settings(load_config(None), token_file=str(token)),
                           capsys), str(token), None, None, "control character")


# (the variable, its value, what the message says)
SERVE_ENV = [
    ("ALLSMI_SERVE_LISTEN", "nowhere", "from 0 to 65535"),
    ("ALLSMI_SERVE_LISTEN", "127.0.0.1:\u00b2", "from 0 to 65535"),
    ("ALLSMI_SERVE_LISTEN", "127.0.0.1:99999", "from 0 to 65535"),
    ("ALLSMI_SERVE_LISTEN", "127.0.0.1:" + "9" * 5000, "from 0 to 65535"),  # (no int() limit)
    ("ALLSMI_SERVE_LISTEN", "local\x01host:9477", "from 0 to 65535"),
    ("ALLSMI_SERVE_INTERVAL", "nan", "from 0.05 to 3600"),
    ("ALLSMI_SERVE_INTERVAL", "1e999", "from 0.05 to 3600"),
    ("ALLSMI_SERVE_INTERVAL", "-1", "from 0.05 to 3600"),
    ("ALLSMI_SERVE_PROCESSES", "maybe", "true or false"),
    ("ALLSMI_SERVE_ENERGY_MAX_GAP", "0", "at most 604800"),
    ("ALLSMI_SERVE_MAX_HOLDER_SERIES", "-1", "from 0 to 1000000"),
    ("ALLSMI_SERVE_MAX_HOLDER_SERIES", "\u00b2", "from 0 to 1000000"),
    ("ALLSMI_SERVE_MAX_HOLDER_SERIES", "9" * 30, "from 0 to 1000000"),
    ("ALLSMI_SERVE_MAX_HOLDER_SERIES", "9" * 5000, "from 0 to 1000000"),  # (not echoed whole)
]


@pytest.mark.parametrize("var, value, says", SERVE_ENV)
def test_serve_environment(capsys: pytest.CaptureFixture[str], var: str, value: str,
                           says: str) -> None:
    call = lambda: resolve_options({}, load_config(None, environ={}), {var: value}, None)  # noqa: E731
    assert_refused(*judged(call, capsys), f"${var}", says=says)


def test_the_listen_flag_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    call = lambda: resolve_options({"listen": "nowhere"}, load_config(None, environ={}), {}, None)  # noqa: E731
    assert_refused(*judged(call, capsys), "--listen:", says="from 0 to 65535")


@pytest.mark.parametrize("var, value, says", [
    ("ALLSMI_SIMULATE_SPEED", "fast", "at most 1e+06"),
    ("ALLSMI_SIMULATE_SPEED", "-1", "above 0"),
    ("ALLSMI_BACKENDS", "nosuch", "unknown backend"),
    ("ALLSMI_BACKENDS", ",", "no backend named"),
    ("ALLSMI_HOSTNAME", "node\x01", ""),
    ("ALLSMI_RESOURCE_GROUP", "a\nb", ""),
])
def test_other_environment(capsys: pytest.CaptureFixture[str], var: str, value: str,
                           says: str) -> None:
    env = {var: value}
    calls: dict[str, Callable[[], Any]] = {
        "ALLSMI_SIMULATE_SPEED": lambda: simulation_speed(True, env),
        "ALLSMI_BACKENDS": lambda: backends_from_environment(load_config(None, environ={}), env),
    }
    call = calls.get(var, lambda: load_config(None, environ=env))
    assert_refused(*judged(call, capsys), var, says=says)


class TestFromOutside:
    """The commands themselves, each refused before it serves or fetches anything."""

    @staticmethod
    def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
        clean.update(env, ALLSMI_CONFIG=str(cwd / "none.toml"))
        (cwd / "none.toml").write_text("")
        return subprocess.run([sys.executable, "-m", "allsmi", *args], cwd=cwd, env=clean,
                              capture_output=True, text=True, timeout=60)

    def test_serve_refuses_a_web_config(self, certs: Path) -> None:
        web = certs / "outside.yml"
        web.write_text(TLS + "  client_auth_type: [x]\n")
        result = self.run(["serve", "--listen", "127.0.0.1:0", "--web-config", str(web)], certs)
        assert_refused(result.returncode, result.stdout, result.stderr, str(web), 4,
                       "tls_server_config.client_auth_type")

    def test_serve_refuses_a_listen_variable(self, tmp_path: Path) -> None:
        result = self.run(["serve"], tmp_path, ALLSMI_SERVE_LISTEN="127.0.0.1:\u00b2")
        assert_refused(result.returncode, result.stdout, result.stderr, "$ALLSMI_SERVE_LISTEN")

    def test_view_refuses_a_hostfile(self, tmp_path: Path) -> None:
        hosts = tmp_path / "hosts.txt"
        hosts.write_bytes(b"127.0.0.1:1\n127.0.0.1:0\n")
        result = self.run(["view", "--hostfile", str(hosts)], tmp_path)
        assert_refused(result.returncode, result.stdout, result.stderr, str(hosts), 2,
                       says="from 1 to 65535")

    @pytest.mark.parametrize("flag", ["--config", "--simulate", "--web-config", "--hostfile"])
    def test_an_endless_file_is_refused_as_too_large(self, tmp_path: Path, flag: str) -> None:
        """A log of gigabytes given for any input file: read up to its bound and refused, exit 2.
        Before, the configuration file was read until the memory ran out."""
        with open(tmp_path / "big.toml", "wb") as big:  # (sparse: 8 MiB of zeros)
            big.truncate(8 * 1024 * 1024)
        big_path = str(tmp_path / "big.toml")
        args = {"--config": ["--config", big_path, "snapshot", "--simulate", "mixed"],
                "--simulate": ["snapshot", "--simulate", big_path],
                "--web-config": ["serve", "--listen", "127.0.0.1:0", "--web-config", big_path],
                "--hostfile": ["view", "--hostfile", big_path]}[flag]
        result = self.run(args, tmp_path)
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stdout == "" and "Traceback" not in result.stderr
        assert "big.toml" in result.stderr and "too large" in result.stderr, result.stderr

    @pytest.mark.parametrize("kind", ["fifo", "socket", "/dev/zero"])
    @pytest.mark.parametrize("flag", ["--config", "ALLSMI_CONFIG", "doctor", "--simulate",
                                      "--web-config", "--hostfile"])
    def test_a_file_that_is_no_regular_file_is_refused_at_once(self, tmp_path: Path, flag: str,
                                                                kind: str) -> None:
        """A FIFO (no writer: read, it waits forever), a socket or a device (``/dev/zero``,
        endless) given for any input file is refused at once, exit 2, naming the file. Before, a
        FIFO given to ``--config``, ``$ALLSMI_CONFIG``, ``doctor`` or ``--simulate`` blocked
        forever. (``/dev/null`` stays the empty file: ``ALLSMI_CONFIG=/dev/null``.)"""
        import socket
        special = tmp_path / "special.toml"  # (a scenario file is a .toml)
        server = socket.socket(socket.AF_UNIX)
        if kind == "fifo":
            os.mkfifo(special)
        elif kind == "socket":
            server.bind(str(special))
        else:
            special.symlink_to(kind)
        args = {"--config": ["--config", str(special), "snapshot", "--simulate", "mixed"],
                "ALLSMI_CONFIG": ["snapshot", "--simulate", "mixed"],
                "doctor": ["doctor", "--config", str(special)],
                "--simulate": ["snapshot", "--simulate", str(special)],
                "--web-config": ["serve", "--listen", "127.0.0.1:0", "--web-config", str(special)],
                "--hostfile": ["view", "--hostfile", str(special)]}[flag]
        try:
            if flag == "ALLSMI_CONFIG":
                env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
                result = subprocess.run([sys.executable, "-m", "allsmi", *args], cwd=tmp_path,
                                        env={**env, "ALLSMI_CONFIG": str(special)},
                                        capture_output=True, text=True, timeout=60)
            else:
                result = self.run(args, tmp_path)
        finally:
            server.close()
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stdout == "" or flag == "doctor"  # (doctor lists what it found before)
        assert "Traceback" not in result.stderr
        assert str(special) in result.stderr, result.stderr
        assert "not a regular file" in result.stderr, result.stderr

    @pytest.mark.parametrize("source", ["--hosts", "--prometheus"])
    def test_a_ca_file_that_is_a_fifo_is_refused_at_once(self, tmp_path: Path,
                                                         source: str) -> None:
        """``allsmi view --ca-file`` given a FIFO (process substitution, a named pipe without a
        writer) exits 2 at once, naming it, as the ``[export]`` CA file does. Before, ``ssl``
        opened it to load the CAs and waited for a writer forever."""
        ca = tmp_path / "ca.pem"
        os.mkfifo(ca)
        result = self.run(["view", source, "https://127.0.0.1:1", "--ca-file", str(ca)],
                          tmp_path)
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stdout == "" and "Traceback" not in result.stderr
        assert str(ca) in result.stderr and "not a regular file" in result.stderr, result.stderr


@pytest.mark.parametrize("var", ["ALLSMI_CONFIG", "ALLSMI_LEDGER", "ALLSMI_SIMULATE_SPEED",
                                 "ALLSMI_SERVE_LISTEN", "ALLSMI_SERVE_INTERVAL",
                                 "ALLSMI_SERVE_WEB_CONFIG", "ALLSMI_SERVE_LEDGER",
                                 "ALLSMI_SERVE_ENERGY_MAX_GAP", "ALLSMI_SERVE_MAX_HOLDER_SERIES",
                                 "ALLSMI_SERVE_PROCESSES"])
def test_a_blank_variable_is_unset(tmp_path: Path, var: str) -> None:
    """docs/configuration.md: "An empty or blank (only spaces) variable is unset", for every
    variable (before, a blank ALLSMI_CONFIG was the file named " ", a blank ALLSMI_LEDGER the
    ledger " ", and the serve variables and the speed were refused)."""
    from allsmi.accounting.settings import ledger_settings
    from allsmi.config import discover_path
    blank = {var: "  "}
    assert discover_path(None, blank) == discover_path(None, {})
    config = load_config(None, environ={})
    assert ledger_settings(config, environ=blank).path == ledger_settings(config, environ={}).path
    assert simulation_speed(True, blank) == 1.0
    assert resolve_options({}, config, blank, None) == resolve_options({}, config, {}, None)

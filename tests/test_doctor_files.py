"""``allsmi doctor`` passes no config file a command would refuse: the files the config names
(``[serve] web_config``, ``[export]``'s password, bearer token and CA files) are read by doctor
as ``allsmi serve`` and ``allsmi export`` read them. A missing web configuration or an
unreadable token file passed doctor (exit 0) while serve and export exited 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SECRET = "SECRET-TOKEN-TEXT"
CONFIG = """[serve]
web_config = "missing-web.yml"

[export]
prometheus_bearer_token_file = "token"
prometheus_ca_file = "missing-ca.pem"
"""


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLSMI_")}
    env["XDG_CONFIG_HOME"] = str(cwd)
    return subprocess.run([sys.executable, "-m", "allsmi", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _config(tmp_path: Path) -> Path:
    (tmp_path / "token").write_text(f"{SECRET}\n{SECRET}-2\n")  # two lines: refused
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    return path


def test_doctor_names_each_file_the_commands_refuse(tmp_path: Path) -> None:
    config = _config(tmp_path)
    doctor = _run(tmp_path, "doctor", "--simulate", "mixed", "--json", "--config", str(config))
    assert doctor.returncode == 2, doctor.stderr
    problems = {p["key"]: p for p in json.loads(doctor.stdout)["config_problems"]}
    assert set(problems) == {"serve.web_config", "export.prometheus_bearer_token_file",
                             "export.prometheus_ca_file"}, problems
    assert problems["serve.web_config"]["line"] == 2
    assert "missing-web.yml" in problems["serve.web_config"]["message"]
    assert problems["export.prometheus_bearer_token_file"]["line"] == 5
    assert "must hold one non-empty line" in problems["export.prometheus_bearer_token_file"]["message"]
    assert problems["export.prometheus_ca_file"]["line"] == 6
    assert SECRET not in doctor.stdout + doctor.stderr  # the file named, never its content

    serve = _run(tmp_path, "serve", "--simulate", "mixed", "--listen", "127.0.0.1:0",
                 "--config", str(config))
    assert serve.returncode == 2 and serve.stdout == ""
    assert problems["serve.web_config"]["text"] in serve.stderr, serve.stderr  # the same words

    export = _run(tmp_path, "export", "--prometheus", "http://127.0.0.1:1", "--period",
                  "yesterday", "--config", str(config))
    assert export.returncode == 2 and export.stdout == ""
    assert problems["export.prometheus_bearer_token_file"]["text"] in export.stderr, export.stderr
    assert SECRET not in export.stderr


def test_the_files_stop_no_other_command(tmp_path: Path) -> None:
    """A token file only the billing job's user reads stops no snapshot: only the command that
    uses a file reads it (and doctor)."""
    config = _config(tmp_path)
    snapshot = _run(tmp_path, "snapshot", "--simulate", "mixed", "--config", str(config))
    assert snapshot.returncode == 0, snapshot.stderr


def test_doctor_passes_files_the_commands_take(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("a-token\n")
    config = tmp_path / "config.toml"
    config.write_text('[export]\nprometheus_bearer_token_file = "token"\n'
                      '[serve]\nweb_config = "web.yml"\n')
    (tmp_path / "web.yml").write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    doctor = _run(tmp_path, "doctor", "--simulate", "mixed", "--json", "--config", str(config))
    assert doctor.returncode == 0, doctor.stderr
    assert json.loads(doctor.stdout)["config_problems"] == []

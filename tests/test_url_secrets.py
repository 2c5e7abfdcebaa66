"""A URL given to ``view`` or ``export`` (``--hosts``, a hosts file, ``--prometheus``) is checked
before it is used, and its password is never printed, whatever is wrong with it: a password
with a raw space (which cuts the entry in two, or reads as part of the URL), a host the resolver
cannot be asked, a broken IPv6 address. Each is exit 2 with one line that shows the user and
``***``."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.support.nethint import redact_url, split_userinfo

from .conftest import run_allsmi

SECRET = "hunter2"
SPACED = f"http://ops:{SECRET} x@127.0.0.1:1"


def test_one_url_s_credentials_run_to_its_last_at() -> None:
    assert split_userinfo("http://ops:a b@c/d@host:1/x") == ("http://", "ops:a b@c/d", "host:1/x")
    assert split_userinfo("ops:pw@host:9477") == ("", "ops:pw", "host:9477")
    assert split_userinfo("http://host:1") == ("http://", None, "host:1")
    assert redact_url(SPACED) == "http://ops:***@127.0.0.1:1"
    assert redact_url("ops@host:1") == "ops@host:1"  # (a user without a password: nothing hidden)
    assert redact_url(SPACED, keep_user=False) == "http://***@127.0.0.1:1"  # (the dashboard's)


def _hostfile(tmp_path: Path) -> str:
    path = tmp_path / "hosts"
    path.write_text(SPACED + "\n")
    return str(path)


@pytest.mark.parametrize("args", [
    lambda tmp: ["view", "--hosts", SPACED],
    lambda tmp: ["view", "--hostfile", _hostfile(tmp)],
    lambda tmp: ["view", "--prometheus", SPACED],
    lambda tmp: ["export", "--prometheus", SPACED, "--period", "today"],
], ids=["--hosts", "--hostfile", "view --prometheus", "export --prometheus"])
def test_a_password_with_a_raw_space_is_refused_and_never_printed(tmp_path: Path, args) -> None:
    result = run_allsmi(*args(tmp_path))
    assert result.returncode == 2 and result.stdout == "", result.stdout[-500:] + result.stderr
    assert SECRET not in result.stderr, result.stderr
    assert "space" in result.stderr or "bad port" in result.stderr, result.stderr


@pytest.mark.parametrize("command", [["view"], ["export", "--period", "today"]])
@pytest.mark.parametrize("url", ["http://\udcff\udcfe:9090", "http://[::1", "http://" + "a" * 64 + ".example:9090"],
                         ids=["bytes", "broken IPv6", "label over 63"])
def test_a_prometheus_url_no_resolver_can_take_is_refused(command: list[str], url: str) -> None:
    """Before, ``export`` failed with exit 1 and the codec's error; ``view`` showed it as the
    store's problem at every refresh."""
    result = run_allsmi(command[0], "--prometheus", url, *command[1:])
    assert result.returncode == 2 and result.stdout == "", result.stdout[-500:] + result.stderr
    assert "invalid Prometheus URL" in result.stderr and "Traceback" not in result.stderr

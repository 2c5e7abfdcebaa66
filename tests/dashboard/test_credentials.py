"""Credentials in ``--hosts`` and ``--prometheus`` URLs never reach the screen, a log or an error
message (issue 19, item 12); basic authentication still goes to the address it was given for."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources.prometheus import PrometheusSource

from ..conftest import run_allsmi
from .conftest import screen_text
from .hostile import Handler, Server, json_body

pytestmark = pytest.mark.timeout(120)

SECRET = "s3cr3t"


def _prometheus(handler: Handler) -> None:
    """A Prometheus with no allsmi series: every query answers an empty vector."""
    doc: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": []}}
    handler.send_body(json_body(doc))


@pytest.mark.parametrize("args", [
    ["--hosts", f"http://alice:{SECRET}@127.0.0.1:99999"],
    ["--hosts", f"alice:{SECRET}@127.0.0.1:notaport"],
    ["--prometheus", f"http://alice:{SECRET}@127.0.0.1:99999"],
    ["--prometheus", f"ftp://alice:{SECRET}@127.0.0.1:9090"],
])
def test_a_bad_url_is_named_without_its_password(args: list[str]) -> None:
    result = run_allsmi("view", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert SECRET not in result.stdout + result.stderr, result.stderr
    assert "127.0.0.1" in result.stderr, result.stderr


def test_hostfile_errors_leave_the_password_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text(f"http://bob:{SECRET}@127.0.0.1:70000\n")
    result = run_allsmi("view", "--hostfile", str(hostfile))
    assert result.returncode == 2 and SECRET not in result.stderr and "line 1" in result.stderr, result.stderr


def test_the_plain_table_and_the_fleet_screen_never_show_the_password() -> None:
    server = Server(_prometheus)
    try:
        url = server.url.replace("http://", f"http://alice:{SECRET}@")
        result = run_allsmi("view", "--prometheus", url)  # not a terminal: one plain table
        assert SECRET not in result.stdout + result.stderr, result.stdout + result.stderr
        assert "***@127.0.0.1" in result.stdout, result.stdout
        sent = {r.get("Authorization") for r in server.requests}
        assert sent == {"Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()}, sent
    finally:
        server.close()


async def test_the_dashboard_shows_the_prometheus_address_without_credentials() -> None:
    source = PrometheusSource(f"http://alice:{SECRET}@127.0.0.1:9", interval=1.0, timeout=1.0)
    source.refresh(lambda: False)  # refused: the summary and the host row show the address
    app = DashboardApp(source)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert SECRET not in text and "alice" not in text, text
        assert "***@127.0.0.1:9" in text, text

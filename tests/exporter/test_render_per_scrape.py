"""The text format is rendered at most once per scrape, never once per collection cycle.

An exporter nobody scrapes renders nothing (rendering was most of an idle exporter's own CPU,
issue 36); one scraped every N cycles renders once per scrape; many scrapers of one cycle share
one rendering. The exposition runs behind its real HTTP server on a loopback port; renders are
counted at the text writer, the counters still move every cycle.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest

from allsmi.exporter import exposition as exposition_module
from allsmi.exporter.exposition import Exposition
from allsmi.exporter.http import MetricsServer

from .server import fetch
from .support import T0, device, snapshot, values


#: The servers of the running tests, by base URL (a test reads its connection loop's counts).
_SERVERS: dict[str, MetricsServer] = {}
#: Set to hold each rendering until the test lets it go (a slow rendering).
_HOLD: dict[str, threading.Event] = {}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Exposition, str, list[int]]]:
    renders: list[int] = []
    real = exposition_module.render_text

    def counted(families: Any, *args: Any) -> bytes:
        renders.append(1)
        hold = _HOLD.get("render")
        if hold is not None:
            assert hold.wait(30)
        return real(families, *args)

    monkeypatch.setattr(exposition_module, "render_text", counted)
    expo = Exposition()
    server = MetricsServer("127.0.0.1", 0, expo)
    _SERVERS[server.url.rstrip("/")] = server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield expo, server.url.rstrip("/"), renders
    finally:
        _HOLD.clear()
        server.shutdown()
        server.server_close()
        _SERVERS.pop(server.url.rstrip("/"), None)


def test_cycles_nobody_scrapes_are_never_rendered(served: tuple[Exposition, str, list[int]]) -> None:
    expo, base, renders = served
    for t in range(30):
        expo.on_snapshot(snapshot([device("GPU-a", power_watts=500.0)], at=T0 + t))
    assert renders == [] and expo.renders == 0
    text = fetch(base + "/metrics").text
    assert len(renders) == 1 and expo.renders == 1
    # the counters moved every cycle all the same: 29 s at 500 W
    assert values(text, "allsmi_device_energy_joules_total") == {"GPU-a": pytest.approx(29 * 500.0)}


def test_one_render_per_scraped_cycle_however_many_ask(served: tuple[Exposition, str, list[int]]) -> None:
    expo, base, renders = served
    scrapes = 0
    for t in range(20):
        expo.on_snapshot(snapshot([device("GPU-a")], at=T0 + t))
        if t % 5 == 4:  # scraped every fifth cycle, by three scrapers in all formats
            for url, headers in ((base + "/metrics", {}),
                                 (base + "/metrics", {"Accept-Encoding": "gzip"}),
                                 (base + "/metrics", {"Accept": "application/openmetrics-text"}),
                                 (base + "/api/v1/snapshot", {}), (base + "/ready", {})):
                assert fetch(url, headers=headers).status == 200
            scrapes += 1
            assert len(renders) == scrapes and expo.renders == scrapes
    assert scrapes == 4
    fetch(base + "/metrics")  # no new cycle: the same bytes
    assert len(renders) == 4


def test_a_render_sees_the_counters_of_its_own_cycle(served: tuple[Exposition, str, list[int]]) -> None:
    expo, base, _ = served
    expo.on_snapshot(snapshot([device("GPU-a", power_watts=100.0)], at=T0))
    expo.on_snapshot(snapshot([device("GPU-a", power_watts=100.0)], at=T0 + 10))
    first = fetch(base + "/metrics").text
    expo.on_snapshot(snapshot([device("GPU-a", power_watts=300.0)], at=T0 + 20))
    second = fetch(base + "/metrics").text
    assert values(first, "allsmi_device_power_watts") == {"GPU-a": 100.0}
    assert values(first, "allsmi_device_energy_joules_total") == {"GPU-a": pytest.approx(1000.0)}
    assert values(second, "allsmi_device_power_watts") == {"GPU-a": 300.0}
    assert values(second, "allsmi_device_energy_joules_total") == {"GPU-a": pytest.approx(3000.0)}


def test_scraped_every_cycle_it_is_rendered_ahead_and_stops_when_scraping_does(
        served: tuple[Exposition, str, list[int]]) -> None:
    expo, base, renders = served
    for t in range(10):
        expo.on_snapshot(snapshot([device("GPU-a")], at=T0 + t))
        # the first two on request; from the third (two in a row asked for) on arrival
        assert len(renders) == (t + 1 if t >= 2 else t)
        assert fetch(base + "/metrics").status == 200
        assert len(renders) == t + 1  # one per scraped cycle, never two
    for t in range(10, 20):  # scraping stops: at most one render more, then none
        expo.on_snapshot(snapshot([device("GPU-a")], at=T0 + t))
    assert len(renders) == 11


def test_scrapers_behind_one_address_all_wait_for_a_slow_rendering(
        served: tuple[Exposition, str, list[int]]) -> None:
    """More scrapers behind one address than the password checks' queue takes from one
    address (16) ask for a cycle while its rendering is slow: each gets that cycle, none a 503
    (they wait for the one rendering, not in the per-address queue), and nobody gets the
    previous cycle or "not ready" while the rendering is under way."""
    expo, base, renders = served
    loop = _SERVERS[base].loop
    hold = _HOLD["render"] = threading.Event()
    expo.on_snapshot(snapshot([device("GPU-a", power_watts=100.0)], at=T0))
    statuses: list[int] = []
    scrapers = [threading.Thread(target=lambda: statuses.append(fetch(base + "/metrics", timeout=60).status))
                for _ in range(40)]
    for thread in scrapers:
        thread.start()
    deadline = time.monotonic() + 30
    while loop.shared_waits + loop.refused + len(statuses) < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(renders) == 1 and statuses == [] and loop.refused == 0
    hold.set()
    for thread in scrapers:
        thread.join(60)
    assert statuses == [200] * 40
    assert len(renders) == 1 and loop.refused == 0


def _answered_meanwhile(base: str, slow: tuple[str, dict[str, str]], hold: threading.Event) -> int:
    """Ask for ``slow`` (held at ``hold``) in a thread; while it waits, ``/healthz`` on another
    connection must answer at once (the connection loop's thread is free); then let it go and
    return its status."""
    got: list[int] = []
    asker = threading.Thread(target=lambda: got.append(fetch(base + slow[0], slow[1], timeout=60).status))
    asker.start()
    time.sleep(0.3)  # it is being made now
    start = time.monotonic()
    try:
        assert fetch(base + "/healthz", timeout=5).status == 200
        assert time.monotonic() - start < 2.0
        assert got == []  # still held: /healthz did not wait for it
    finally:
        hold.set()
        asker.join(60)
    return got[0]


def test_ready_renders_on_the_pool_never_on_the_loop_thread(
        served: tuple[Exposition, str, list[int]]) -> None:
    """A readiness probe that is the first request of a cycle renders it, as /metrics would:
    on the thread pool. It rendered on the loop's thread, and no connection was served until
    the rendering ended (hundreds of ms on a large node; here, held)."""
    expo, base, renders = served
    hold = _HOLD["render"] = threading.Event()
    expo.on_snapshot(snapshot([device("GPU-a")], at=T0))
    assert _answered_meanwhile(base, ("/ready", {}), hold) == 200
    assert len(renders) == 1


@pytest.mark.parametrize("path,headers,maker", [
    ("/metrics", {"Accept": "application/openmetrics-text"}, "render_openmetrics"),
    ("/metrics", {"Accept-Encoding": "gzip"}, "gzip"),
    ("/api/v1/snapshot", {}, "to_json"),
])
def test_a_format_not_made_yet_is_made_on_the_pool_never_on_the_loop_thread(
        served: tuple[Exposition, str, list[int]], monkeypatch: pytest.MonkeyPatch,
        path: str, headers: dict[str, str], maker: str) -> None:
    """Once the text format of a cycle is rendered, the first request for OpenMetrics, gzip or
    the snapshot JSON of that cycle makes it: on the thread pool too. It was made on the loop's
    thread, which served no other connection meanwhile."""
    expo, base, _ = served
    expo.on_snapshot(snapshot([device("GPU-a")], at=T0))
    assert fetch(base + "/metrics").status == 200  # the text format is rendered
    hold = threading.Event()
    import allsmi.output
    module = {"render_openmetrics": exposition_module, "gzip": exposition_module.gzip,
              "to_json": allsmi.output}[maker]
    real = getattr(module, "compress" if maker == "gzip" else maker)

    def held(*args: Any, **kw: Any) -> Any:
        assert hold.wait(30)
        return real(*args, **kw)

    monkeypatch.setattr(module, "compress" if maker == "gzip" else maker, held)
    assert _answered_meanwhile(base, (path, headers), hold) == 200

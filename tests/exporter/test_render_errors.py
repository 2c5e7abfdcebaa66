"""A cycle that cannot be rendered is visible: counted, partial, and /ready says so.

The exporter runs in-process behind its real HTTP server on a loopback port;
rendering failures are injected into the family builder, the clock is injected
so that staleness needs no waiting.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

import pytest

from allsmi.exporter import exposition as exposition_module
from allsmi.exporter.exposition import Exposition
from allsmi.exporter.http import MetricsServer

from .server import fetch
from .support import T0, device, snapshot, values


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def served(clock: Clock) -> Iterator[tuple[Exposition, str]]:
    expo = Exposition(stale_after_seconds=30.0, clock=clock)
    server = MetricsServer("127.0.0.1", 0, expo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield expo, server.url.rstrip("/")
    finally:
        server.shutdown()
        server.server_close()


def _failing_for(monkeypatch: pytest.MonkeyPatch, bad: set[str] | None) -> None:
    """Make the family builder raise for snapshots holding a device in ``bad`` (always if None)."""
    real = exposition_module.build_families

    def build(snap: Any, **kw: Any) -> Any:
        if bad is None or any(d.id in bad for d in snap.devices):
            raise RuntimeError("injected rendering failure")
        return real(snap, **kw)

    monkeypatch.setattr(exposition_module, "build_families", build)


def test_a_device_that_cannot_be_rendered_is_left_out_and_counted(
        served: tuple[Exposition, str], monkeypatch: pytest.MonkeyPatch) -> None:
    expo, base = served
    _failing_for(monkeypatch, {"GPU-bad"})
    expo.on_snapshot(snapshot([device("GPU-a"), device("GPU-bad"), device("GPU-c")]))
    text = fetch(base + "/metrics").text
    assert set(values(text, "allsmi_device_info")) == {"GPU-a", "GPU-c"}
    assert values(text, "allsmi_exporter_render_errors_total") == {"[]": 1.0}
    assert fetch(base + "/ready").status == 200  # the exposition is fresh, only partial
    expo.on_snapshot(snapshot([device("GPU-a")], at=T0 + 1))
    text = fetch(base + "/metrics").text
    assert values(text, "allsmi_exporter_render_errors_total") == {"[]": 1.0}


def test_a_cycle_that_cannot_be_rendered_at_all_turns_ready_503_once_stale(
        served: tuple[Exposition, str], clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    expo, base = served
    expo.on_snapshot(snapshot([device("GPU-a")]))
    assert fetch(base + "/ready").status == 200
    _failing_for(monkeypatch, None)
    for i in range(3):  # each cycle scraped: each fails to render, and counts
        clock.now += 10
        expo.on_snapshot(snapshot([device("GPU-a")], at=T0 + 10 * (i + 1)))
        text = fetch(base + "/metrics").text
        assert values(text, "allsmi_exporter_render_errors_total") == {"[]": float(i + 1)}
    # Served: only the exporter's own families, with the errors counted; no stale device values.
    assert fetch(base + "/metrics").text == text  # asked again: the same cycle, not rendered again
    assert values(text, "allsmi_exporter_render_errors_total") == {"[]": 3.0}
    assert not values(text, "allsmi_device_info")
    unrendered = fetch(base + "/api/v1/snapshot")  # it said "no collection cycle has completed"
    assert unrendered.status == 503 and b"could not be rendered" in unrendered.body
    assert fetch(base + "/ready").status == 200  # 30 s old: not yet past the limit
    clock.now += 1
    ready = fetch(base + "/ready")
    assert ready.status == 503 and b"stale" in ready.body and b"3 collection cycle" in ready.body
    monkeypatch.undo()
    expo.on_snapshot(snapshot([device("GPU-a")], at=T0 + 40))
    assert fetch(base + "/ready").status == 200
    assert values(fetch(base + "/metrics").text, "allsmi_device_info")


def test_duplicate_device_ids_are_left_out_not_served_as_duplicate_series(
        served: tuple[Exposition, str]) -> None:
    expo, base = served
    expo.on_snapshot(snapshot([device("GPU-a"), device("GPU-a", index=1)]))
    text = fetch(base + "/metrics").text  # the support parser asserts there are no duplicates
    assert list(values(text, "allsmi_device_info")) == ["GPU-a"]
    assert values(text, "allsmi_exporter_render_errors_total") == {"[]": 1.0}


class FailingLedger:
    def __init__(self) -> None:
        self.write_errors = 0
        self.unwritten = 0
        self.dropped_intervals = 0
        self.last_error: str | None = None


def test_ledger_write_errors_are_published_and_gate_ready(served: tuple[Exposition, str]) -> None:
    expo, base = served
    ledger = FailingLedger()
    expo.ledger = ledger
    expo.on_snapshot(snapshot([device("GPU-a")]))
    text = fetch(base + "/metrics").text
    assert values(text, "allsmi_ledger_write_errors_total") == {"[]": 0.0}
    assert values(text, "allsmi_ledger_unwritten_intervals") == {"[]": 0.0}
    assert values(text, "allsmi_ledger_dropped_intervals_total") == {"[]": 0.0}
    assert fetch(base + "/ready").status == 200
    ledger.write_errors, ledger.unwritten, ledger.last_error = 2, 3, "disk I/O error"
    expo.on_snapshot(snapshot([device("GPU-a")], at=T0 + 1))
    text = fetch(base + "/metrics").text
    assert values(text, "allsmi_ledger_write_errors_total") == {"[]": 2.0}
    assert values(text, "allsmi_ledger_unwritten_intervals") == {"[]": 3.0}
    ready = fetch(base + "/ready")
    assert ready.status == 503 and b"ledger: 3 interval(s) not written yet: disk I/O error" in ready.body
    ledger.unwritten, ledger.last_error = 0, None
    assert fetch(base + "/ready").status == 200


def test_without_a_ledger_no_ledger_series() -> None:
    expo = Exposition()
    expo.on_snapshot(snapshot([device("GPU-a")]))
    assert expo.current is not None
    text = expo.current.text.decode()
    assert "allsmi_ledger" not in text and "allsmi_exporter_render_errors_total 0.0" in text


def test_a_recorder_without_the_new_attributes_reads_as_zero() -> None:
    expo = Exposition(ledger=object())
    expo.on_snapshot(snapshot([device("GPU-a")]))
    assert expo.current is not None
    assert values(expo.current.text.decode(), "allsmi_ledger_write_errors_total") == {"[]": 0.0}
    assert expo.readiness() == (True, "ready")


def test_a_request_whose_answer_fails_gets_500_not_server_too_busy(
        served: tuple[Exposition, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception while answering (logged) is a server error: ``500``, on the connection
    loop's thread as on the pool's. It was answered ``503 server too busy`` with
    ``Retry-After`` and counted as a refusal at a bound, which sends an operator looking
    for a load that is not there. The other paths are served all the same."""
    import allsmi.output
    expo, base = served
    expo.on_snapshot(snapshot([device("GPU-a")]))
    assert fetch(base + "/metrics").status == 200

    def fail(*args: object, **kw: object) -> object:
        raise ValueError("Out of range float values are not JSON compliant: nan")

    monkeypatch.setattr(allsmi.output, "to_json", fail)  # the snapshot JSON, made on the pool
    monkeypatch.setattr(expo, "readiness", fail)  # /ready, answered on the loop's thread
    for path in ("/api/v1/snapshot", "/ready"):
        resp = fetch(base + path)
        assert resp.status == 500, (path, resp.status, resp.body)
        assert b"log says why" in resp.body and "retry-after" not in resp.headers
        assert resp.headers["connection"] == "close"
    assert fetch(base + "/metrics").status == 200
    assert fetch(base + "/healthz").status == 200

"""The dashboard against hostile processes, hosts and keystrokes, driven through Textual's Pilot."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources.cluster import ClusterSource, FetchError, fetch_host, parse_endpoint
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.dashboard.sources.prometheus import PrometheusError, PrometheusSource, answer_vector, make_query
from allsmi.dashboard.sources import StaticSource
from allsmi.output import snapshot_dict, to_json
from allsmi.schema import Snapshot

from .conftest import frozen, make_app, play_all, screen_text
from .fixtures import groups_config
from .hostile import LITERALS, Server, hostile_snapshot, json_body, wait_until

pytestmark = pytest.mark.timeout(240)


def _no_escapes(text: str) -> None:
    bad = [ch for ch in text if ch == "\x1b" or ord(ch) < 0x20 and ch != "\n" or 0x7f <= ord(ch) <= 0x9f]
    assert not bad, f"control characters reached the screen: {bad!r}"


async def test_markup_and_escapes_in_every_field_are_shown_literally(sim_snapshots: list[Snapshot]) -> None:
    snaps = [hostile_snapshot(s) for s in sim_snapshots]
    hostile_key = "10.0.0.9:9477[/]\x1b[2J"
    frames = [{"10.0.0.1:9477": snap, hostile_key: "refused [bold]x[/] \x1b]0;title\x07 \x9b2J"}
              for snap in snaps]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    app = DashboardApp(source, config=groups_config(), clock=frozen)
    async with app.run_test(size=(220, 60)) as pilot:
        await play_all(app, source, pilot)
        seen = screen_text(app)
        for keys in (("d",), ("p",), ("down", "down"), ("g",), ("c",), ("down",), ("question_mark",),
                     ("escape", "d", "slash", *"[/]", "enter"), ("escape", "v"), ("f",)):
            await pilot.press(*keys)
            await pilot.pause()
            seen += "\n" + screen_text(app)
        assert app.is_running
        _no_escapes(seen)
        for literal in (*LITERALS, "node[/]", "python x.py [/] --oops"):
            assert literal in seen, literal
        # A filter on label text (strings, always) matches without crashing.
        await pilot.press("escape", "slash", *"evil", "enter")
        assert app.shown and app.is_running
    assert app.return_code in (None, 0)


def _fuzz_documents(good: dict[str, Any]) -> list[tuple[str, Any]]:
    dev = good["devices"][0]

    def with_dev(**changes: Any) -> dict[str, Any]:
        return {**good, "devices": [{**dev, **changes}, *good["devices"][1:]]}

    proc = {"pid": 7, "user": "u", "command": "c", "memory_bytes": "lots"}
    return [
        ("string util", with_dev(utilization_percent="abc")),
        ("inf util", with_dev(utilization_percent=1e400)),
        ("nan power", with_dev(power_watts=float("nan"))),
        ("negative memory", with_dev(memory_used_bytes=-5)),
        ("huge int", with_dev(memory_total_bytes=10**400)),
        ("bool temperature", with_dev(temperature_celsius=True)),
        ("process memory string", with_dev(processes=[proc])),
        ("label not a string", with_dev(labels={"team": 5})),
        ("details nested", with_dev(details={"x": {"y": [1]}})),
        ("health unknown", with_dev(health="[/]")),
        ("id missing", with_dev(id=None)),
        ("device not an object", {**good, "devices": [5, *good["devices"][1:]]}),
        ("processes not a list", with_dev(processes="none")),
        ("index float", with_dev(index=1.5)),
        ("hostname number", {**good, "host": {**good["host"], "hostname": 5}}),
        ("backends wrong", {**good, "backends": [{"name": "x", "status": 3, "message": ["m"]}]}),
        ("duplicate ids", {**good, "devices": [dev, dev, *good["devices"][1:]]}),
    ]


def test_remote_snapshot_fuzz_nulls_and_reports_every_bad_value(sim_snapshots: list[Snapshot]) -> None:
    good = snapshot_dict(sim_snapshots[0])
    docs = _fuzz_documents(good)
    current: list[bytes] = [b""]
    server = Server(lambda h: h.send_body(current[0]))
    try:
        for name, doc in docs:
            current[0] = json_body(doc)
            got = fetch_host(parse_endpoint(server.url), 5.0)
            if name != "duplicate ids":
                assert got.problems, name
            for dev in got.snapshot.devices:
                for value in (dev.utilization_percent, dev.power_watts, dev.temperature_celsius):
                    assert value is None or isinstance(value, float) and value == value, (name, value)
                assert all(isinstance(v, str) for v in dev.labels.values())
                for proc in dev.processes or ():
                    assert proc.memory_bytes is None or isinstance(proc.memory_bytes, int)
        # Unusable documents: the host is down with the reason.
        for body, reason in ((b"<html>", "not JSON"), (json_body({"schema_version": True}), "schema_version"),
                             (json_body({**good, "timestamp": 5}), "timestamp"),
                             (json_body({**good, "devices": {}}), "devices"),
                             (b"[" * 100000 + b"]" * 100000, "nested too deeply|JSON values"),
                             (b'{"devices": [' + b",".join([b"{}"] * 400000) + b"]}", "JSON values")):
            current[0] = body
            with pytest.raises(FetchError, match=reason):
                fetch_host(parse_endpoint(server.url), 5.0)
    finally:
        server.close()


async def test_a_host_sending_garbage_is_flagged_and_the_app_keeps_running(sim_snapshots: list[Snapshot]) -> None:
    good = snapshot_dict(sim_snapshots[0])
    bad = dict(_fuzz_documents(good))
    doc = {**bad["label not a string"], "host": {**good["host"], "hostname": "node[/]"}}
    doc["devices"][1] = {**doc["devices"][1], "utilization_percent": "abc"}
    doc["devices"].append(doc["devices"][0])  # a duplicate id
    doc["process_details"] = False
    server = Server(lambda h: h.send_body(json_body(doc)))
    source = ClusterSource([server.url], interval=0.5, timeout=5.0)
    app = DashboardApp(source)
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (app.hosts and app.hosts[0].snapshot):
                await pilot.pause(0.1)
            await pilot.pause(0.3)
            host = app.hosts[0]
            assert host.error is None and host.problems
            row = app.query_one("#host-table", DiffTable).get_row(f"host:{host.key}")
            assert str(row[1]) == "ok"
            problem = " ".join(str(row[-1]).split())  # a long problem is wrapped on its row
            assert "bad values ignored" in problem and "duplicate device id" in problem
            text = screen_text(app)
            assert "node[/]" in text and "labels.team" in text
            await pilot.press("d", "slash", *"team", "enter", "escape")
            dup = doc["devices"][0]["id"]
            assert sum(1 for r in app.all_refs() if r.device.id == dup) == 2
            assert len({r.key for r in app.all_refs()}) == len(app.all_refs())
            assert app.device_table.row_count == len(app.shown)
            assert "duplicate device id" in screen_text(app)
            await pilot.press("p")
            assert "does not export process details" in str(app.query_one("#processes").border_title)
            assert app.is_running
    finally:
        server.close()


def test_redirects_are_not_followed_and_credentials_stay_home(sim_snapshots: list[Snapshot]) -> None:
    elsewhere = Server(lambda h: h.send_body(to_json(sim_snapshots[0]).encode()))
    here = Server(lambda h: h.send_body(b"", 302, Location=elsewhere.url + "/api/v1/snapshot"))
    try:
        url = here.url.replace("http://", "http://alice:s3cret@")
        with pytest.raises(FetchError, match="redirect"):
            fetch_host(parse_endpoint(url), 5.0)
        assert here.requests and here.requests[0].get("Authorization", "").startswith("Basic ")
        assert elsewhere.requests == []
        source = ClusterSource([url], interval=0.5, timeout=5.0)
        source.refresh(lambda: False)
        assert wait_until(lambda: source.hosts()[0].error is not None, 10)
        (host,) = source.hosts()
        assert "redirect" in host.error and host.snapshot is None
        assert elsewhere.requests == []
    finally:
        here.close()
        elsewhere.close()


def test_a_trickling_host_and_prometheus_time_out_on_the_whole_answer() -> None:
    import threading
    stop = threading.Event()
    server = Server(lambda h: h.trickle(stop, 0.1))
    try:
        started = time.monotonic()
        with pytest.raises(FetchError, match="timed out"):
            fetch_host(parse_endpoint(server.url), 1.0)
        assert time.monotonic() - started < 4.0
        started = time.monotonic()
        with pytest.raises(PrometheusError, match="timed out"):
            make_query(server.url)("up", 1.0)
        assert time.monotonic() - started < 4.0
    finally:
        stop.set()
        server.close()


def test_a_prometheus_answer_of_the_wrong_shape_marks_the_fleet_down() -> None:
    server = Server(lambda h: h.send_body(json_body({"status": "success", "data": [1, 2]})))
    try:
        source = PrometheusSource(server.url, interval=1.0, timeout=5.0)
        source.refresh(lambda: False)
        (host,) = source.hosts()
        assert host.error is not None and "'data'" in host.error
    finally:
        server.close()


def test_a_long_prometheus_error_or_warning_is_cut_with_an_ellipsis() -> None:
    """What Prometheus says is cut to a few hundred characters, and the cut is marked."""
    long = "execution: " + "query processing would load too many samples into memory " * 8 + "END"
    answers = [{"status": "error", "errorType": "execution", "error": long},
               {"status": "success", "data": {"resultType": "matrix" + "x" * 80 + "END", "result": []}}]
    for answer in answers:
        server = Server(lambda h, answer=answer: h.send_body(json_body(answer), status=422))
        try:
            source = PrometheusSource(server.url, interval=1.0, timeout=5.0)
            source.refresh(lambda: False)
            (host,) = source.hosts()
            assert host.error is not None and "END" not in host.error and "…" in host.error, host.error
        finally:
            server.close()
    _, samples = answer_vector({"status": "success", "warnings": [long],
                                "data": {"resultType": "vector", "result": []}})
    (warning,) = samples.warnings
    assert warning.endswith("…") and len(warning) == 200, warning


async def test_ctrl_c_quits_like_q(sim_snapshots: list[Snapshot]) -> None:
    app, _ = make_app(sim_snapshots)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not app.is_running
    assert app.return_code == 0


def test_an_unexpected_error_ends_the_command_non_zero(sim_snapshots: list[Snapshot]) -> None:
    from allsmi.cli.view import run_app

    class Broken(StaticSource):
        calls = 0

        def hosts(self) -> Any:
            type(self).calls += 1
            if type(self).calls > 3:
                raise RuntimeError("boom")
            return super().hosts()

    app = DashboardApp(Broken.of(sim_snapshots, clock=frozen), clock=frozen, poll_seconds=0.05)
    with pytest.raises(SystemExit) as exit_info:
        run_app(app, headless=True, size=(80, 24))
    assert exit_info.value.code not in (None, 0)


async def test_index_sort_reverses_and_groups_follow_the_sort(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        first = list(app.device_table.order)
        await pilot.press("n")  # already sorted by index: reverses
        assert app.descending
        top = [k for k in app.device_table.order if app.shown[app.device_table.order.index(k)].device.parent is None]
        top_first = [k for k in first if k in top]
        assert top == list(reversed(top_first))
        await pilot.press("r")
        assert app.device_table.order == first
        await pilot.press("g", "u")  # groups by utilization, highest first
        table = app.query_one("#group-table", DiffTable)
        utils = [float(str(table.get_row(k)[2]).rstrip("%")) for k in table.row_keys
                 if str(table.get_row(k)[2]) != "N/A"]
        assert utils == sorted(utils, reverse=True) and len(utils) >= 2
        await pilot.press("u")
        utils = [float(str(table.get_row(k)[2]).rstrip("%")) for k in table.row_keys
                 if str(table.get_row(k)[2]) != "N/A"]
        assert utils == sorted(utils)


async def test_layout_follows_a_resize_at_once_and_40x10_shows_rows(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots)
    async with app.run_test(size=(300, 100)) as pilot:
        await play_all(app, source, pilot)
        assert any(c.id == "history" for c in app.device_table.spec)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        assert not any(c.id == "history" for c in app.device_table.spec)
        assert all(len(line) <= 80 for line in screen_text(app).splitlines())
        assert "°C" in screen_text(app)
        await pilot.resize_terminal(40, 10)
        await pilot.pause()
        await pilot.pause()
        # Device rows (the vendor column is the first to give way at 40 columns).
        rows = [line for line in screen_text(app).splitlines() if re.match(r"^\s+\d+\s+(nvidia\s+)?H100", line)]
        assert rows, screen_text(app)
        await pilot.press("z")  # the panel can still be asked for
        await pilot.pause()
        assert not app.query_one("#bottom").has_class("-hidden")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.long(36)
async def test_hundreds_of_view_switches_and_help_screens_keep_memory_flat(sim_snapshots: list[Snapshot]) -> None:
    app, source = make_app(sim_snapshots[:2])
    async with app.run_test(size=(120, 40)) as pilot:
        await play_all(app, source, pilot)

        async def churn(times: int) -> None:
            for i in range(times):
                await pilot.press("g")
                if i % 10 == 0:
                    await pilot.press("question_mark")
                    await pilot.pause()
                    await pilot.press("escape")
            await pilot.pause()
            gc.collect()

        await churn(40)  # warm every cache (Textual's are bounded)
        widgets, rss = len(list(app.query("*"))), _rss_mib()
        from textual.widgets._footer import FooterKey
        await churn(120)
        assert len(list(app.query("*"))) == widgets
        alive = [o for o in gc.get_objects() if isinstance(o, FooterKey) and not o.is_attached]
        assert len(alive) < 100, f"{len(alive)} removed footer keys still alive"
        grown = _rss_mib() - rss
        assert grown < 8, f"RSS grew by {grown:.1f} MiB over 120 view switches"


def test_memory_per_host_is_bounded_for_a_huge_body() -> None:
    code = textwrap.dedent("""
        import resource, sys
        sys.path.insert(0, %r)
        from tests.dashboard.hostile import Server
        from allsmi.dashboard.sources.cluster import FetchError, fetch_host, parse_endpoint
        body = b'{"schema_version": 1, "devices": [' + b",".join([b"{}"] * (8 * 2**20 // 3 - 20)) + b"]}"
        server = Server(lambda h: h.send_body(body))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            fetch_host(parse_endpoint(server.url), 30.0)
        except FetchError as exc:
            print("REFUSED", exc)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("GROWTH_MIB", (after - before) / 1024)
    """) % (os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "REFUSED" in result.stdout and "JSON values" in result.stdout, result.stdout
    growth = float(result.stdout.split("GROWTH_MIB")[1])
    assert growth < 100, f"a {8} MiB answer cost {growth:.0f} MiB"

"""``allsmi export --prometheus`` against a store answering what no honest store can (issue 32,
item 2): duplicate series of one device, more observed time than the window, NaN, 1e308 joules,
a value that is no number. None is billed: the export fails naming the series, or counts a
copy once and says so; no row bills more than the window x its devices, and coverage never
reads above 1 (1.000024 of extrapolation reads 1).

All from the outside: the CLI as a subprocess against a local HTTP server that answers each
PromQL query by the counter it names.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

import pytest

from ..conftest import loopback_server
from .test_export_cli import SINCE, UNTIL, run

HOUR = 3600
DEVICE = {"uuid": "GPU-a", "instance": "node-a:9494", "resource_group": "default",
          "vendor": "nvidia", "model": "H100"}


class FakeStore(http.server.BaseHTTPRequestHandler):
    """Each counter's increase over the hour from ``values`` (a counter missing: no series);
    ``copies`` series per answer; ``duplicated`` devices in the duplicate-series query."""

    values: dict[str, Any] = {}
    copies: int = 1
    duplicated: bool = False

    def do_GET(self) -> None:  # noqa: N802
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        result: list[dict[str, Any]] = []
        kind = "vector"
        if "rollup_window_seconds" in query:
            kind = "matrix"  # nothing rolled up
        elif query.startswith("count by"):
            if self.duplicated:
                result = [{"metric": {**DEVICE, "index": "0"}, "value": [0, "2"]}]
        else:
            for name, value in self.values.items():
                if name in query:
                    result = [{"metric": {**DEVICE, "replica": str(i)}, "value": [0, value]}
                              for i in range(self.copies)]
                    break
        self.answer(kind, result)

    def answer(self, kind: str, result: list[dict[str, Any]]) -> None:
        """A successful query API answer holding ``result``."""
        body = json.dumps({"status": "success",
                           "data": {"resultType": kind, "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


HONEST = {"observed_seconds": "3600", "idle_allocated_seconds": "0",
          "allocated_seconds": "1800", "busy_seconds": "900", "energy_joules": "1.8e6",
          "memory_used_bytes": "1e9", "device_info": "1"}


@pytest.fixture()
def store() -> Iterator[tuple[type[FakeStore], str]]:
    handler = type("Store", (FakeStore,), {"values": dict(HONEST), "copies": 1,
                                        "duplicated": False})
    with loopback_server(handler) as url:
        yield handler, url


def export(url: str, tmp_path: Path) -> tuple[int, dict[str, Any], str]:
    out = run("--prometheus", url, "--since", SINCE, "--until", UNTIL, "--format", "json",
              "--group-by", "resource_group", cwd=tmp_path)
    return out.returncode, json.loads(out.stdout) if out.stdout else {}, out.stderr


def test_an_honest_answer_bills_the_hour(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rc, doc, err = export(store[1], tmp_path)
    assert rc == 0, err
    (row,) = doc["rows"]
    assert row["observed_device_hours"] == 1.0 and row["allocated_device_hours"] == 0.5
    assert row["energy_kwh"] == 0.5 and doc["coverage_ratio"] == 1.0
    assert "warning" not in err, err


def test_duplicate_series_count_once_and_are_said(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    handler.copies, handler.duplicated = 2, True
    rc, doc, err = export(url, tmp_path)
    assert rc == 0, err
    (row,) = doc["rows"]
    assert row["observed_device_hours"] == 1.0 and row["allocated_device_hours"] == 0.5
    assert row["energy_kwh"] == 0.5 and doc["coverage_ratio"] == 1.0
    assert "more than one series" in err and "uuid=GPU-a" in err, err
    assert "more than once" in err, err


@pytest.mark.parametrize("name,value", [("observed_seconds", str(3 * HOUR)),
                                        ("allocated_seconds", str(2 * HOUR)),
                                        ("busy_seconds", str(2 * HOUR))])
def test_more_time_than_the_window_fails(store, tmp_path: Path, name: str,  # type: ignore[no-untyped-def]
                                         value: str) -> None:
    handler, url = store
    handler.values[name] = value
    rc, doc, err = export(url, tmp_path)
    assert rc == 1 and doc == {}, (rc, doc)
    assert "impossible answer" in err and "node-a:9494/GPU-a" in err, err


@pytest.mark.parametrize("value,said", [("NaN", "NaN"), ("+Inf", "+Inf"),
                                        ("lots", "non-numeric value 'lots'")])
def test_a_value_that_is_not_a_finite_number_fails_naming_the_series(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, value: str, said: str) -> None:
    handler, url = store
    handler.values["energy_joules"] = value
    rc, doc, err = export(url, tmp_path)
    assert rc == 1 and doc == {}, (rc, doc)
    assert said in err and 'uuid="GPU-a"' in err and "energy_joules" in err, err


def test_energy_no_device_can_draw_fails(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    handler.values["energy_joules"] = "1e308"
    rc, doc, err = export(url, tmp_path)
    assert rc == 1 and doc == {}, (rc, doc)
    assert "impossible answer" in err and "J in a window of 3600 s" in err, err


def test_extrapolation_past_the_window_reads_as_the_window(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    handler.values["observed_seconds"] = str(HOUR * 1.000024)
    rc, doc, err = export(url, tmp_path)
    assert rc == 0, err
    assert doc["coverage_ratio"] == 1.0 and doc["rows"][0]["coverage_ratio"] == 1.0
    assert doc["rows"][0]["observed_device_hours"] == 1.0


def test_a_short_windows_extrapolation_is_cut_to_it_not_refused(tmp_path: Path) -> None:
    """Over a window of a few scrapes, increase() of a counter that moves once a collection
    overshoots by far more than 2 % of the window (3.7 s in a 3 s window, seen in a real
    Prometheus): that is the window's time, not an impossible answer."""
    handler = type("Store", (FakeStore,), {"values": dict(HONEST, observed_seconds="3.74439",
                                                          allocated_seconds="3.5",
                                                          busy_seconds="1", energy_joules="900"),
                                        "copies": 1, "duplicated": False})
    with loopback_server(handler) as url:
        out = run("--prometheus", url, "--since", "2026-03-02T00:00:00Z", "--until",
                  "2026-03-02T00:00:03Z", "--format", "json", "--group-by", "resource_group",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["rows"]
    assert row["observed_device_hours"] == round(3 / 3600, 6)
    assert row["allocated_device_hours"] <= row["observed_device_hours"]


class _Rolled(FakeStore):
    """The hour rolled up by two evaluators (``replica`` a and b) that disagree on the device's
    observed seconds (``observed``); every other roll-up empty."""

    observed: tuple[str, str] = ("3600", "3600")

    def do_GET(self) -> None:  # noqa: N802
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        end = int(dt.datetime.fromisoformat(UNTIL).timestamp())
        if not query.endswith("s]"):
            return super().do_GET()
        result: list[dict[str, Any]] = []
        if "rollup_window_seconds" in query:
            result = [{"metric": {"replica": r}, "values": [[end, "3600"]]} for r in "ab"]
        elif "observed_seconds:increase1h" in query:
            result = [{"metric": {**DEVICE, "replica": r}, "values": [[end, v]]}
                      for r, v in zip("ab", self.observed)]
        body = json.dumps({"status": "success",
                           "data": {"resultType": "matrix", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("observed,said", [(("3600", "3600"), None),
                                           (("3600", "3000"), "disagree"),
                                           (("3600", "NaN"), "NaN")])
def test_an_hour_rolled_up_twice_bills_once(tmp_path: Path, observed: tuple[str, str],
                                            said: str | None) -> None:
    handler = type("Rolled", (_Rolled,), {"values": dict(HONEST), "copies": 1,
                                          "duplicated": False, "observed": observed})
    with loopback_server(handler) as url:
        rc, doc, err = export(url, tmp_path)
    if said == "NaN":
        assert rc == 1 and "NaN" in err and "observed_seconds:increase1h" in err, err
        return
    assert rc == 0, err
    assert doc["source_data"].startswith("hourly roll-ups for 1 h"), doc["source_data"]
    assert doc["rows"][0]["observed_device_hours"] == 1.0 and doc["coverage_ratio"] == 1.0
    assert "1 evaluation(s) besides the 1 billed" in err, err
    assert "1 roll-up value(s) of an hour are held by more than one series" in err, err
    if said:
        assert "disagree" in err and "uuid=GPU-a" in err and "3000 to 3600" in err, err
    else:
        assert "disagree" not in err, err


class _TwoInstances(FakeStore):
    """Every series of the device under two ``instance`` labels (``instances``), with each
    instance's ``_created`` of the observed-time counter from ``created`` and its observed
    seconds from ``observed``."""

    instances = ("node-a:9494", "10.0.0.7:9494")
    created: tuple[str, str] = ("1772400000.25", "1772400000.25")
    observed: tuple[str, str] = ("3600", "3600")

    def do_GET(self) -> None:  # noqa: N802
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        if "rollup_window_seconds" in query or query.startswith("count by"):
            return super().do_GET()
        result: list[dict[str, Any]] = []
        for name, value in self.values.items():
            if name in query:
                values = self.created if name == "observed_seconds_created" else \
                    self.observed if name == "observed_seconds" else (value, value)
                result = [{"metric": {**DEVICE, "instance": i}, "value": [0, v]}
                          for i, v in zip(self.instances, values)]
                break
        self.answer("vector", result)


@pytest.mark.parametrize("case", ["one exporter scraped twice", "two hosts sharing an id",
                                  "an instance label changed within the window"])
def test_a_device_under_two_instance_labels(tmp_path: Path, case: str) -> None:
    """One exporter scraped by two jobs under different addresses (a node name and a pod IP)
    shows each device under two ``instance`` labels at once: it was billed twice (2 device-hours
    and 1 kWh for one device's 0.5 kWh hour, exit 0, nothing said). Its ``_created`` series tell
    it apart from two hosts whose devices share an id (a bus id where the vendor gives no uuid),
    which both bill, and from a target relabelled within the window, whose two parts add up to
    the window."""
    created, observed = {
        "one exporter scraped twice": (("1772400000.25",) * 2, ("3600", "3600")),
        "two hosts sharing an id": (("1772400000.25", "1772390000.5"), ("3600", "3600")),
        "an instance label changed within the window": (("1772400000.25",) * 2, ("1800", "1800")),
    }[case]
    values = {"observed_seconds_created": "", **HONEST}
    handler = type("Store", (_TwoInstances,), {"values": values, "created": created,
                                               "observed": observed})
    with loopback_server(handler) as url:
        rc, doc, err = export(url, tmp_path)
    # (a relabelled target's two halves count as two devices for the coverage: exit 3)
    assert rc == (3 if case.startswith("an instance") else 0), err
    (row,) = doc["rows"]
    if case == "one exporter scraped twice":
        assert row["device_count"] == 1 and row["observed_device_hours"] == 1.0, row
        assert row["energy_kwh"] == 0.5 and row["allocated_device_hours"] == 0.5, row
        assert doc["coverage_ratio"] == 1.0
        assert "device 10.0.0.7:9494/GPU-a is also scraped as node-a:9494/GPU-a" in err, err
    else:
        assert row["device_count"] == 2 and row["energy_kwh"] == 1.0, row
        assert row["observed_device_hours"] == (2.0 if case.startswith("two") else 1.0), row
        assert "also scraped" not in err, err


@pytest.mark.parametrize("share", ["1.5", "-0.5"])
def test_a_partition_share_outside_0_to_1_fails_naming_the_series(tmp_path: Path,
                                                                   share: str) -> None:
    """A partition's share of its device is at most 1 and never negative: a store answering 1.5
    billed 0.75 h of 0.5 h allocated, and -0.5 a negative 0.25 h, both with exit 0."""
    handler = type("Store", (FakeStore,), {"values": {"partition_share_ratio": share, **HONEST},
                                           "copies": 1, "duplicated": False})
    with loopback_server(handler) as url:
        rc, doc, err = export(url, tmp_path)
    assert rc == 1 and doc == {}, (rc, doc)
    assert "partition_share_ratio" in err and repr(share) in err and "at most 1" in err, err


class _RolledBilled(_Rolled):
    """The hour rolled up once, its billed seconds (``billed``) against 1800 s allocated."""

    billed = "2700"

    def do_GET(self) -> None:  # noqa: N802
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        end = int(dt.datetime.fromisoformat(UNTIL).timestamp())
        rolled = {"rollup_window_seconds": ({}, "3600"), "observed_seconds:increase1h": (DEVICE, "3600"),
                  "allocated_seconds:increase1h": (DEVICE, "1800"),
                  "device_billed_seconds:increase1h": (DEVICE, self.billed)}
        if not query.endswith("s]"):
            return FakeStore.do_GET(self)
        result = [{"metric": labels, "values": [[end, value]]}
                  for name, (labels, value) in rolled.items() if name in query]
        body = json.dumps({"status": "success",
                           "data": {"resultType": "matrix", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_rolled_up_billed_time_above_the_allocated_fails(tmp_path: Path) -> None:
    """A roll-up's billed seconds are its hour's allocated seconds at the partition share (at
    most 1): 2700 billed of 1800 allocated was billed as it came, with exit 0."""
    handler = type("Rolled", (_RolledBilled,), {"values": dict(HONEST), "copies": 1,
                                                "duplicated": False})
    with loopback_server(handler) as url:
        rc, doc, err = export(url, tmp_path)
    assert rc == 1 and doc == {}, (rc, doc, err)
    assert "impossible answer" in err and "2700 s of billed time for 1800 s allocated" in err, err

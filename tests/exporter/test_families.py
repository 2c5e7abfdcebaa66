"""Metric families built from snapshots: values, units, label sets, what is left out."""

from __future__ import annotations

import gzip

import pytest

from allsmi.exporter.exposition import Exposition, render_snapshot
from allsmi.exporter.builder import GroupPrice
from allsmi.exporter.families import DEVICE_LABELS, FAMILIES, INFO_LABELS, GAUGES
from allsmi.schema.fields import MEASUREMENTS
from allsmi.schema import BackendStatus, ProcessSample

from .support import T0, device, labelsets, no_nan, replace, series, snapshot, values


def render(exposition: Exposition, *snaps, openmetrics: bool = False) -> str:
    for snap in snaps:
        exposition.on_snapshot(snap)
    assert exposition.current is not None
    return exposition.current.body(openmetrics=openmetrics, gzipped=False).decode()


def test_gauges_are_in_base_units() -> None:
    text = render_snapshot(snapshot([device(utilization_percent=55.0, clock_mhz=1980.0,
                                            fan_percent=40.0, memory_used_bytes=123456789)]))
    assert values(text, "allsmi_device_utilization_ratio") == {"GPU-a": pytest.approx(0.55)}
    assert values(text, "allsmi_device_clock_hertz") == {"GPU-a": pytest.approx(1.98e9)}
    assert values(text, "allsmi_device_fan_ratio") == {"GPU-a": pytest.approx(0.40)}
    assert values(text, "allsmi_device_memory_used_bytes") == {"GPU-a": 123456789}
    assert values(text, "allsmi_device_temperature_celsius") == {"GPU-a": 61.5}
    assert values(text, "allsmi_device_power_watts") == {"GPU-a": 300.0}
    assert values(text, "allsmi_device_power_limit_watts") == {"GPU-a": 700.0}


def test_every_measurement_has_its_gauge() -> None:
    names = {f.name for f in FAMILIES}
    assert {m.metric for m in MEASUREMENTS} <= names
    assert [g.name for g, _, _ in GAUGES] == [m.metric for m in MEASUREMENTS]


def test_label_sets() -> None:
    dev = device(index=3, name="NVIDIA H100 80GB HBM3", resource_group="inference")
    text = render_snapshot(snapshot([dev]))
    for family, _, _ in GAUGES:
        expected = {"uuid": "GPU-a", "index": "3", "vendor": "nvidia",
                    "model": "NVIDIA H100 80GB HBM3", "resource_group": "inference"}
        if family.name == "allsmi_device_compute_active_ratio":
            expected["source"] = "sm_active"  # what the activity figure measures
        assert labelsets(text, family.name) == [expected]
    assert set(labelsets(text, "allsmi_device_up")[0]) == set(DEVICE_LABELS)
    info = labelsets(text, "allsmi_device_info")
    assert len(info) == 1 and set(info[0]) == set(INFO_LABELS)
    assert info[0]["backend"] == "nvidia" and info[0]["bus_id"] == "00000000:18:00.0"
    assert info[0]["driver_version"] == "560.35.03" and info[0]["parent_uuid"] == ""
    assert values(text, "allsmi_build_info")  # present
    assert values(text, "allsmi_last_collect_timestamp_seconds") == {"[]": T0}


def test_unknown_values_are_left_out() -> None:
    partial = device("GPU-b", temperature_celsius=None, fan_percent=None, power_watts=None,
                     utilization_percent=None, clock_mhz=None, health="unknown")
    text = render_snapshot(snapshot([device(), partial]))
    for name in ("allsmi_device_temperature_celsius", "allsmi_device_fan_ratio",
                 "allsmi_device_power_watts", "allsmi_device_utilization_ratio",
                 "allsmi_device_clock_hertz", "allsmi_device_up"):
        assert set(values(text, name)) == {"GPU-a"}, name
    assert set(values(text, "allsmi_device_memory_used_bytes")) == {"GPU-a", "GPU-b"}
    assert "NaN" not in text and no_nan(text)


def test_lost_device_is_down_with_no_values() -> None:
    lost = device("GPU-b", health="lost", utilization_percent=None, memory_used_bytes=None,
                  memory_total_bytes=None, temperature_celsius=None, power_watts=None,
                  power_limit_watts=None, clock_mhz=None, fan_percent=None, processes=())
    text = render_snapshot(snapshot([device(), lost]))
    assert values(text, "allsmi_device_up") == {"GPU-a": 1.0, "GPU-b": 0.0}
    assert set(values(text, "allsmi_device_power_watts")) == {"GPU-a"}
    assert set(values(text, "allsmi_device_info")) == {"GPU-a", "GPU-b"}


def test_degraded_counts_as_up() -> None:
    text = render_snapshot(snapshot([device(health="degraded")]))
    assert values(text, "allsmi_device_up") == {"GPU-a": 1.0}


def test_mig_partitions_have_own_series_and_board_values_once() -> None:
    parent = device("GPU-p", utilization_percent=None, power_watts=420.0, energy_joules=5000.0,
                    processes=())
    children = [device(f"MIG-{i}", index=i, parent="GPU-p", utilization_percent=None,
                       power_watts=None, power_limit_watts=None, energy_joules=None, clock_mhz=None,
                       fan_percent=None, temperature_celsius=None, memory_total_bytes=10 * 2**30,
                       memory_used_bytes=2**30 * (i + 1))
                for i in range(3)]
    exposition = Exposition(max_gap_seconds=30)
    text = render(exposition, snapshot([parent, *children]),
                  snapshot([replace(parent, energy_joules=5400.0), *children], at=T0 + 2))
    assert values(text, "allsmi_device_power_watts") == {"GPU-p": 420.0}
    assert sum(values(text, "allsmi_device_power_watts").values()) == 420.0
    # the board's energy split by the partitions' shares (a third each, none left to the
    # parent), as their time is billed: counted once (issue 32, item 10)
    energy = values(text, "allsmi_device_energy_joules_total")
    assert energy == {"GPU-p": 0.0, **{f"MIG-{i}": pytest.approx(400.0 / 3) for i in range(3)}}
    assert sum(energy.values()) == pytest.approx(400.0)
    assert set(values(text, "allsmi_device_memory_used_bytes")) == {"GPU-p", "MIG-0", "MIG-1", "MIG-2"}
    info = {s["uuid"]: s for s in labelsets(text, "allsmi_device_info")}
    assert {info[f"MIG-{i}"]["parent_uuid"] for i in range(3)} == {"GPU-p"}
    # children are observed and allocated on their own, but have no energy or busy counters
    assert set(values(text, "allsmi_device_observed_seconds_total")) == set(info)
    assert set(values(text, "allsmi_device_busy_seconds_total")) == set()


def test_vanished_devices_disappear() -> None:
    exposition = Exposition(max_gap_seconds=30)
    text = render(exposition, snapshot([device("GPU-a"), device("GPU-b", index=1)]))
    assert set(values(text, "allsmi_device_power_watts")) == {"GPU-a", "GPU-b"}
    text = render(exposition, snapshot([device("GPU-a")], at=T0 + 2))
    for (name, labels) in series(text):
        assert dict(labels).get("uuid") != "GPU-b", name


def test_processes_only_when_asked_and_bounded() -> None:
    long_cmd = "python " + "x" * 200
    dev = device(processes=(ProcessSample(1, "alice", long_cmd, 100),
                            ProcessSample(2, None, None, 200),
                            ProcessSample(3, "bob", "unknown-memory", None)))
    assert "allsmi_process_memory_bytes" not in render_snapshot(snapshot([dev]))
    text = render_snapshot(snapshot([dev]), processes=True)
    rows = {s["pid"]: s for s in labelsets(text, "allsmi_process_memory_bytes")}
    assert set(rows) == {"1", "2"}
    assert rows["1"]["command"] == long_cmd[:64] and rows["1"]["user"] == "alice"
    assert rows["2"]["user"] == "" and rows["1"]["uuid"] == "GPU-a"



def test_process_activity_gauges_only_with_processes_unknown_left_out() -> None:
    """Per-process activity as ratios (0 to 1), one family per PROCESS_MEASUREMENTS entry,
    labelled like the process memory; a figure the vendor does not give has no series."""
    from allsmi.exporter.families import PROCESS_GAUGES
    from allsmi.schema.fields import PROCESS_MEASUREMENTS
    assert [f.name for f, _, _ in PROCESS_GAUGES] == [m.metric for m in PROCESS_MEASUREMENTS]
    assert PROCESS_GAUGES[0][0].name == "allsmi_process_utilization_ratio"
    dev = device(processes=(
        ProcessSample(1, "alice", "train", 100, utilization_percent=75.0, decoder_utilization_percent=12.5),
        ProcessSample(2, "bob", "serve", 200, utilization_percent=25.0),
        ProcessSample(3, "carol", "idle", 300)))
    assert "allsmi_process_utilization_ratio" not in render_snapshot(snapshot([dev]))
    text = render_snapshot(snapshot([dev]), processes=True)
    util = {s["pid"]: s for s in labelsets(text, "allsmi_process_utilization_ratio")}
    assert set(util) == {"1", "2"} and util["1"]["user"] == "alice" and util["1"]["uuid"] == "GPU-a"
    got = {dict(labels)["pid"]: v for (name, labels), v in series(text).items()
           if name == "allsmi_process_utilization_ratio"}
    assert got == {"1": 0.75, "2": 0.25}
    assert [s["pid"] for s in labelsets(text, "allsmi_process_decoder_utilization_ratio")] == ["1"]
    assert labelsets(text, "allsmi_process_encoder_utilization_ratio") == []
    assert no_nan(text)


def test_label_values_are_escaped() -> None:
    # Newlines never reach a label: the schema turns control characters into
    # spaces (allsmi.schema.text); quotes and backslashes are escaped by the exposition.
    dev = device(name='Weird "GPU"\nmodel \\ x',
                 processes=(ProcessSample(7, "eve", 'sh -c "echo }\n"', 1),))
    text = render_snapshot(snapshot([dev]), processes=True)
    assert labelsets(text, "allsmi_device_power_watts")[0]["model"] == 'Weird "GPU" model \\ x'
    assert labelsets(text, "allsmi_process_memory_bytes")[0]["command"] == 'sh -c "echo } "'


def test_render_snapshot_has_no_counters() -> None:
    text = render_snapshot(snapshot([device()]))
    assert " counter\n" not in text
    assert not any(name.endswith(("_total", "_created")) for name, _ in series(text))


def test_resource_groups_in_use_and_declared() -> None:
    exposition = Exposition(declared_groups={"inference": {"team": "serving", "cost_center": "42"},
                                             "idle": {}})
    text = render(exposition, snapshot([device(resource_group="training", labels={"team": "ml"})]))
    groups = {s["resource_group"]: s for s in labelsets(text, "allsmi_resource_group_info")}
    assert groups == {"training": {"resource_group": "training", "team": "ml"},
                      "inference": {"resource_group": "inference", "team": "serving",
                                    "cost_center": "42"},
                      "idle": {"resource_group": "idle"}}


def test_group_prices_are_published_only_where_configured() -> None:
    exposition = Exposition(group_prices={"training": GroupPrice(2.5, 0.12, "USD"),
                                          "spot": GroupPrice(0.8, None, "EUR"),
                                          "free": GroupPrice(None, None, None)})
    text = render(exposition, snapshot([device(resource_group="training")]))
    assert labelsets(text, "allsmi_resource_group_price_per_device_hour") == [
        {"resource_group": "spot", "currency": "EUR"}, {"resource_group": "training", "currency": "USD"}]
    hourly = values(text, "allsmi_resource_group_price_per_device_hour")
    assert sorted(hourly.values()) == [0.8, 2.5]
    # an unpriced group or price has no series: never an invented 0
    assert list(values(text, "allsmi_resource_group_price_per_kwh").values()) == [0.12]


def test_backend_families() -> None:
    backends = [BackendStatus("nvidia", "ok", "", 0.02), BackendStatus("amd", "unavailable", "no lib"),
                BackendStatus("rebellions", "error", "boom", 0.5),
                BackendStatus("tenstorrent", "timeout", "still running", None)]
    exposition = Exposition()
    text = render(exposition, snapshot([device()], backends=backends),
                  snapshot([device()], at=T0 + 1, backends=backends))
    assert values(text, "allsmi_backend_up") == {
        "[('backend', 'nvidia')]": 1.0, "[('backend', 'rebellions')]": 0.0,
        "[('backend', 'tenstorrent')]": 0.0}
    assert values(text, "allsmi_backend_errors_total") == {
        "[('backend', 'nvidia')]": 0.0, "[('backend', 'rebellions')]": 2.0,
        "[('backend', 'tenstorrent')]": 2.0}
    assert values(text, "allsmi_backend_collect_duration_seconds") == {
        "[('backend', 'nvidia')]": 0.02, "[('backend', 'rebellions')]": 0.5}
    # a backend that worked and then went away stays listed, as down
    gone = [BackendStatus("nvidia", "unavailable", "driver unloaded")]
    text = render(exposition, snapshot([], at=T0 + 2, backends=gone))
    assert values(text, "allsmi_backend_up") == {"[('backend', 'nvidia')]": 0.0}


def test_openmetrics_has_units_created_and_eof() -> None:
    exposition = Exposition()
    text = render(exposition, snapshot([device()]), snapshot([device()], at=T0 + 1),
                  openmetrics=True)
    assert text.endswith("# EOF\n")
    assert "# UNIT allsmi_device_energy_joules joules" in text
    assert "# TYPE allsmi_device info" in text  # OpenMetrics names the info family without _info
    created = values(text, "allsmi_device_energy_joules_created", openmetrics=True)
    assert created == {"GPU-a": T0}
    assert values(text, "allsmi_device_energy_joules_total", openmetrics=True) == \
        {"GPU-a": pytest.approx(300.0)}


def test_every_scraper_gets_the_same_bytes_and_gzip_matches() -> None:
    exposition = Exposition()
    exposition.on_snapshot(snapshot([device()]))
    rendered = exposition.current
    assert rendered is not None
    first = rendered.body(openmetrics=False, gzipped=True)
    assert rendered.body(openmetrics=False, gzipped=True) is first  # compressed once
    assert gzip.decompress(first) == rendered.body(openmetrics=False, gzipped=False)
    assert gzip.decompress(rendered.body(openmetrics=True, gzipped=True)) == rendered.body(openmetrics=True, gzipped=False)
    assert b'"schema_version": 1' in rendered.snapshot_json()


def test_encodings_asked_for_are_prepared_ahead_once_every_cycle_is_scraped() -> None:
    exposition = Exposition()
    for t in range(2):  # two cycles in a row asked for, in OpenMetrics with gzip
        exposition.on_snapshot(snapshot([device()], at=T0 + t))
        assert exposition._pending is not None, "not rendered before anyone asked"
        exposition.current.body(openmetrics=True, gzipped=True)
    exposition.on_snapshot(snapshot([device()], at=T0 + 2))
    assert exposition._pending is None, "rendered on the collector's thread, before any scrape"
    third = exposition._current
    assert "openmetrics.gz" in third._cache, "made on the collector's thread, before any scrape"
    assert "json" not in third._cache and "text.gz" not in third._cache
    # nobody asks for the third: the fourth waits for a request (at most one render too many)
    exposition.on_snapshot(snapshot([device()], at=T0 + 3))
    assert exposition._pending is not None


def test_openmetrics_is_rendered_only_for_cycles_someone_asks_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from allsmi.exporter import exposition as module
    calls = []
    real = module.render_openmetrics
    monkeypatch.setattr(module, "render_openmetrics", lambda *a: calls.append(1) or real(*a))
    exposition = Exposition()
    for i in range(3):  # scraped with the text format only
        exposition.on_snapshot(snapshot([device()], at=T0 + i))
        exposition.current.body(openmetrics=False, gzipped=False)
    assert calls == []
    body = exposition.current.body(openmetrics=True, gzipped=False)
    assert body.endswith(b"# EOF\n") and b"allsmi_device_info" in body and len(calls) == 1
    exposition.on_snapshot(snapshot([device()], at=T0 + 3))  # asked for lately: made ahead
    exposition.current  # noqa: B018 - rendered ahead when every cycle is scraped
    assert len(calls) == 2
    assert exposition.current.body(openmetrics=True, gzipped=False).endswith(b"# EOF\n")
    assert len(calls) == 2

"""compute_active_percent for the NPU backends (backends/_common/activity.py): the mean of
per-core busy figures only when every core reported, engine time named as such, nothing
invented for a tool that reports neither."""

from __future__ import annotations

import pytest

from allsmi.collection import registry
from allsmi.backends._common.activity import COUNTER_ONLY_FIELDS, engine_time, mean_of_units
from allsmi.schema import COMPUTE_ACTIVE_SOURCES, DEVICE_ACTIVITY, DEVICE_TRAFFIC


def test_mean_over_every_core():
    assert mean_of_units([100.0, 0.0, 50.0, 10.0], "pe_busy") == {
        "compute_active_percent": 40.0, "compute_active_source": "pe_busy"}
    assert mean_of_units((0.0,) * 8, "core_busy")["compute_active_percent"] == 0.0


@pytest.mark.parametrize("cores", [None, [], [50.0, None], [50.0, 101.0], [-1.0, 20.0],
                                   [float("nan"), 20.0]])
def test_a_core_that_did_not_report_leaves_the_device_unknown(cores):
    assert mean_of_units(cores, "pe_busy") == {}


def test_engine_time_is_named_and_unknown_stays_unknown():
    assert engine_time(37.5) == {"compute_active_percent": 37.5,
                                 "compute_active_source": "engine_time"}
    assert engine_time(None) == {} and engine_time(float("nan")) == {} and engine_time(150.0) == {}


def test_sources_are_the_schemas():
    assert {"pe_busy", "core_busy", "engine_time"} <= set(COMPUTE_ACTIVE_SOURCES)
    assert COUNTER_ONLY_FIELDS == set(DEVICE_ACTIVITY + DEVICE_TRAFFIC) - {"compute_active_percent"}


@pytest.mark.parametrize(("name", "reported"), [
    ("nvidia", set(DEVICE_ACTIVITY + DEVICE_TRAFFIC)),
    ("amd", {"compute_active_percent", "memory_bandwidth_percent",
             "interconnect_rx_bytes_per_second", "interconnect_tx_bytes_per_second"}),
    ("gaudi", {"compute_active_percent"}),
    ("furiosa", {"compute_active_percent"}),
    ("rebellions", {"compute_active_percent"}),
    ("tenstorrent", set()),
])
def test_each_vendor_declares_the_activity_it_cannot_report(name, reported):
    """What each vendor page's table says (docs/backends/<vendor>.md): the rest is declared
    unreported, and tests/test_simulation_identity.py checks it against the fixtures."""
    cls = registry.load(name)
    activity = set(DEVICE_ACTIVITY + DEVICE_TRAFFIC)
    assert activity - cls.unreported_fields == reported

"""schema.derive: the same sample as dataclasses.replace, with only the changed fields cleaned."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from allsmi.schema import text
from allsmi.schema import DeviceSample, ProcessSample, Workload, derive

HOSTILE = "evil\x1b[31m\u202e\nname\x00" + "x" * 5000


def _device() -> DeviceSample:
    return DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvml", index=0,
                        name="H100\x1b[0m", labels={"team": "a\x07"}, details={"k\x1b": "v"},
                        processes=(ProcessSample(7, user="u", command="c"),))


@pytest.mark.parametrize("changes", [
    {"resource_group": HOSTILE, "labels": {HOSTILE: HOSTILE}},
    {"resource_group": None, "labels": {}},
    {"workloads": (Workload("kubernetes", namespace="ns", pod="p"),), "processes": None},
    {"name": HOSTILE, "id": HOSTILE, "details": {"a": (HOSTILE, 1.0)}},
    {"utilization_percent": 12.5, "health": HOSTILE},
])
def test_derive_equals_replace_for_devices(changes) -> None:
    dev = _device()
    derived, replaced = derive(dev, **changes), replace(dev, **changes)
    assert derived == replaced
    for f in fields(DeviceSample):
        assert getattr(derived, f.name) == getattr(replaced, f.name), f.name
    assert dev == _device()  # the original is untouched


def test_derive_equals_replace_for_processes() -> None:
    proc = ProcessSample(7, user="root", command="python train.py", memory_bytes=1)
    for changes in ({"job_id": HOSTILE, "pod_uid": " ", "container_id": None},
                    {"user": HOSTILE, "command": HOSTILE}, {"job_id": None}):
        assert derive(proc, **changes) == replace(proc, **changes)


def test_derive_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no field 'nope'"):
        derive(_device(), nope=1)


def test_clean_keys_and_tuples_are_checked_once_and_hostile_ones_every_time(monkeypatch) -> None:
    """The details' keys and tuples found clean are kept without checking them again (every
    device of every cycle has the same ones); what cleaning changes is cleaned every time."""
    monkeypatch.setattr(text, "CLEAN_KEYS", set())
    monkeypatch.setattr(text, "CLEAN_TUPLES", set())
    cleaned: list[object] = []
    real = text.clean_detail

    def counted(value, *args):
        cleaned.append(value)
        return real(value, *args)

    reasons = ("gpu_idle", "sw_power_cap")
    details = {"pstate": "P0", "clocks_event_reasons": reasons, "mask": 5,
               "bad": (HOSTILE, float("nan")), HOSTILE: 1}
    expected = {text.clean_text(k): real(v) for k, v in details.items()}
    monkeypatch.setattr(text, "clean_detail", counted)
    first, second = text.clean_mapping(details), text.clean_mapping(dict(details))
    assert first == second == expected
    tuples = [v for v in cleaned if isinstance(v, tuple)]  # (not the items of a tuple cleaned)
    assert tuples == [reasons, details["bad"], details["bad"]]  # the clean tuple checked once
    assert second["clocks_event_reasons"] is reasons and second["bad"][1] is None
    assert HOSTILE not in text.CLEAN_KEYS and "pstate" in text.CLEAN_KEYS
    assert text.clean_mapping({"k": ((1, 2), [3])})["k"] == ((1, 2), (3,))  # lists: tuples


@pytest.mark.parametrize("changes", [
    {"resource_group": HOSTILE, "labels": {HOSTILE: HOSTILE}},
    {"workloads": (Workload("kubernetes", namespace="ns", pod="p"),), "processes": None},
    {"name": HOSTILE, "id": HOSTILE, "details": {"a": (HOSTILE, 1.0)}},
    {"utilization_percent": 12.5, "health": HOSTILE},
])
def test_fill_sets_in_place_what_replace_builds(changes) -> None:
    from allsmi.schema import fill
    dev = _device()
    filled = fill(dev, **changes)
    assert filled is dev
    replaced = replace(_device(), **changes)
    for f in fields(DeviceSample):
        assert getattr(filled, f.name) == getattr(replaced, f.name), f.name


def test_a_filler_restores_the_source_s_fields_first_and_is_made_once_per_field_set() -> None:
    """``filler(cls, names, restored)``: the restored fields (those not among ``names``) set
    to the source's values as they are, then the changed ones cleaned; one function per
    class, restored fields and names (written out once, reused every cycle)."""
    from allsmi.schema.samplecopy import filler
    restored = ("resource_group", "labels", "processes")
    make = filler(DeviceSample, ("processes", "health"), restored)
    assert filler(DeviceSample, ("processes", "health"), restored) is make
    assert filler(DeviceSample, ("health", "processes"), restored) is not make
    source = replace(_device(), resource_group="team-a", labels={"x": "y"})
    dev = replace(_device(), resource_group="elsewhere", labels={})
    assert make(dev, {"processes": (), "health": HOSTILE}, source) is dev
    expected = replace(source, processes=(), health=HOSTILE)
    for f in fields(DeviceSample):
        assert getattr(dev, f.name) == getattr(expected, f.name), f.name
    with pytest.raises(TypeError, match="no field 'nope'"):
        filler(DeviceSample, ("health",), ("nope",))


def test_a_group_s_name_and_labels_are_cleaned_once_each_a_new_dict_each_time(monkeypatch) -> None:
    """The collector sets every device's resource group and labels every cycle, the same few
    each time: each group name and each set of string labels is cleaned once (a hostile one
    too), every device given a dict of its own equal to cleaning afresh; labels that are not
    all strings (or cannot be remembered) are cleaned every time."""
    from allsmi import schema
    from allsmi.schema import samplecopy
    from allsmi.schema import fill
    cleaned: list[object] = []
    real = text.clean_mapping
    monkeypatch.setattr(samplecopy, "clean_mapping",
                        lambda value: cleaned.append(value) or real(value))
    # (as the device's cleaners are made, remembering nothing yet)
    clean_labels = samplecopy.remembered_mapping()
    clean_group = samplecopy.remembered_text(text.clean_optional)
    group = "team-" + HOSTILE
    for labels in ({"team": "a\x07", HOSTILE: HOSTILE}, {"team": "b"}):
        cleaned.clear()
        made = [clean_labels(dict(labels)) for _ in range(5)]
        assert len(cleaned) == 1
        assert len({id(dev) for dev in made}) == 5 and made == [real(labels)] * 5
        dev = fill(_device(), resource_group=group, labels=dict(labels))  # (the same, in use)
        assert dev.labels == real(labels) and dev.resource_group == schema.clean_text(group)
    assert clean_group(group) == schema.clean_text(group) and clean_group(None) is None
    assert clean_group(group) is clean_group(group)
    assert clean_labels({}) == {} and clean_labels(None) is None
    for odd in ({"n": 1}, {"n": True}, {"t": ("a", "b")}, {"l": ["x"]}):
        cleaned.clear()
        assert [clean_labels(dict(odd)) for _ in range(3)] == [real(odd)] * 3
        assert len(cleaned) == 3


@pytest.mark.parametrize("cls", [DeviceSample, ProcessSample])
def test_the_copies_set_each_field_through_its_slot_and_the_records_stay_frozen(cls) -> None:
    """derive and fill write each field through its slot's own setter (what object.__setattr__
    would call): every field is a slot, and a sample still refuses assignment."""
    from dataclasses import FrozenInstanceError

    slot = type(DeviceSample.uuid)
    assert all(type(getattr(cls, f.name)) is slot for f in fields(cls))
    sample = _device() if cls is DeviceSample else _device().processes[0]
    name = fields(cls)[-1].name
    copy = derive(sample, **{name: getattr(sample, name)})
    assert copy == sample and copy is not sample
    with pytest.raises(FrozenInstanceError):
        setattr(copy, name, None)


#: Values that are not a measurement: each becomes ``None`` at the schema boundary.
NOT_A_NUMBER = (float("nan"), float("inf"), float("-inf"), True, "12", -1)


@pytest.mark.parametrize("name", ["utilization_percent", "memory_used_bytes", "memory_total_bytes",
                                  "temperature_celsius", "power_watts", "power_limit_watts",
                                  "energy_joules", "clock_mhz", "fan_percent"])
def test_every_measured_figure_that_is_not_a_number_is_none_however_the_sample_is_made(name) -> None:
    """A plug-in backend's NaN, infinity, bool or text never reaches a consumer (the exporter
    would serve NaN; the JSON snapshot, which refuses NaN, would fail): ``None``, through the
    constructor, ``derive`` and ``fill`` alike."""
    from allsmi.schema import fill
    for bad in NOT_A_NUMBER:
        if bad == -1 and name == "temperature_celsius":
            continue  # a temperature may be below zero
        made = replace(_device(), **{name: bad})
        assert getattr(made, name) is None, (name, bad)
        assert getattr(derive(_device(), **{name: bad}), name) is None, (name, bad)
        assert getattr(fill(_device(), **{name: bad}), name) is None, (name, bad)
    assert replace(_device(), temperature_celsius=-5).temperature_celsius == -5.0
    assert replace(_device(), memory_used_bytes=1.5e9).memory_used_bytes == 1_500_000_000
    # Outside its range (tests/test_schema_ranges.py): NVML's fan above its nominal maximum
    # is the NVIDIA backend's 100 %, the raw figure in its details.
    assert replace(_device(), fan_percent=105).fan_percent is None
    assert replace(_device(), fan_percent=100).fan_percent == 100.0


def test_a_process_s_figures_that_are_not_numbers_are_none_however_it_is_made() -> None:
    proc = ProcessSample(7, memory_bytes=1)
    for bad in NOT_A_NUMBER:
        for changes in ({"memory_bytes": bad}, {"utilization_percent": bad}):
            assert set(derive(proc, **changes).__getattribute__(k) for k in changes) == {None}
            assert set(replace(proc, **changes).__getattribute__(k) for k in changes) == {None}


def test_a_nan_from_a_backend_is_left_out_of_metrics_and_null_in_the_snapshot() -> None:
    """Over the exporter's own rendering: no NaN sample line, and the JSON renders."""
    import json

    import datetime as dt

    from allsmi.exporter.exposition import Exposition
    from allsmi.schema import HostSample, Snapshot
    dev = replace(_device(), temperature_celsius=float("nan"), power_watts=float("inf"),
                  utilization_percent=40.0)
    snap = Snapshot(timestamp=dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc),
                    host=HostSample(hostname="h"), devices=(dev,))
    exposition = Exposition()
    exposition.on_snapshot(snap)
    text = exposition.current.text.decode()
    values = [line.rsplit(" ", 1)[-1] for line in text.splitlines() if not line.startswith("#")]
    assert values and not {"NaN", "+Inf", "-Inf", "Inf"} & set(values)
    assert "allsmi_device_utilization_ratio" in text
    assert "allsmi_device_temperature_celsius{" not in text and "allsmi_device_power_watts{" not in text
    data = json.loads(exposition.current.snapshot_json())
    assert data["devices"][0]["temperature_celsius"] is None

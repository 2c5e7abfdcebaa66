"""The simulated MIG instances carry the ids the NVIDIA backend reports (``mig_slot``,
``gpu_instance_id``, ``compute_instance_id``), so the dashboard names them as nvidia-smi lists
them (``nvidia 7/1/0``), not by their place (``nvidia 7/0``)."""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict

import pytest

from allsmi.backends.simulated import simulated_backends
from allsmi.backends.simulated.identity import mig_instance_ids
from allsmi.dashboard.state.naming import DeviceNames
from allsmi.schema import DeviceSample, HostSample, Snapshot

MIG_KEYS = {"mig_slot", "gpu_instance_id", "compute_instance_id"}
AT = 1_790_000_000.0


def simulated(scenario: str = "mixed", *, bill_only: bool = False) -> list[DeviceSample]:
    out: list[DeviceSample] = []
    for backend in simulated_backends(scenario, clock=lambda: AT):
        backend.bill_only = bill_only
        backend.open()
        try:
            out.extend(backend.sample())
        finally:
            backend.close()
    return out


def real_mig_keys(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The detail keys of a MIG instance of the real NVIDIA backend (over the fake NVML)."""
    from allsmi.backends.nvidia import NvidiaBackend
    from tests.backends.nvml_fake import FakeGpu, FakeNvml

    FakeNvml([FakeGpu.from_profile("a100-sxm4-40gb-mig", 0)]).install(monkeypatch)
    backend = NvidiaBackend(process_owner=lambda pid: ("user", "cmd"))
    backend.open()
    try:
        migs = [d for d in backend.sample() if d.parent is not None]
    finally:
        backend.close()
    assert migs
    keys = {k for d in migs for k in d.details if k in MIG_KEYS}
    assert keys == MIG_KEYS  # (what this test relies on the real backend to report)
    return keys


def test_simulated_mig_instances_are_named_gpu_gi_ci_with_unique_ids(
        monkeypatch: pytest.MonkeyPatch) -> None:
    devices = simulated()
    migs = [d for d in devices if d.parent is not None and d.vendor == "nvidia"]
    assert len(migs) == 3
    keys = real_mig_keys(monkeypatch)
    for dev in migs:
        assert keys <= set(dev.details), dev.details
        assert all(type(dev.details[k]) is int for k in keys)
    per_gpu: dict[str, list[DeviceSample]] = defaultdict(list)
    for dev in migs:
        per_gpu[dev.parent].append(dev)  # type: ignore[index]
    for siblings in per_gpu.values():
        for key in ("mig_slot",):
            assert len({d.details[key] for d in siblings}) == len(siblings)
        pairs = [(d.details["gpu_instance_id"], d.details["compute_instance_id"])
                 for d in siblings]
        assert len(set(pairs)) == len(pairs)
    # The mixed H100's 3g.40gb, 2g.20gb and 1g.10gb: GPU instances 1, 5, 13 (as nvidia-smi
    # lists them made in that order), compute instance 0 each.
    assert [(d.details["gpu_instance_id"], d.details["compute_instance_id"]) for d in migs] \
        == [(1, 0), (5, 0), (13, 0)]

    snap = Snapshot(timestamp=dt.datetime(2026, 11, 22, 12, tzinfo=dt.timezone.utc),
                    host=HostSample(hostname="node-a"), devices=tuple(devices))
    names = DeviceNames()
    names.update([("node-a", snap)])
    shown = sorted(n for n in (names.name(k) for k in names.places) if n and "/" in n)
    assert shown == ["nvidia 7/1/0", "nvidia 7/13/0", "nvidia 7/5/0"]
    assert all(re.fullmatch(r"nvidia \d+/\d+/\d+", n) for n in shown)


def test_the_ids_are_constant_and_not_in_a_bill_only_sample() -> None:
    """The same ids every cycle (from the templates built once); a bill-only replay's samples
    leave details empty, as they leave every field no bill reads."""
    first, second = simulated(), simulated()
    ids = [d.details for d in first if d.parent is not None and d.vendor == "nvidia"]
    assert ids == [d.details for d in second if d.parent is not None and d.vendor == "nvidia"]
    assert all(not d.details for d in simulated(bill_only=True) if d.parent is not None)


@pytest.mark.parametrize(("profiles", "model", "gib", "expected"), [
    (["1g.10gb"] * 7, "NVIDIA H100 80GB HBM3", 80, [7, 8, 9, 10, 11, 12, 13]),
    (["1g.20gb"] * 4, "NVIDIA H100 80GB HBM3", 80, [3, 4, 5, 6]),
    (["7g.80gb"], "NVIDIA H100 80GB HBM3", 80, [0]),
    (["4g.40gb", "3g.40gb"], "NVIDIA H100 80GB HBM3", 80, [1, 2]),
    (["3g.20gb", "2g.10gb", "1g.5gb"], "NVIDIA A100-SXM4-40GB", 40, [1, 5, 13]),
    (["2g.12gb", "1g.6gb", "1g.6gb"], "NVIDIA A30", 24, [1, 5, 6]),
    (["7g.80gb", "1g.10gb", None], "NVIDIA H100 80GB HBM3", 80, [0, 15, 16]),  # (overbooked)
])
def test_gpu_instance_ids_follow_nvml_placement(profiles: list, model: str, gib: int,
                                                 expected: list[int]) -> None:
    made = mig_instance_ids(profiles, model, gib << 30)
    assert [m[0] for m in made] == list(range(len(profiles)))
    assert [m[1] for m in made] == expected
    assert all(m[2] == 0 for m in made)


def test_compute_instances_of_one_gpu_instance() -> None:
    made = mig_instance_ids(["1c.3g.40gb"] * 3 + ["3g.40gb"], "NVIDIA H100 80GB HBM3", 80 << 30)
    assert [m[1:] for m in made] == [(1, 0), (1, 1), (1, 2), (2, 0)]

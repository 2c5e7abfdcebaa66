"""Per-holder counters on /metrics: they add up to the device counters, carry the split method,
keep the user only with --processes and are dropped after their holder leaves."""

from __future__ import annotations

from allsmi.exporter.exposition import Exposition
from allsmi.schema import DeviceSample, ProcessSample, Workload

from .support import T0, device, series, snapshot
from .test_promtool import promtool_check

HOLDER_FAMILIES = ("allsmi_holder_allocated_seconds_total", "allsmi_holder_used_seconds_total",
                   "allsmi_holder_energy_joules_total")
DEVICE_OF = {"allsmi_holder_allocated_seconds_total": "allsmi_device_allocated_seconds_total",
             "allsmi_holder_used_seconds_total": "allsmi_device_busy_seconds_total",
             "allsmi_holder_energy_joules_total": "allsmi_device_energy_joules_total"}


def layout(step: int) -> tuple[DeviceSample, ...]:
    """A GPU shared by two users' processes (75/25), a GPU held by a pod and a Slurm job, a
    MIG-partitioned GPU with two instances, and a time-sliced GPU with two of four replicas."""
    shared = device("GPU-a", utilization_percent=80.0 if step % 2 else 40.0, processes=(
        ProcessSample(10, "ann", "a", 1 << 30, utilization_percent=60.0),
        ProcessSample(11, "bob", "b", 1 << 30, utilization_percent=20.0)))
    mixed = device("GPU-b", index=1, utilization_percent=2.0, processes=(), workloads=(
        Workload("kubernetes", namespace="ml", pod="web-0"), Workload("hpc-job", job_id="77")))
    mig_parent = device("GPU-c", index=2, utilization_percent=None, processes=())
    migs = tuple(device(f"MIG-c{i}", index=i, parent="GPU-c", partition_share=3 / 7,
                        utilization_percent=None, power_watts=None, processes=(
                            ProcessSample(20 + i, f"u{i}", "x", 1 << 20),)) for i in range(2))
    sliced = device("GPU-d", index=3, processes=(), workloads=tuple(
        Workload("kubernetes", namespace="inf", pod=f"p{i}", share=0.25) for i in range(2)))
    return (shared, mixed, mig_parent) + migs + (sliced,)


def sums(text: str) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    holders: dict[tuple[str, str], float] = {}
    devices: dict[tuple[str, str], float] = {}
    for (name, labels), value in series(text).items():
        lab = dict(labels)
        if name in HOLDER_FAMILIES:
            key = (name, lab["uuid"])
            holders[key] = holders.get(key, 0.0) + value
        elif name in DEVICE_OF.values():
            devices[(name, lab["uuid"])] = value
    return holders, devices


def test_holder_counters_add_up_to_the_device_counters() -> None:
    expo = Exposition(processes=True)
    for step in range(30):
        expo.on_snapshot(snapshot(layout(step), at=T0 + step))
    text = expo.current.text.decode()  # type: ignore[union-attr]
    promtool_check(text)
    holders, devices = sums(text)
    for (name, uuid), value in holders.items():
        whole = devices[(DEVICE_OF[name], uuid)]
        assert value <= whole * (1 + 1e-9), (name, uuid)
        if uuid == "GPU-d" and name == "allsmi_holder_allocated_seconds_total":
            assert value == pytest_approx(whole / 2)  # two of four replicas: half is nobody's
        else:
            assert value == pytest_approx(whole), (name, uuid)
    found = series(text)
    used = {dict(k[1])["user"]: v for k, v in found.items()
            if k[0] == "allsmi_holder_used_seconds_total" and dict(k[1])["uuid"] == "GPU-a"}
    assert used["ann"] == pytest_approx(3 * used["bob"])
    methods = {(dict(k[1])["uuid"], dict(k[1])["method"]) for k in found
               if k[0] == "allsmi_holder_allocated_seconds_total"}
    assert methods == {("GPU-a", "equal"), ("GPU-b", "equal"), ("MIG-c0", "partition"),
                       ("MIG-c1", "partition"), ("GPU-d", "declared")}
    pod = [dict(k[1]) for k in found if k[0] == "allsmi_holder_allocated_seconds_total"
           and dict(k[1])["uuid"] == "GPU-b"]
    assert {(p["namespace"], p["pod"], p["job_id"]) for p in pod} == {("ml", "web-0", ""),
                                                                       ("", "", "77")}


def test_user_label_only_with_processes_and_holders_are_dropped_after_leaving() -> None:
    expo = Exposition(processes=False)
    for step in range(5):
        expo.on_snapshot(snapshot(layout(step)[:1], at=T0 + step))
    found = series(expo.current.text.decode())  # type: ignore[union-attr]
    users = {dict(k[1])["user"] for k in found if k[0] in HOLDER_FAMILIES}
    assert users == {""}
    # ann and bob merged into one series per family: their sum is the device's
    holders, devices = sums(expo.current.text.decode())  # type: ignore[union-attr]
    assert holders[("allsmi_holder_used_seconds_total", "GPU-a")] == pytest_approx(
        devices[("allsmi_device_busy_seconds_total", "GPU-a")])
    idle = device("GPU-a", processes=())
    expo.on_snapshot(snapshot([idle], at=T0 + 100))
    assert any(k[0] in HOLDER_FAMILIES for k in series(expo.current.text.decode()))  # type: ignore[union-attr]
    expo.on_snapshot(snapshot([idle], at=T0 + 1000))  # more than 300 s after they left
    assert not any(k[0] in HOLDER_FAMILIES for k in series(expo.current.text.decode()))  # type: ignore[union-attr]


def pytest_approx(value: float):  # type: ignore[no-untyped-def]
    import pytest
    return pytest.approx(value, rel=1e-6, abs=1e-9)


def test_holders_sharing_a_device_are_each_active_for_their_allocated_time_x_its_activity() -> None:
    """Two users' processes on one GPU at once (75/25 of its busy time, equal allocation): each
    holder's active time is its half of the allocated time x the GPU's compute activity, as
    the ledger books it (never more than its own allocated time), and they add up to the
    device's active time."""
    expo = Exposition(processes=True)
    for step in range(20):
        shared = device("GPU-a", utilization_percent=80.0, compute_active_percent=40.0,
                        compute_active_source="sm_active", processes=(
                            ProcessSample(10, "ann", "a", 1 << 30, utilization_percent=60.0),
                            ProcessSample(11, "bob", "b", 1 << 30, utilization_percent=20.0)))
        expo.on_snapshot(snapshot((shared,), at=T0 + step))
    found = series(expo.current.text.decode())  # type: ignore[union-attr]

    def by_user(family: str) -> dict[str, float]:
        return {dict(k[1])["user"]: v for k, v in found.items() if k[0] == family}
    active, allocated = by_user("allsmi_holder_active_seconds_total"), \
        by_user("allsmi_holder_allocated_seconds_total")
    device_active = next(v for k, v in found.items() if k[0] == "allsmi_device_active_seconds_total")
    assert device_active == pytest_approx(19 * 0.4)
    for user in ("ann", "bob"):
        assert active[user] == pytest_approx(allocated[user] * 0.4), user
    assert sum(active.values()) == pytest_approx(device_active)

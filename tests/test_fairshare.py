"""The two splits of a shared device (allsmi.fairshare): methods, and sums that never exceed
the device, over thousands of random layouts."""

from __future__ import annotations

import random

import pytest

from allsmi.accounting.buckets import Bucket
from allsmi.accounting.ledger.store import Dim
from allsmi.fairshare import (ALLOCATION_METHODS, USAGE_METHODS, Holder, claim_units, general_split,
                              merge_methods, split)
from allsmi.schema import DeviceSample, ProcessSample, Workload
from allsmi.usage import Increment


def gpu(processes=(), workloads=None, parent=None) -> DeviceSample:  # type: ignore[no-untyped-def]
    return DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia", parent=parent,
                        health="ok", processes=tuple(processes), workloads=workloads)


def test_activity_splits_use_and_allocation_stays_equal() -> None:
    sp = split(gpu([ProcessSample(1, user="ann", utilization_percent=75.0),
                    ProcessSample(2, user="bob", utilization_percent=25.0)]))
    assert sp.allocation_method == "equal" and sp.usage_method == "activity"
    assert dict(sp.allocated) == {Holder("ann"): 0.5, Holder("bob"): 0.5}
    assert dict(sp.used) == {Holder("ann"): 0.75, Holder("bob"): 0.25}


def test_memory_when_activity_is_unknown_then_equal() -> None:
    sp = split(gpu([ProcessSample(1, user="ann", memory_bytes=3 << 30),
                    ProcessSample(2, user="bob", memory_bytes=1 << 30)]))
    assert sp.usage_method == "memory" and dict(sp.used)[Holder("ann")] == pytest.approx(0.75)
    sp = split(gpu([ProcessSample(1, user="ann", memory_bytes=3 << 30),
                    ProcessSample(2, user="bob")]))
    assert sp.usage_method == "equal" and dict(sp.used) == {Holder("ann"): 0.5, Holder("bob"): 0.5}


def test_one_holder_is_exclusive_and_a_partition_is_partition() -> None:
    assert split(gpu([ProcessSample(1, user="ann")])).allocation_method == "exclusive"
    assert split(gpu([ProcessSample(1, user="ann")], parent="GPU-0")).allocation_method == \
        "partition"
    assert split(gpu()).allocated == ()


def test_time_slicing_replicas_are_declared_and_the_rest_stays_unallocated() -> None:
    works = tuple(Workload("kubernetes", namespace="ml", pod=f"p{i}", share=0.25) for i in range(2))
    sp = split(gpu(workloads=works))
    assert sp.allocation_method == "declared"
    assert [w for _, w in sp.allocated] == [0.25, 0.25]  # half of the device is nobody's
    assert sum(w for _, w in sp.used) == pytest.approx(1.0)  # but all its use is theirs
    # A holder without a declared share gets an equal part of what is left.
    sp = split(gpu(workloads=works + (Workload("hpc-job", job_id="42"),)))
    assert dict(sp.allocated)[Holder(job="42")] == pytest.approx(0.5)
    # Shares declared beyond the device are scaled down to it.
    over = tuple(Workload("hpc-job", job_id=str(i), share=0.75) for i in range(2))
    assert [w for _, w in split(gpu(workloads=over)).allocated] == [0.5, 0.5]


def test_processes_of_several_pods_cannot_be_told_apart_so_use_is_split_equally() -> None:
    works = (Workload("kubernetes", namespace="a", pod="x"), Workload("kubernetes", namespace="a", pod="y"))
    procs = [ProcessSample(1, utilization_percent=80.0), ProcessSample(2, utilization_percent=20.0)]
    assert split(gpu(procs, works)).usage_method == "equal"
    # Batch jobs: each process's job id names its holder.
    jobs = (Workload("hpc-job", job_id="1", user="ann"), Workload("hpc-job", job_id="2", user="bob"))
    procs = [ProcessSample(1, job_id="1", utilization_percent=60.0),
             ProcessSample(2, job_id="2", utilization_percent=20.0)]
    sp = split(gpu(procs, jobs))
    assert sp.usage_method == "activity"
    assert dict(sp.used) == {Holder("ann", job="1"): 0.75, Holder("bob", job="2"): 0.25}


def test_merge_methods() -> None:
    assert merge_methods(["equal", None, "equal"]) == "equal"
    assert merge_methods(["equal", "declared"]) == "mixed"
    assert merge_methods([None, ""]) is None


def _random_device(rng: random.Random) -> DeviceSample:
    users = ("ann", "bob", "cy", None)
    jobs = ("1", "2", None)
    procs = [ProcessSample(
        pid=i + 1, user=rng.choice(users), job_id=rng.choice(jobs),
        memory_bytes=rng.choice((None, 0, rng.randrange(1, 1 << 34))),
        utilization_percent=rng.choice((None, 0.0, rng.uniform(0, 100))))
        for i in range(rng.randrange(5))]
    works = None
    if rng.random() < 0.6:
        works = tuple(Workload(
            rng.choice(("kubernetes", "hpc-job")), namespace=rng.choice(("ns", None)),
            pod=rng.choice((f"p{i}", None)), job_id=rng.choice(jobs), user=rng.choice(users),
            share=rng.choice((None, None, 0.25, 0.5, 1.0, rng.uniform(0.01, 1))))
            for i in range(rng.randrange(4)))
    return gpu(procs, works, parent=rng.choice((None, None, "GPU-0")))


def test_thousands_of_random_layouts_never_exceed_the_device() -> None:
    rng = random.Random(21)
    dim = Dim("GPU-1", "node", "nvidia", "H100", "", "default", "{}")
    for _ in range(5000):
        dev = _random_device(rng)
        sp = split(dev)
        alloc = sum(w for _, w in sp.allocated)
        used = sum(w for _, w in sp.used)
        assert alloc <= 1.0 + 1e-9 and used <= 1.0 + 1e-9
        assert all(w >= 0 for _, w in sp.allocated + sp.used)
        if sp.allocated:
            assert sp.allocation_method in ALLOCATION_METHODS
            assert sp.usage_method in USAGE_METHODS
        everyone = all(any(h) for h in (
            [Holder(p.user, None, None, p.job_id) for p in dev.processes or ()]
            if not dev.workloads else [Holder(w.user, w.namespace, w.pod, w.job_id)
                                       for w in dev.workloads]))
        if (dev.processes or dev.workloads) and everyone and not dev.workloads:
            assert alloc == pytest.approx(1.0) and used == pytest.approx(1.0)
        if sp.allocation_method in ("equal", "exclusive", "partition") and everyone \
                and all(w.user is not None for w in dev.workloads or ()):
            assert alloc == pytest.approx(1.0)
        # Through a ledger bucket: the holders' figures add up to at most the device's.
        bucket = Bucket(0, dim, 0.0)
        for _ in range(3):
            dt = rng.uniform(0.5, 5)
            busy = rng.uniform(0, dt)
            idle = rng.choice((None, 0.0, dt, rng.uniform(0, dt)))
            bucket.put(Increment("GPU-1", 0.0, dt, dt, dt, busy, rng.uniform(0, 3000), idle), sp,
                       rng.choice((1.0, 0.5, 1 / 7)))
        for name in ("allocated", "busy", "energy", "billed", "idle", "idle_billed",
                     "idle_energy", "used_billed"):
            whole = getattr(bucket, name) or 0.0
            parts = sum(getattr(acc, name) or 0.0 for acc in bucket.holders.values())
            assert parts <= whole * (1 + 1e-9) + 1e-9, name
            if name in ("busy", "used_billed") and sp.used and used == pytest.approx(1.0):
                assert parts == pytest.approx(whole), name
            if name in ("allocated", "billed", "idle", "idle_billed", "idle_energy") \
                    and alloc == pytest.approx(1.0):
                assert parts == pytest.approx(whole), name
            if name == "energy" and alloc == pytest.approx(1.0) and used == pytest.approx(1.0):
                assert parts == pytest.approx(whole), name


def test_the_one_claimant_fast_path_gives_what_the_general_rule_gives() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(5000):
        dev = _random_device(rng)
        units = claim_units(dev)
        if units:
            assert split(dev) == general_split(dev, units), dev
            checked += len(units) == 1
    assert checked > 500

"""The suite's own scheduling (tests/ordering.py, tests/conftest.py): tests marked ``alone`` run
first, those marked ``long`` start early, spread over the workers' slices and staggered."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler.worksteal import WorkStealingScheduling

from . import conftest
from .ordering import (PREFIX, SPAN, long_seconds, planned_starts, slice_sizes, spread, staggered,
                       time_shares)


class _Config:
    """What pytest-xdist's scheduler reads of the config: ``--tx`` (``-n 4`` gives 4 popen)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx"
        return [f"{self.workers}*popen"]


class _Node:
    """A worker as the scheduler sees it: it records the tests it is sent."""

    shutting_down = False

    def __init__(self, number: int) -> None:
        self.sent: list[int] = []
        self.gateway = type("Gateway", (), {"id": f"gw{number}"})()

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def send_steal(self, indices: list[int]) -> None:
        """Asked to give tests back (a worker ran out): not answered, so nothing moves."""

    def shutdown(self) -> None:
        """No test left to give it."""


def first_slices(names: list[str], workers: int) -> list[list[str]]:
    """The tests pytest-xdist's own worksteal scheduler first sends each worker."""
    scheduler = WorkStealingScheduling(_Config(workers))  # type: ignore[arg-type]
    nodes = [_Node(k) for k in range(workers)]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
    for node in nodes:
        scheduler.add_node_collection(node, names)  # type: ignore[arg-type]
    scheduler.schedule()
    return [[names[i] for i in node.sent] for node in nodes]


@pytest.mark.parametrize("count", [0, 1, 3, 4, 7, 2341])
@pytest.mark.parametrize("workers", [2, 3, 4])
def test_the_slices_are_the_ones_the_scheduler_cuts(count: int, workers: int) -> None:
    names = [f"t{i}" for i in range(count)]
    sizes = [len(s) for s in first_slices(names, workers)]
    assert sizes == slice_sizes(count, workers)


def test_long_tests_are_dealt_longest_first_to_the_least_loaded_slice() -> None:
    names = [f"t{i}" for i in range(40)]
    seconds = {3: 100.0, 5: 60.0, 8: 50.0, 20: 45.0, 30: 10.0, 31: 5.0}
    alone = {12, 25}
    order = spread(names, 4, {i: s for i, s in seconds.items()}, alone)
    assert sorted(order) == sorted(names)  # every test once
    slices = first_slices(order, 4)
    # slice 0 starts with the alone tests, in their order, then its long tests
    assert slices[0][:2] == ["t12", "t25"]
    where = {name: k for k, part in enumerate(slices) for name in part}
    load = [sum(s for i, s in seconds.items() if where[f"t{i}"] == k) for k in range(4)]
    # longest first to the least loaded: 100 | 60 | 50 | 45, then 10 to the 45 and 5 to the 50
    assert sorted(load) == [55.0, 55.0, 60.0, 100.0]
    for k, part in enumerate(slices):
        long_here = [n for n in part if int(n[1:]) in seconds]
        assert long_here == sorted(long_here, key=lambda n: -seconds[int(n[1:])])
        # in the slice's first stretch, after the alone tests or a short prefix of ordinary ones
        assert all(part.index(n) < _bound(part, len(long_here), len(alone) if k == 0 else 0)
                   for n in long_here), (k, part)
    # the ordinary tests keep their collected order
    ordinary = [n for n in order if int(n[1:]) not in seconds and int(n[1:]) not in alone]
    assert ordinary == sorted(ordinary, key=lambda n: int(n[1:]))


def _bound(part: list[Any], longs: int, alone: int) -> int:
    """The index in a slice before which its long tests lie (see tests/ordering.py)."""
    return round(len(part) * (PREFIX + SPAN)) + longs + alone + 1


def test_the_long_tests_are_planned_half_the_workers_at_a_time() -> None:
    """Six slices with a long test each: not six long tests at the heads of six workers (the
    store tests wait with the CPU idle), but three, and three more once those are done."""
    names = [f"t{i}" for i in range(600)]
    seconds = {i: 50.0 for i in range(0, 600, 100)}
    slices = first_slices(spread(names, 6, seconds, set()), 6)
    where = sorted(next(j for j, n in enumerate(part) if int(n[1:]) in seconds) / len(part)
                   for part in slices)
    assert max(where[:3]) < PREFIX + 0.02 and min(where[3:]) > PREFIX + SPAN / 2 - 0.02, where


def test_planned_starts_fill_the_lanes_longest_first() -> None:
    # lane A: 100, then 45; lane B: 60, 50, 10 (ends 120, before A's 145)
    starts = planned_starts({0: 100.0, 1: 60.0, 2: 50.0, 3: 45.0, 4: 10.0}, 2)
    assert starts == {0: 0.0, 1: 0.0, 2: 60 / 145, 3: 100 / 145, 4: 110 / 145}
    assert planned_starts({}, 3) == {}


def test_staggered_places_every_test_once_in_order() -> None:
    for fill, longs, due in (([], [1, 2], [0.1, 0.5]), ([10, 11, 12], [1, 2, 3], [0.2, 0.9, 1.0]),
                             (list(range(10, 30)), [1, 2], [0.0, 0.5])):
        out = staggered(fill, time_shares(fill), longs, due)
        assert sorted(out) == sorted(fill + longs)
        assert [n for n in out if n in longs] == longs and [n for n in out if n in fill] == fill
    fill = list(range(100, 180))
    out = staggered(fill, time_shares(fill), [1, 2], [0.25, 0.5])
    assert out.index(1) == 20 and out.index(2) == 41


def test_a_files_tests_share_its_time() -> None:
    """A file of many parametrized cases counts as one file, not as many tests: the long test
    due halfway through three files comes in the second, not within the first's 600 cases."""
    files = ["keys"] * 600 + ["a", "b"]
    assert time_shares(files)[600:] == [pytest.approx(1 / 3), pytest.approx(2 / 3)]
    names = [f"t{i}" for i in range(602)]
    out = staggered(names, time_shares(files), ["long"], [0.5])
    assert out.index("long") == 601
    slices = first_slices(spread(names + ["long"], 2, {602: 9.0}, set(),
                                 unit=lambda n: files[int(n[1:])] if n[1:].isdigit() else n), 2)
    assert "long" in slices[0] or "long" in slices[1]


def test_without_workers_alone_then_longest_then_the_rest() -> None:
    names = list("abcdef")
    assert spread(names, 1, {1: 5.0, 4: 9.0}, {3}) == ["d", "e", "b", "a", "c", "f"]


def test_this_run_is_in_that_order(request: pytest.FixtureRequest) -> None:
    items: list[Any] = request.session.items
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    alone = [item.get_closest_marker("alone") is not None for item in items]
    assert alone == sorted(alone, reverse=True), "a test marked alone runs after one that is not"
    # counted after -k and -m deselected theirs: a long test waits only for those that run
    assert conftest.ALONE_TESTS == sum(alone)
    if len({item.path for item in items}) > 100:  # the whole suite, not a file or two
        assert sum(long_seconds(item) > 0 for item in items) >= 10, \
            "the suite's long tests are marked long(seconds)"
    if workers > 1:
        names = [item.nodeid for item in items]
        seconds = {item.nodeid: long_seconds(item) for item in items}
        for part in first_slices(names, workers):
            ordinary = [n for n in part if seconds[n] == 0]
            share = dict(zip(ordinary, time_shares([n.split("::")[0] for n in ordinary])))
            for n in (n for n in part if seconds[n] > 0):
                after = next((share[m] for m in part[part.index(n):] if m in share), 1.0)
                assert after < PREFIX + SPAN + 0.05, f"{n} is not in its slice's first stretch"


def test_cpu_to_itself_waits_for_the_other_workers_tests_and_holds_new_ones_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """conftest.py's ``cpu_to_itself`` (a stretch of a test held as an ``alone`` test is): it
    waits while another worker's test holds its share, and meanwhile no new test starts."""
    import fcntl
    import threading

    own = [open(tmp_path / "gate", "a"), open(tmp_path / "cpu", "a")]  # (this test's hold)
    other = open(tmp_path / "cpu", "a")  # another worker's test, running
    other_gate = open(tmp_path / "gate", "a")
    try:
        fcntl.flock(own[1], fcntl.LOCK_SH)
        fcntl.flock(other, fcntl.LOCK_SH)
        monkeypatch.setattr(conftest, "_SHARED", own)
        inside, leave = threading.Event(), threading.Event()

        def stretch() -> None:
            with conftest.cpu_to_itself():
                inside.set()
                leave.wait(30)
        worker = threading.Thread(target=stretch)
        worker.start()
        assert not inside.wait(0.5), "entered while another worker's test held its share"
        fcntl.flock(other, fcntl.LOCK_UN)  # that test ends
        assert inside.wait(10)
        with pytest.raises(BlockingIOError):  # a new test waits at the gate meanwhile
            fcntl.flock(other_gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        leave.set()
        worker.join(10)
        fcntl.flock(other_gate, fcntl.LOCK_EX | fcntl.LOCK_NB)  # and starts once it is over
        fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # beside this test's shared hold
    finally:
        for f in own + [other, other_gate]:
            f.close()


class _Marked:
    """What ``alone_throughout`` reads of a test: its closest ``alone`` marker."""

    def __init__(self, marker: Any) -> None:
        self.marker = marker

    def get_closest_marker(self, name: str) -> Any:
        return self.marker if name == "alone" else None


def test_alone_holds_the_cpu_throughout_unless_whole_is_false() -> None:
    from .ordering import alone_throughout, is_alone
    assert alone_throughout(_Marked(pytest.mark.alone.mark))  # type: ignore[arg-type]
    stretch = _Marked(pytest.mark.alone(whole=False).mark)
    assert is_alone(stretch) and not alone_throughout(stretch)  # type: ignore[arg-type]
    assert not alone_throughout(_Marked(None)) and not is_alone(_Marked(None))  # type: ignore[arg-type]

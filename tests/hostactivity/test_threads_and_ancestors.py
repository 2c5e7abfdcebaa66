"""Waits and throttling the main thread and the process's own cgroup do not show, on fake /proc
and /sys trees read by the real sampler and classified by the real rule.

* A CPU limit on an ancestor cgroup (a Kubernetes pod above its container, a Slurm job above
  its step) throttles the process: the most throttled level of the chain is its throttling;
  a level that cannot be read never makes it read "not throttled".
* A data-loader thread's block-I/O wait, or its wait for a CPU, is in its own
  ``/proc/PID/task/TID/stat`` and ``schedstat``: summed over the threads, thread by thread, a
  thread that comes or goes adds nothing (never a negative or invented figure) and leaves the
  figure partly measured.
* Past the thread limit, a reading is partial: none of the threads read in ``D`` is not "no
  I/O wait", so the holder is not called idle.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from allsmi.hostactivity import procfs
from allsmi.hostactivity.sampler import HostActivity, HostActivitySampler
from allsmi.hostactivity.settings import ActivitySettings
from allsmi.schema import DeviceSample, ProcessSample
from allsmi.collection.waiting import classify_holder

from .fakeproc import stat_line, write_cgroup, write_node, write_process

S = ActivitySettings()
PID = 60
IO = {"rchar": 0, "wchar": 0, "read_bytes": 0, "write_bytes": 0}
POD = "kubepods.slice/kubepods-burstable.slice/pod1"
CONTAINER = f"{POD}/cri-containerd-abc.scope"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _device(*pids: int) -> DeviceSample:
    return DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                        utilization_percent=100.0, compute_active_percent=2.0,
                        compute_active_source="sm_active", interconnect_rx_bytes_per_second=0.0,
                        interconnect_tx_bytes_per_second=0.0,
                        processes=tuple(ProcessSample(p, "ann") for p in (pids or (PID,))))


def _classify(activity: HostActivity, *pids: int) -> tuple[str, str]:
    dev = _device(*pids)
    return classify_holder(dev, dev.processes or (), activity, S)


def _ticks() -> int:
    ticks = procfs.clock_ticks()
    assert ticks is not None
    return ticks


def _sampler(root: Path, clock: _Clock, delayacct: bool = True) -> HostActivitySampler:
    write_node(root, net={"eth0": (0, 0)})
    kernel = root / "proc" / "sys" / "kernel"
    kernel.mkdir(parents=True, exist_ok=True)
    (kernel / "task_delayacct").write_text("1\n" if delayacct else "0\n")
    return HostActivitySampler(str(root / "proc"), str(root / "sys"), monotonic=clock)


def _periods(periods: int, throttled: int) -> str:
    return f"usage_usec 0\nnr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec 0\n"


# ---- throttling on an ancestor cgroup -------------------------------------------------------

def _pod(root: Path, pod: tuple[int, int], container: tuple[int, int] = (0, 0),
         top: tuple[int, int] | None = None) -> None:
    write_cgroup(root, CONTAINER, _periods(*container))
    write_cgroup(root, POD, _periods(*pod))
    write_cgroup(root, "kubepods.slice/kubepods-burstable.slice", "usage_usec 0\n")  # no controller
    write_cgroup(root, "kubepods.slice", _periods(*(top or (0, 0))))


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``procfs.read_proc_file`` reads from now on, in order."""
    reads: list[str] = []
    real = procfs.read_proc_file

    def counted(path: str) -> bytes:
        reads.append(path)
        return real(path)
    monkeypatch.setattr(procfs, "read_proc_file", counted)
    return reads


def test_a_limit_on_the_pods_cgroup_throttles_its_container(tmp_path: Path) -> None:
    """The pod's cgroup has the limit: throttled in 10 of its 20 periods, while the
    container's own cgroup (no limit of its own) ran none. Read from the container's cgroup
    alone, the holder was "not throttled" (0) and idle: ``nothing``."""
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    write_process(tmp_path, PID, io=IO, sched=(0, 0), cgroup=f"0::/{CONTAINER}\n")
    _pod(tmp_path, pod=(0, 0))
    sampler.sample([PID])
    clock.now += 2.0
    _pod(tmp_path, pod=(20, 10))
    activity = sampler.sample([PID])
    assert activity.processes[PID].throttled_fraction == pytest.approx(0.5)
    reason, why = _classify(activity)
    assert reason == "host" and "CPU-throttled 50 %" in why, why
    # the evidence names the level whose limit throttled: the pod's, not the container's
    assert activity.processes[PID].throttled_cgroup == str(tmp_path / "sys" / "fs" / "cgroup" / POD)
    assert f"(at {tmp_path / 'sys' / 'fs' / 'cgroup' / POD})" in why, why


def test_a_slurm_jobs_limit_in_cgroup_v1_throttles_its_step(tmp_path: Path) -> None:
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    step = "cpu,cpuacct/slurm/uid_1/job_9/step_0"
    write_process(tmp_path, PID, io=IO, sched=(0, 0),
                  cgroup="5:memory:/x\n4:cpu,cpuacct:/slurm/uid_1/job_9/step_0\n0::/\n")
    write_cgroup(tmp_path, step, _periods(0, 0))
    write_cgroup(tmp_path, "cpu,cpuacct/slurm/uid_1/job_9", _periods(100, 0))
    sampler.sample([PID])
    clock.now += 2.0
    write_cgroup(tmp_path, "cpu,cpuacct/slurm/uid_1/job_9", _periods(120, 6))
    job = sampler.sample([PID]).processes[PID]
    assert job.throttled_fraction == pytest.approx(0.3)
    assert job.throttled_cgroup is not None and job.throttled_cgroup.endswith("/slurm/uid_1/job_9")


def test_an_unreadable_ancestor_leaves_throttling_unknown_never_zero(tmp_path: Path) -> None:
    """Every level read ran unthrottled, but one could not be read: "not throttled" is
    unknown (``None``); a level read throttled is still throttling (a lower bound)."""
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    write_process(tmp_path, PID, io=IO, sched=(0, 0), cgroup=f"0::/{CONTAINER}\n")
    _pod(tmp_path, pod=(0, 0))
    pod_stat = tmp_path / "sys" / "fs" / "cgroup" / POD / "cpu.stat"
    sampler.sample([PID])
    clock.now += 2.0
    _pod(tmp_path, pod=(0, 0), container=(20, 0))
    pod_stat.unlink()
    pod_stat.mkdir()  # (reading it fails: EISDIR)
    assert sampler.sample([PID]).processes[PID].throttled_fraction is None
    clock.now += 2.0
    pod_stat.rmdir()  # readable again (one reading of it is no interval), the top throttled
    _pod(tmp_path, pod=(0, 0), container=(40, 0), top=(20, 8))
    activity = sampler.sample([PID])
    assert activity.processes[PID].throttled_fraction == pytest.approx(0.4)  # the top's
    clock.now += 2.0
    assert sampler.sample([PID]).processes[PID].throttled_fraction == 0.0  # all read, none ran


@pytest.mark.parametrize("container", [(20, 0), (20, 1)], ids=["none-read", "under-threshold"])
def test_a_level_not_measured_never_lets_a_quiet_holder_be_idle(
        tmp_path: Path, container: tuple[int, int]) -> None:
    """The pod's ``cpu.stat`` (where its limit is) cannot be read; the container's own level,
    read, shows no throttling or 5 % (under ``host_throttled_fraction``). The pod may have been
    throttled in every period (rule 7: ``host``), so the holder, quiet otherwise, is not called
    ``nothing``: it is ``unknown``, saying the throttling was partly measured."""
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    write_process(tmp_path, PID, io=IO, sched=(0, 0), cgroup=f"0::/{CONTAINER}\n")
    _pod(tmp_path, pod=(0, 0))
    sampler.sample([PID])
    clock.now += 2.0
    _pod(tmp_path, pod=(100, 50), container=container)
    pod_stat = tmp_path / "sys" / "fs" / "cgroup" / POD / "cpu.stat"
    pod_stat.unlink()
    pod_stat.mkdir()  # (reading it fails: EISDIR)
    activity = sampler.sample([PID])
    reason, why = _classify(activity)
    assert reason == "unknown" and "cgroup CPU throttling partly measured" in why, why
    clock.now += 2.0
    pod_stat.rmdir()  # read again, but once: still not an interval of its own
    _pod(tmp_path, pod=(100, 50), container=(container[0] + 20, container[1]))
    assert _classify(sampler.sample([PID]))[0] == "unknown"
    clock.now += 2.0  # every level read twice, none throttled: idle
    assert _classify(sampler.sample([PID]))[0] == "nothing"


def test_ancestors_are_bounded_and_shared_ancestors_read_once_a_cycle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cgroup 20 deep: 16 levels are read and the rest are not checked (unknown, not 0).
    Two processes of one pod: its cgroup's ``cpu.stat`` is read once a cycle."""
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    deep = "/".join(f"l{i}" for i in range(20))
    for depth in range(1, 21):
        write_cgroup(tmp_path, "/".join(f"l{i}" for i in range(depth)), _periods(0, 0))
    write_process(tmp_path, PID, io=IO, sched=(0, 0), cgroup=f"0::/{deep}\n")
    write_process(tmp_path, PID + 10, io=IO, sched=(0, 0), cgroup=f"0::/{CONTAINER}\n")
    write_process(tmp_path, PID + 20, io=IO, sched=(0, 0), cgroup=f"0::/{CONTAINER}\n")
    _pod(tmp_path, pod=(0, 0))
    sampler.sample([PID, PID + 10, PID + 20])
    reads = counted_reads(monkeypatch)
    clock.now += 2.0
    activity = sampler.sample([PID, PID + 10, PID + 20])
    assert activity.processes[PID].throttled_fraction is None  # 4 levels above not checked
    assert activity.processes[PID + 10].throttled_fraction == 0.0
    assert sum(1 for p in reads if p.endswith(f"{POD}/cpu.stat")) == 1
    assert sum(1 for p in reads if "/l0/" in p and p.endswith("cpu.stat")) == 16


# ---- waits summed over the threads -----------------------------------------------------------

def _thread(root: Path, pid: int, tid: int, blkio: int = 0, sched: tuple[int, int] = (0, 0),
            start: int = 1000, state: str = "S") -> None:
    where = root / "proc" / str(pid) / "task" / str(tid)
    where.mkdir(parents=True, exist_ok=True)
    (where / "stat").write_text(stat_line(tid, state, start=start, blkio=blkio))
    (where / "schedstat").write_text(f"{sched[0]} {sched[1]} 5\n")


def _remove_thread(root: Path, pid: int, tid: int) -> None:
    where = root / "proc" / str(pid) / "task" / str(tid)
    for name in ("stat", "schedstat"):
        (where / name).unlink()
    where.rmdir()


def test_a_loader_threads_io_wait_is_the_processs(tmp_path: Path) -> None:
    """The main thread sleeps; thread 61 waits on block I/O 0.8 s of the 2 s interval
    (memory-mapped data: nothing read through read()), never caught in ``D``. From the main
    thread's ``delayacct_blkio_ticks`` alone the process was idle (``nothing``)."""
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    write_process(tmp_path, PID, threads=2, io=IO, sched=(0, 0))
    sampler.sample([PID])
    clock.now += 2.0
    _thread(tmp_path, PID, PID + 1, blkio=int(0.8 * _ticks()))
    activity = sampler.sample([PID])
    p = activity.processes[PID]
    assert p.blocked_fraction == pytest.approx(0.4) and p.blocked_threads == 0
    reason, why = _classify(activity)
    assert reason == "input" and "block-I/O wait up to 40 %" in why, why


def test_a_thread_waiting_for_a_cpu_is_the_processs(tmp_path: Path) -> None:
    """Thread 61 on a CPU 0.1 s and waiting for one 1.8 s of 2 s (an oversubscribed node): it
    wanted a CPU all the time. From the main thread's schedstat alone: idle."""
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    write_process(tmp_path, PID, threads=2, io=IO, sched=(0, 0))
    sampler.sample([PID])
    clock.now += 2.0
    write_process(tmp_path, PID, threads=2, io=IO, sched=(0, 0), cpu=int(0.1 * _ticks()))
    _thread(tmp_path, PID, PID + 1, sched=(10**8, 18 * 10**8))
    activity = sampler.sample([PID])
    assert activity.processes[PID].runnable_fraction == pytest.approx(0.95)
    assert _classify(activity)[0] == "host"


def test_threads_that_come_and_go_add_nothing_invented(tmp_path: Path) -> None:
    """A thread that ended in the interval (its counters gone), one whose id was taken by a
    new thread (another start: its counters began again at 0) and one started in the
    interval: no negative or lifetime figure; a thread started while every thread was read
    counts whole; the ended one's wait is unknown, so the figure is partly measured and the
    holder is not called idle."""
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    write_process(tmp_path, PID, threads=1, io=IO, sched=(0, 0))
    _thread(tmp_path, PID, PID + 1, blkio=50, sched=(9 * 10**9, 9 * 10**9))
    _thread(tmp_path, PID, PID + 2, blkio=70, sched=(9 * 10**9, 9 * 10**9))
    sampler.sample([PID])
    clock.now += 2.0
    _remove_thread(tmp_path, PID, PID + 1)  # ended
    _thread(tmp_path, PID, PID + 2, blkio=1, sched=(10, 10), start=1100)  # id reused
    _thread(tmp_path, PID, PID + 3, blkio=2, sched=(0, 20))  # new
    p = sampler.sample([PID]).processes[PID]
    ticks = _ticks()
    assert p.blocked_fraction == pytest.approx(3 / (2.0 * ticks))  # the new threads' whole
    assert p.runnable_fraction == pytest.approx(40 / 2e9)
    assert p.threads_unmeasured == 2  # the ended one and the reused id's old thread
    clock.now += 2.0
    activity = sampler.sample([PID])  # the same threads again: all measured, all quiet
    assert activity.processes[PID].threads_unmeasured == 0
    assert activity.processes[PID].blocked_fraction == 0.0
    assert _classify(activity)[0] == "nothing"
    clock.now += 2.0
    _remove_thread(tmp_path, PID, PID + 3)
    reason, why = _classify(sampler.sample([PID]))
    assert reason == "unknown" and "threads' waits partly measured" in why, why


def test_each_threads_stat_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_process(tmp_path, PID, threads=3, io=IO, sched=(0, 0), tgid=PID)
    reads = counted_reads(monkeypatch)
    r = procfs.read_process(PID, str(tmp_path / "proc"), str(tmp_path / "sys/fs/cgroup"), True)
    assert r is not None and r.threads_seen == 3
    assert len(reads) == len(set(reads))
    assert sum(1 for p in reads if "/task/" in p and p.endswith("/stat")) == 3


# ---- past the thread limit -------------------------------------------------------------------

def _limit(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    for name in ("allsmi.hostactivity.threads", "allsmi.hostactivity.procfs"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        monkeypatch.setattr(module, "MAX_THREADS", limit, raising=False)


def test_past_the_thread_limit_no_thread_in_d_is_not_no_io_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six threads, four read: none of the four in ``D`` says nothing of the other two, so
    the holder is ``unknown``, never ``nothing``; one of the four in ``D`` is I/O wait."""
    _limit(monkeypatch, 4)
    clock = _Clock()
    sampler = _sampler(tmp_path, clock)
    write_process(tmp_path, PID, threads=6, io=IO, sched=(0, 0))
    sampler.sample([PID])
    clock.now += 2.0
    activity = sampler.sample([PID])
    p = activity.processes[PID]
    assert p.blocked_threads is None
    assert any("6 threads, 4 read" in problem for problem in p.problems), p.problems
    reason, why = _classify(activity)
    assert reason == "unknown" and "6 threads, 4 read" in why, why
    clock.now += 2.0
    write_process(tmp_path, PID, threads=6, blocked=1, io=IO, sched=(0, 0))
    activity = sampler.sample([PID])
    assert activity.processes[PID].blocked_threads == 1
    assert _classify(activity)[0] == "input"

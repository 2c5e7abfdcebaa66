"""The host readers on fake /proc and /sys trees (missing, unreadable, other kernels) and on
this machine's own /proc."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from allsmi.hostactivity import procfs
from allsmi.hostactivity.node import read_node
from allsmi.hostactivity.procfs import parse_stat, read_process
from allsmi.hostactivity.sampler import HostActivitySampler

from .fakeproc import stat_line, write_cgroup, write_node, write_process


def _reading(tmp: Path, pid: int, **kw: object) -> procfs.ProcessReading | None:
    return read_process(pid, str(tmp / "proc"), str(tmp / "sys" / "fs" / "cgroup"), **kw)  # type: ignore[arg-type]


def test_process_counters_threads_io_and_cgroup_v2(tmp_path: Path) -> None:
    write_process(tmp_path, 42, state="S", cpu=250, threads=4, blocked=3, blkio=17,
                  io={"rchar": 5000, "wchar": 60, "read_bytes": 4096, "write_bytes": 0},
                  cgroup="0::/kubepods.slice/pod1\n")
    write_cgroup(tmp_path, "kubepods.slice/pod1",
                 "usage_usec 10\nnr_periods 40\nnr_throttled 3\nthrottled_usec 777\n")
    r = _reading(tmp_path, 42, delayacct=True)
    assert r is not None
    assert (r.state, r.cpu_ticks, r.threads, r.blocked_threads, r.threads_seen) == ("S", 250, 4, 3, 4)
    assert (r.read_chars, r.write_chars, r.disk_read_bytes, r.disk_write_bytes) == (5000, 60, 4096, 0)
    assert r.blkio_ticks == 17 and (r.cpu_periods, r.throttled_periods) == (40, 3)
    assert r.problems == ()
    assert r.cgroup is not None and r.cgroup.endswith("kubepods.slice/pod1/cpu.stat")


def test_cgroup_v1_periods_from_the_cpu_controller(tmp_path: Path) -> None:
    write_process(tmp_path, 7, cgroup="5:memory:/x\n4:cpu,cpuacct:/slurm/uid_1/job_9\n0::/\n",
                  io={"rchar": 0})
    write_cgroup(tmp_path, "cpu,cpuacct/slurm/uid_1/job_9",
                 "nr_periods 5\nnr_throttled 2\nthrottled_time 3000000\n")
    r = _reading(tmp_path, 7)
    assert r is not None and (r.cpu_periods, r.throttled_periods) == (5, 2)


def test_no_cpu_controller_leaves_throttling_unknown(tmp_path: Path) -> None:
    write_process(tmp_path, 8, cgroup="0::/user.slice\n", io={"rchar": 0})
    write_cgroup(tmp_path, "user.slice", "usage_usec 10\n")  # no cpu controller: no periods
    r = _reading(tmp_path, 8)
    assert r is not None and r.throttled_periods is None and r.cpu_periods is None


def test_delay_accounting_off_or_old_kernel_is_unknown_not_zero(tmp_path: Path) -> None:
    write_process(tmp_path, 9, blkio=0)
    assert _reading(tmp_path, 9, delayacct=False).blkio_ticks is None  # type: ignore[union-attr]
    write_process(tmp_path, 10, blkio=None)  # a kernel whose stat line stops before field 42
    r = _reading(tmp_path, 10, delayacct=True)
    assert r is not None and r.blkio_ticks is None and r.cpu_ticks == 0


def test_command_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    parsed = parse_stat(stat_line(5, "D", 3, 4, 2, 99, comm="a) (b c").encode())
    assert parsed == ("D", 7, 2, 99, 0)
    assert parse_stat(b"garbage") is None and parse_stat(b"1 (x) S 1 2") is None


def test_missing_and_unreadable_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _reading(tmp_path, 12345) is None  # gone
    base = write_process(tmp_path, 11, threads=2, io=None, cgroup=None)
    r = _reading(tmp_path, 11)
    assert r is not None and r.read_chars is None and r.cgroup is None
    assert any("/proc/11/io unreadable" in p for p in r.problems)
    # another user's process, read by an exporter that is not root: EACCES on io only
    (base / "io").write_text("rchar: 1\n")
    real = procfs.read_proc_file

    def denied(path: str) -> bytes:
        if path.endswith("/io"):
            raise PermissionError(13, "Permission denied", path)
        return real(path)
    monkeypatch.setattr(procfs, "read_proc_file", denied)
    r = _reading(tmp_path, 11)
    assert r is not None and r.read_chars is None
    assert any("another user's process: needs CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH" in p
               for p in r.problems)
    # a container without the task directory
    monkeypatch.setattr(procfs, "read_proc_file", real)
    for tid in (base / "task").iterdir():
        (tid / "stat").unlink()
        tid.rmdir()
    (base / "task").rmdir()
    r = _reading(tmp_path, 11)
    assert r is not None and r.blocked_threads is None and any("task" in p for p in r.problems)


def test_node_counters_and_what_is_missing(tmp_path: Path) -> None:
    write_node(tmp_path, iowait=100, total=1000, psi_io_usec=500,
               net={"lo": (10**9, 10**9), "eth0": (100, 200), "veth12": (10**9, 1), "ib0": (5, 6)},
               ib={"mlx5_0": (1000, 2000)})
    node = read_node(str(tmp_path / "proc"), str(tmp_path / "sys"))
    assert node.cpu_ticks is not None and node.cpu_ticks[4] == 100
    assert node.pressure_some_usec == {"cpu": 0, "io": 500, "memory": 0}
    assert node.network == {"eth0": (100, 200), "ib0": (5, 6)}  # lo and veths left out
    assert node.infiniband == {"mlx5_0/1": (4000, 8000)}  # 4-byte words
    assert node.problems == ()
    bare = tmp_path / "bare"
    (bare / "proc").mkdir(parents=True)
    node = read_node(str(bare / "proc"), str(bare / "sys"))
    assert node.cpu_ticks is None and node.pressure_some_usec == {} and node.network == {}
    assert node.infiniband == {}
    assert any("pressure" in p for p in node.problems) and any("stat" in p for p in node.problems)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rates_between_readings(tmp_path: Path) -> None:
    clock = _Clock()
    write_node(tmp_path, iowait=0, total=1000, psi_io_usec=0, net={"eth0": (0, 0)},
               ib={"mlx5_0": (0, 0)})
    write_process(tmp_path, 20, cpu=100, threads=2, blocked=1, sched=(0, 0),
                  io={"rchar": 0, "wchar": 0, "read_bytes": 0, "write_bytes": 0})
    write_cgroup(tmp_path, "job.slice", "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
    sampler = HostActivitySampler(str(tmp_path / "proc"), str(tmp_path / "sys"), monotonic=clock)
    first = sampler.sample([20, 999])
    assert set(first.processes) == {20}  # 999 does not exist
    p = first.processes[20]
    assert p.cpu_cores is None and p.read_bytes_per_second is None  # no interval yet
    assert p.blocked_threads == 1 and p.threads == 2  # a state needs no interval
    clock.now += 2.0
    write_node(tmp_path, iowait=250, total=2000, psi_io_usec=1_000_000,
               net={"eth0": (2_000_000, 4_000)}, ib={"mlx5_0": (250_000_000, 0)})
    write_process(tmp_path, 20, cpu=300, threads=2, blocked=0, sched=(4 * 10**8, 12 * 10**8),
                  io={"rchar": 960_000_000, "wchar": 0, "read_bytes": 0, "write_bytes": 10})
    write_cgroup(tmp_path, "job.slice", "nr_periods 20\nnr_throttled 5\nthrottled_usec 500000\n")
    second = sampler.sample([20])
    p = second.processes[20]
    ticks = procfs.clock_ticks()
    assert ticks is not None
    assert p.cpu_cores == pytest.approx(200 / ticks / 2.0)
    assert p.read_bytes_per_second == pytest.approx(480e6)
    assert p.disk_write_bytes_per_second == pytest.approx(5.0)
    assert p.throttled_fraction == pytest.approx(0.25)  # 5 of 20 periods
    assert p.runnable_fraction == pytest.approx(0.8)  # 0.4 s on a CPU + 1.2 s waiting, of 2 s
    assert second.window_seconds == pytest.approx(2.0)
    node = second.node
    assert node.cpu_iowait_percent == pytest.approx(25.0)
    assert node.pressure_percent["io"] == pytest.approx(50.0)
    assert node.network_rx_bytes_per_second == pytest.approx(1e6)
    assert node.infiniband_rx_bytes_per_second == pytest.approx(500e6)  # 250 M words x 4 / 2 s


def test_reused_pid_backwards_counters_and_short_windows_are_unknown(tmp_path: Path) -> None:
    clock = _Clock()
    write_node(tmp_path)
    write_process(tmp_path, 30, cpu=500, start=1000, io={"rchar": 100})
    sampler = HostActivitySampler(str(tmp_path / "proc"), str(tmp_path / "sys"), monotonic=clock)
    sampler.sample([30])
    clock.now += 1.0
    write_process(tmp_path, 30, cpu=10, start=5000, io={"rchar": 5})  # another process, same pid
    p = sampler.sample([30]).processes[30]
    assert p.cpu_cores is None and p.read_bytes_per_second is None
    clock.now += 1.0
    write_process(tmp_path, 30, cpu=5, start=5000, io={"rchar": 1})  # counters went backwards
    p = sampler.sample([30]).processes[30]
    assert p.cpu_cores is None and p.read_bytes_per_second is None
    clock.now += 0.01  # too short an interval for a rate
    write_process(tmp_path, 30, cpu=50, start=5000, io={"rchar": 100})
    p = sampler.sample([30]).processes[30]
    assert p.cpu_cores is None and p.read_bytes_per_second is None


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")
def test_this_machine_a_spinning_reader_agrees_with_its_own_accounts() -> None:
    """On this machine's /proc: the CPU and read rates of a process that spins reading agree
    with what the process counts itself (os.times, bytes returned by read)."""
    sampler = HostActivitySampler()
    me = os.getpid()
    sampler.sample([me])
    cpu0, wall0 = os.times(), time.monotonic()
    got = 0
    fd = os.open("/proc/self/stat", os.O_RDONLY)
    try:
        while time.monotonic() - wall0 < 0.5:
            got += len(os.pread(fd, 4096, 0))
    finally:
        os.close(fd)
    activity = sampler.sample([me])
    cpu1, wall1 = os.times(), time.monotonic()
    p = activity.processes[me]
    own_cores = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (wall1 - wall0)
    assert p.cpu_cores is not None and p.cpu_cores == pytest.approx(own_cores, abs=0.15)
    assert p.read_bytes_per_second is not None
    assert p.read_bytes_per_second >= 0.8 * got / (wall1 - wall0)
    assert p.threads is not None and p.threads >= 1 and p.blocked_threads is not None
    # the spinning thread was on a CPU or waiting for one nearly all the time, however
    # loaded the machine (schedstat)
    assert p.runnable_fraction is not None and p.runnable_fraction > 0.8


def test_where_proc_does_not_serve_psutil_reads_the_same_figures() -> None:
    """The portable path (psutil: macOS, the BSDs), run here against the same process: CPU and
    threads agree with the process's own accounts; Linux-only signals are unknown, said."""
    sampler = HostActivitySampler(portable=True)
    me = os.getpid()
    sampler.sample([me, 2**22 + 12345])
    cpu0, wall0 = os.times(), time.monotonic()
    while time.monotonic() - wall0 < 0.4:
        pass
    activity = sampler.sample([me, 2**22 + 12345])
    cpu1, wall1 = os.times(), time.monotonic()
    assert set(activity.processes) == {me}  # the other one does not exist
    p = activity.processes[me]
    own = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (wall1 - wall0)
    assert p.cpu_cores is not None and p.cpu_cores == pytest.approx(own, abs=0.15)
    assert p.threads is not None and p.threads >= 1 and p.blocked_threads == 0
    assert p.read_bytes_per_second is not None and p.runnable_fraction is None
    assert activity.node.network_rx_bytes_per_second is not None
    assert any("pressure" in problem for problem in activity.node.problems)

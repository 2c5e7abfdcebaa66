"""I/O wait by delay accounting, and the units and resets of the host counters, on fake /proc
and /sys trees read by the real sampler and classified by the real rule.

A process blocked on block I/O 40 % of each interval is in I/O wait (``input``), not idle;
a delay too small to matter (under ``input_delay_fraction``) is not. Delay accounting
switched off between two readings, an unknown clock tick rate and a process that ends while
it is read are unknown, never 0 or half a reading; a cgroup's throttling is the share of its
CPU-limit periods, not its throttled time, which the kernel adds up per CPU.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from allsmi.config import ConfigError, parse_config
from allsmi.hostactivity import procfs
from allsmi.hostactivity.sampler import (TICKS_UNKNOWN, HostActivity, HostActivitySampler,
                                         NodeActivity, ProcessActivity)
from allsmi.hostactivity.settings import ActivitySettings, activity_settings
from allsmi.schema import DeviceSample, ProcessSample
from allsmi.collection.waiting import classify_holder

from .fakeproc import write_cgroup, write_node, write_process

S = ActivitySettings()
PID = 40
IO = {"rchar": 0, "wchar": 0, "read_bytes": 0, "write_bytes": 0}


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _device() -> DeviceSample:
    """An idle-looking device (2 % SM active) held by pid 40, links quiet."""
    return DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                        utilization_percent=100.0, compute_active_percent=2.0,
                        compute_active_source="sm_active", interconnect_rx_bytes_per_second=0.0,
                        interconnect_tx_bytes_per_second=0.0,
                        processes=(ProcessSample(PID, "ann"),))


def _delayacct(root: Path, on: bool) -> None:
    kernel = root / "proc" / "sys" / "kernel"
    kernel.mkdir(parents=True, exist_ok=True)
    (kernel / "task_delayacct").write_text("1\n" if on else "0\n")


class _Host:
    """A fake node with one quiet holder process (pid 40, one thread, never in ``D`` when
    read), read by a real sampler, one two-second interval per :meth:`step`."""

    def __init__(self, root: Path, delayacct: bool = True) -> None:
        self.root, self.clock = root, _Clock()
        write_node(root, net={"eth0": (0, 0)})
        _delayacct(root, delayacct)
        self.write(blkio=0, periods=(0, 0, 0))
        self.sampler = HostActivitySampler(str(root / "proc"), str(root / "sys"),
                                           monotonic=self.clock)
        self.sampler.sample([PID])

    def write(self, blkio: int, periods: tuple[int, int, int], cpu: int = 0) -> None:
        write_process(self.root, PID, cpu=cpu, blkio=blkio, io=IO, sched=(0, 0))
        write_cgroup(self.root, "job.slice", "usage_usec 0\nnr_periods {}\nnr_throttled {}\n"
                     "throttled_usec {}\n".format(*periods))

    def step(self, blkio: int = 0, periods: tuple[int, int, int] = (0, 0, 0),
             cpu: int = 0) -> HostActivity:
        self.clock.now += 2.0
        self.write(blkio, periods, cpu)
        return self.sampler.sample([PID])


def _ticks() -> int:
    ticks = procfs.clock_ticks()
    assert ticks is not None
    return ticks


def test_a_process_blocked_40_percent_of_each_interval_is_waiting_on_input(tmp_path: Path) -> None:
    """Its main thread in block-I/O wait 0.8 s of each 2 s, never caught in ``D`` when read,
    reading nothing through read() (a memory-mapped dataset): ``input``. The rule first
    shipped counted it in I/O wait only from half the interval on (it reused the share of
    processes, ``input_blocked_fraction``), and called it ``nothing``."""
    host = _Host(tmp_path)
    activity = host.step(blkio=int(0.8 * _ticks()))
    p = activity.processes[PID]
    assert p.blocked_threads == 0 and p.blocked_fraction == pytest.approx(0.4)
    reason, why = classify_holder(_device(), _device().processes or (), activity, S)
    assert reason == "input", why
    assert why.startswith("input: 1 of 1 process in I/O wait (block-I/O wait up to 40 % of "
                          "the interval), 0 kB/s read"), why


@pytest.mark.parametrize("share, expected", [(0.0, "nothing"), (0.05, "nothing"),
                                             (0.1, "input"), (0.4, "input"), (0.5, "input")])
def test_delay_at_the_threshold_is_input_and_below_it_too_little_to_matter(
        share: float, expected: str) -> None:
    p = ProcessActivity(pid=PID, cpu_cores=0.01, threads=1, blocked_threads=0,
                        blocked_fraction=share, read_bytes_per_second=0.0, throttled_fraction=0.0)
    host = HostActivity({PID: p}, NodeActivity(network_rx_bytes_per_second=0.0,
                                               network_tx_bytes_per_second=0.0), 2.0)
    assert classify_holder(_device(), _device().processes or (), host, S)[0] == expected
    # the threshold is its own key, not the share of processes
    strict = ActivitySettings(input_delay_fraction=0.6)
    assert classify_holder(_device(), _device().processes or (), host, strict)[0] == "nothing"


def test_input_delay_fraction_is_a_setting_with_a_range() -> None:
    assert activity_settings(parse_config("")).input_delay_fraction == 0.1
    s = activity_settings(parse_config("[activity]\ninput_delay_fraction = 0.25\n"))
    assert s.input_delay_fraction == 0.25
    for bad in ("0", "1.5", "true"):
        with pytest.raises(ConfigError) as info:
            activity_settings(parse_config(f"[activity]\ninput_delay_fraction = {bad}\n"))
        assert info.value.key == "activity.input_delay_fraction"


def test_delay_known_but_threads_unread_is_not_idle() -> None:
    """Delay accounting in ``/proc/PID/stat`` is the main thread's alone: a process whose
    threads' states were not read is never called idle on it (it was, before)."""
    p = ProcessActivity(pid=PID, cpu_cores=0.01, threads=8, blocked_threads=None,
                        blocked_fraction=0.0, read_bytes_per_second=0.0, throttled_fraction=0.0)
    host = HostActivity({PID: p}, NodeActivity(network_rx_bytes_per_second=0.0,
                                               network_tx_bytes_per_second=0.0), 2.0)
    reason, why = classify_holder(_device(), _device().processes or (), host, S)
    assert reason == "unknown" and "threads' states were not read" in why, why


def test_delay_accounting_switched_off_meanwhile_is_unknown_not_zero(tmp_path: Path) -> None:
    """``sysctl kernel.task_delayacct=0`` stops the counters: an interval over which they did
    not move is not one without I/O wait. The sampler read the switch once, when made, and
    reported 0 % from then on; it is read each cycle."""
    host = _Host(tmp_path, delayacct=True)
    assert host.step(blkio=10).processes[PID].blocked_fraction is not None
    _delayacct(tmp_path, False)
    assert host.step(blkio=10).processes[PID].blocked_fraction is None
    _delayacct(tmp_path, True)  # back on: from its second reading on
    assert host.step(blkio=10).processes[PID].blocked_fraction is None
    assert host.step(blkio=10 + int(0.6 * _ticks())).processes[PID].blocked_fraction \
        == pytest.approx(0.3)


def test_throttling_is_the_share_of_limit_periods_not_the_per_cpu_sum(tmp_path: Path) -> None:
    """A cgroup throttled in 1 of its 20 periods (100 ms each) of a 2 s interval, on 8 CPUs at
    once for 40 ms: ``throttled_usec`` grows by 320 ms (the kernel adds each CPU's), which read
    as 16 % of the interval throttled and made the holder ``host``. At most one period of the
    20 was throttled: 5 %, under ``host_throttled_fraction``."""
    host = _Host(tmp_path)
    activity = host.step(periods=(20, 1, 320_000))
    assert activity.processes[PID].throttled_fraction == pytest.approx(0.05)
    reason, why = classify_holder(_device(), _device().processes or (), activity, S)
    assert reason == "nothing", why
    # 4 of the next 20 periods throttled: host-bound by its limit
    activity = host.step(periods=(40, 5, 1_000_000))
    assert activity.processes[PID].throttled_fraction == pytest.approx(0.2)
    assert classify_holder(_device(), _device().processes or (), activity, S)[0] == "host"
    # no period ran (no limit, or the cgroup idle): nothing was throttled, a known 0
    assert host.step(periods=(40, 5, 1_000_000)).processes[PID].throttled_fraction == 0.0
    # counters that went backwards (the cgroup made again): unknown
    assert host.step(periods=(3, 0, 0)).processes[PID].throttled_fraction is None


def test_the_clock_tick_rate_is_read_never_assumed(tmp_path: Path, monkeypatch) -> None:
    """CPU and I/O wait times in ``stat`` are in ``USER_HZ`` ticks: at 250 ticks a second, 500
    ticks in 2 s are one core. Where the rate cannot be read, the times are unknown, said,
    where 100 a second was assumed before."""
    real = os.sysconf

    def sysconf(name: object) -> int:
        return 250 if name == "SC_CLK_TCK" else real(name)  # type: ignore[arg-type]
    monkeypatch.setattr(os, "sysconf", sysconf)
    host = _Host(tmp_path / "a")
    p = host.step(cpu=500, blkio=100).processes[PID]
    assert p.cpu_cores == pytest.approx(1.0) and p.blocked_fraction == pytest.approx(0.2)

    def broken(name: object) -> int:
        if name == "SC_CLK_TCK":
            raise ValueError("unrecognized configuration name")
        return real(name)  # type: ignore[arg-type]
    monkeypatch.setattr(os, "sysconf", broken)
    host = _Host(tmp_path / "b")
    activity = host.step(cpu=500, blkio=100)
    p = activity.processes[PID]
    assert p.cpu_cores is None and p.blocked_fraction is None
    assert TICKS_UNKNOWN in p.problems
    reason, why = classify_holder(_device(), _device().processes or (), activity, S)
    assert reason == "unknown" and "SC_CLK_TCK" in why, why


def test_a_process_that_ends_while_it_is_read_is_gone_not_half_read(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """It ends after its ``stat`` and ``io`` were read, before its ``schedstat``: no reading
    (as one already gone), never its first files' figures with the rest unknown."""
    write_process(tmp_path, PID, io=IO, sched=(0, 0))
    real = procfs.read_proc_file

    def ending(path: str) -> bytes:
        if path.endswith("schedstat"):
            shutil.rmtree(tmp_path / "proc" / str(PID))
        return real(path)
    monkeypatch.setattr(procfs, "read_proc_file", ending)
    assert procfs.read_process(PID, str(tmp_path / "proc"), str(tmp_path / "sys/fs/cgroup"),
                               tgid=PID) is None


def test_the_share_in_io_wait_is_of_all_the_holders_processes() -> None:
    """One of four processes read, in I/O wait, the other three not read (hidden from the
    exporter): whether most of them wait is unknown, where it was ``input`` ("1 of 1
    process"); two of four waiting, two not read, is half of them whatever the others did."""
    procs = tuple(ProcessSample(pid, "ann") for pid in (1, 2, 3, 4))
    dev = DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                       utilization_percent=100.0, compute_active_percent=2.0,
                       compute_active_source="sm_active", interconnect_rx_bytes_per_second=0.0,
                       interconnect_tx_bytes_per_second=0.0, processes=procs)
    node = NodeActivity(network_rx_bytes_per_second=0.0, network_tx_bytes_per_second=0.0)

    def waiting(pid: int) -> ProcessActivity:
        return ProcessActivity(pid=pid, cpu_cores=0.01, threads=1, blocked_threads=1,
                               read_bytes_per_second=0.0, throttled_fraction=0.0)
    reason, why = classify_holder(dev, procs, HostActivity({1: waiting(1)}, node, 2.0), S)
    assert reason == "unknown" and "3 processes of the holder's 4 could not be read" in why, why
    reason, why = classify_holder(dev, procs, HostActivity({1: waiting(1), 2: waiting(2)}, node,
                                                           2.0), S)
    assert reason == "input" and why.startswith("input: 2 of 4 processes in I/O wait (2 not "
                                                 "read), 0 kB/s read"), why

"""The waiting classification: each reason, its evidence, and each bad input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from allsmi.config import ConfigError, parse_config
from allsmi.hostactivity.sampler import HostActivity, NodeActivity, ProcessActivity
from allsmi.hostactivity.settings import ActivitySettings, activity_settings
from allsmi.schema import DeviceSample, ProcessSample, Workload
from allsmi.collection.waiting import WaitingClassifier, classify, classify_holder

from ..conftest import allsmi_exe

S = ActivitySettings()
QUIET_NODE = NodeActivity(network_rx_bytes_per_second=1e3, network_tx_bytes_per_second=1e3)


def dev(util: float | None = 3.0, active: float | None = 2.0, link: float | None = None,
        procs: tuple[ProcessSample, ...] | None = (ProcessSample(1, "ann"),),
        workloads: tuple[Workload, ...] | None = None) -> DeviceSample:
    return DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                        utilization_percent=util, compute_active_percent=active,
                        compute_active_source="sm_active" if active is not None else None,
                        interconnect_rx_bytes_per_second=link,
                        interconnect_tx_bytes_per_second=link, processes=procs,
                        workloads=workloads)


def proc(pid: int = 1, cpu: float | None = 0.01, read: float | None = 0.0, blocked: int = 0,
         throttled: float | None = 0.0, problems: tuple[str, ...] = ()) -> ProcessActivity:
    return ProcessActivity(pid=pid, cpu_cores=cpu, threads=4, blocked_threads=blocked,
                           read_bytes_per_second=read, throttled_fraction=throttled,
                           problems=problems)


def host(*procs: ProcessActivity, node: NodeActivity = QUIET_NODE) -> HostActivity:
    return HostActivity({p.pid: p for p in procs}, node, 2.0)


def reason(d: DeviceSample, h: HostActivity) -> tuple[str, str]:
    return classify_holder(d, tuple(d.processes or ()), h, S)


def test_computing_names_the_figure_it_used() -> None:
    r, why = reason(dev(util=100.0, active=20.0), host(proc()))
    assert r == "computing" and "20 %" in why and "sm_active" in why
    r, why = reason(dev(util=64.0, active=None), host(proc()))
    assert r == "computing" and "utilization" in why and "not reported" in why


def test_busy_looking_but_idle_device_is_not_computing() -> None:
    # 100 % headline utilization, 2 % SM active: the holder waits (here on its input)
    r, why = reason(dev(util=100.0, active=2.0), host(proc(read=480e6, blocked=1)))
    assert r == "input"
    assert why.startswith("input: 1 of 1 process in I/O wait, 480 MB/s read")


def test_input_from_io_wait_alone_and_from_reading_alone() -> None:
    procs = tuple(ProcessSample(i, "ann") for i in (1, 2, 3, 4))
    h = host(*(proc(i, blocked=1 if i < 4 else 0) for i in (1, 2, 3, 4)))
    r, why = classify_holder(dev(procs=procs), procs, h, S)
    assert r == "input" and "3 of 4 processes in I/O wait" in why
    h = host(*(proc(i, blocked=1 if i == 1 else 0) for i in (1, 2, 3, 4)))  # 1 of 4: not mostly
    r, why = classify_holder(dev(procs=procs), procs, h, S)  # nor idle: one is in I/O wait
    assert r == "unknown" and "1 of 4 processes in I/O wait (under 50 % of them)" in why, why
    assert reason(dev(), host(proc(read=2e6)))[0] == "input"


def test_communication_from_device_links_or_infiniband_before_host() -> None:
    spinning = proc(cpu=1.0)  # NCCL's proxy thread spins while the collective waits
    r, why = reason(dev(link=20e9), host(spinning))
    assert r == "communication" and "device links 40 GB/s" in why
    ib = NodeActivity(infiniband_rx_bytes_per_second=3e9, infiniband_tx_bytes_per_second=1e9)
    r, why = reason(dev(), host(spinning, node=ib))
    assert r == "communication" and "InfiniBand" in why


def test_host_from_a_full_core_or_throttling() -> None:
    r, why = reason(dev(), host(proc(cpu=0.98)))
    assert r == "host" and "98 % of a core" in why
    r, why = reason(dev(), host(proc(cpu=0.3, throttled=0.4)))
    assert r == "host" and "throttled 40 %" in why
    # an oversubscribed node gives the spinning thread a fifth of a core: it still wants one
    starved = ProcessActivity(pid=1, cpu_cores=0.2, runnable_fraction=0.97, threads=1,
                              blocked_threads=0, read_bytes_per_second=0.0)
    r, why = reason(dev(), host(starved))
    assert r == "host" and "wanting a CPU 97 % of the time" in why


def test_nothing_without_a_process_or_with_every_signal_quiet() -> None:
    held = dev(procs=(), workloads=(Workload("kubernetes", "ns", "pod-a"),))
    found = classify(held, host(), S)
    assert found is not None and [(w.reason, w.pod) for w in found] == [("nothing", "pod-a")]
    r, why = reason(dev(link=0.0), host(proc()))
    assert r == "nothing" and "idle" in why


def test_pods_whose_processes_cannot_be_told_apart_are_unknown_not_nothing() -> None:
    pods = (Workload("kubernetes", "ns", "a"), Workload("kubernetes", "ns", "b"))
    shared = dev(procs=(ProcessSample(1, "ann"), ProcessSample(2, "bob")), workloads=pods)
    found = classify(shared, host(proc(1), proc(2)), S)
    assert found is not None and {w.pod: w.reason for w in found} == {"a": "unknown",
                                                                       "b": "unknown"}
    assert "2 processes on the device cannot be told apart" in found[0].evidence


def test_unknown_is_said_never_guessed() -> None:
    # the device's processes are not listed
    held = dev(procs=None, workloads=(Workload("hpc-job", job_id="7", user="ann"),))
    assert classify(held, host(), S)[0].reason == "unknown"  # type: ignore[index]
    # no activity figure at all
    assert reason(dev(util=None, active=None), host(proc()))[0] == "unknown"
    # the process could not be read
    r, why = reason(dev(), host())
    assert r == "unknown" and "could not be read" in why
    # first interval: no rates yet
    r, why = reason(dev(), host(proc(cpu=None, read=None)))
    assert r == "unknown" and "no measurement interval yet" in why
    # another user's /proc/PID/io unreadable: reading cannot be ruled out
    denied = proc(read=None, problems=("/proc/1/io unreadable (another user's process: needs "
                                        "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH)",))
    r, why = reason(dev(), host(denied))
    assert r == "unknown" and "needs CAP_SYS_PTRACE" in why
    # half a core: neither idle nor CPU-bound
    assert reason(dev(), host(proc(cpu=0.5)))[0] == "unknown"
    # no device links and no node network figures: communication cannot be ruled out
    r, why = reason(dev(), host(proc(), node=NodeActivity()))
    assert r == "unknown" and "network" in why
    # the node's network busy while the device's links are not reported
    busy_net = NodeActivity(network_rx_bytes_per_second=5e8, network_tx_bytes_per_second=0.0)
    assert reason(dev(), host(proc(), node=busy_net))[0] == "unknown"


def test_a_new_process_beside_one_with_a_problem_is_unknown_naming_the_problem() -> None:
    procs = (ProcessSample(1, "ann"), ProcessSample(2, "ann"))
    denied = ProcessActivity(pid=2, problems=("/proc/2/io unreadable (needs CAP_SYS_PTRACE)",))
    for first, second in ((proc(1, cpu=None, read=None), denied), (denied, proc(1, cpu=None))):
        r, why = classify_holder(dev(procs=procs), procs, host(first, second), S)
        assert r == "unknown" and "/proc/2/io unreadable" in why, why
    r, why = classify_holder(dev(procs=procs), procs, host(proc(1, cpu=None), proc(2, cpu=None)), S)
    assert r == "unknown" and "no measurement interval yet" in why


def test_idle_is_never_said_of_a_process_whose_threads_were_not_read() -> None:
    unread = ProcessActivity(pid=1, cpu_cores=0.01, threads=4, read_bytes_per_second=0.0,
                             throttled_fraction=0.0, problems=("/proc/1/task unreadable",))
    r, why = reason(dev(), host(unread))
    assert r == "unknown" and "/proc/1/task unreadable" in why
    r, why = reason(dev(), host(ProcessActivity(pid=1, cpu_cores=0.01, read_bytes_per_second=0.0)))
    assert r == "unknown" and "threads' states were not read" in why


def test_without_device_links_a_busy_node_network_is_not_quiet_even_beside_quiet_infiniband(
        ) -> None:
    quiet_ib_busy_net = NodeActivity(infiniband_rx_bytes_per_second=0.0,
                                     infiniband_tx_bytes_per_second=0.0,
                                     network_rx_bytes_per_second=3e9, network_tx_bytes_per_second=0.0)
    r, why = reason(dev(), host(proc(), node=quiet_ib_busy_net))
    assert r == "unknown" and "node network at 3000 MB/s" in why
    quiet_ib_no_net = NodeActivity(infiniband_rx_bytes_per_second=0.0,
                                   infiniband_tx_bytes_per_second=0.0)
    assert reason(dev(), host(proc(), node=quiet_ib_no_net))[0] == "unknown"
    quiet_ib_quiet_net = NodeActivity(infiniband_rx_bytes_per_second=0.0,
                                      infiniband_tx_bytes_per_second=0.0,
                                      network_rx_bytes_per_second=1e3, network_tx_bytes_per_second=1e3)
    assert reason(dev(), host(proc(), node=quiet_ib_quiet_net))[0] == "nothing"
    # a device with links of its own: its links decide, whatever the node's network does
    assert reason(dev(link=0.0), host(proc(), node=quiet_ib_busy_net))[0] == "nothing"


def test_threads_are_read_for_holders_at_zero_on_a_busy_device_too() -> None:
    asked: list[object] = []

    class Recording:
        def sample(self, pids: object, detailed: object = None) -> HostActivity:
            asked.append(set(detailed or ()))
            return host(proc(1, blocked=1), proc(2))

    procs = (ProcessSample(1, "ann", utilization_percent=0.0),
             ProcessSample(2, "bob", utilization_percent=80.0))
    (out,) = WaitingClassifier(S, source=Recording()).apply(
        [dev(util=80.0, active=60.0, procs=procs, link=0.0)])
    assert asked == [{1}]
    assert {w.user: w.reason for w in out.waiting or ()} == {"ann": "input", "bob": "computing"}


def test_a_classification_that_fails_costs_its_holders_their_reason_not_the_cycle(
        monkeypatch) -> None:
    import allsmi.collection.waiting as waiting

    def broken(*args: object, **kwargs: object) -> object:
        raise IndexError("bug")
    monkeypatch.setattr(waiting, "classify", broken)
    step = WaitingClassifier(S, source=_Quiet())
    first, second = dev(), dev(procs=())
    out = step.apply([first, second])
    assert [w.reason for w in out[0].waiting or ()] == ["unknown"]
    assert "classification failed (IndexError: bug)" in out[0].waiting[0].evidence  # type: ignore[index]
    assert out[1].waiting is None


class _Quiet:
    def sample(self, pids: object, detailed: object = None) -> HostActivity:
        return host(proc())


def test_a_holder_whose_processes_report_zero_on_a_busy_shared_device_is_not_computing() -> None:
    procs = (ProcessSample(1, "ann", utilization_percent=80.0),
             ProcessSample(2, "bob", utilization_percent=0.0))
    found = classify(dev(util=80.0, active=60.0, procs=procs, link=0.0), host(proc(1), proc(2)), S)
    assert found is not None
    assert {w.user: w.reason for w in found} == {"ann": "computing", "bob": "nothing"}


def test_nobody_holds_it_and_disabled() -> None:
    assert classify(dev(procs=()), host(), S) is None
    off = WaitingClassifier(ActivitySettings(enabled=False), source=_Exploding())
    d = dev()
    assert off.apply([d]) == (d,)


class _Exploding:
    def sample(self, pids: object, detailed: object = None) -> HostActivity:
        raise RuntimeError("reader bug")


def test_a_failing_reader_costs_the_evidence_not_the_cycle() -> None:
    step = WaitingClassifier(S, source=_Exploding())
    (out,) = step.apply([dev(util=1.0, active=1.0)])
    assert out.waiting is not None and out.waiting[0].reason == "unknown"
    assert any("reader bug" in p for p in step.problems)
    (out,) = step.apply([dev(util=90.0, active=70.0)])  # what needs no host evidence still works
    assert out.waiting is not None and out.waiting[0].reason == "computing"
    # devices whose holders are unknown this cycle are not classified
    (out,) = step.apply([dev()], holders_unknown={"GPU-1"})
    assert out.waiting is None


@pytest.mark.parametrize("text, key", [
    ("[activity]\ninput_read_bytes_per_second = 0\n", "activity.input_read_bytes_per_second"),
    ("[activity]\ninput_blocked_fraction = 1.5\n", "activity.input_blocked_fraction"),
    ("[activity]\ncommunication_bytes_per_second = nan\n", "activity.communication_bytes_per_second"),
    ("[activity]\nhost_cpu_fraction = true\n", "activity.host_cpu_fraction"),
    ("[activity]\nquiet_cpu_fraction = 0.95\n", "activity.quiet_cpu_fraction"),
    ("[activity]\nenabled = 'yes'\n", "activity.enabled"),
    ("[activity]\nthreshold = 3\n", "activity.threshold"),
    ("[accounting]\nidle_threshold_percent = 120\n", "accounting.idle_threshold_percent"),
])
def test_bad_settings_name_the_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        activity_settings(parse_config(text, Path("c.toml")))
    assert info.value.key == key and info.value.line is not None


def test_settings_defaults_and_the_idle_threshold_is_the_accountings() -> None:
    s = activity_settings(parse_config("[accounting]\nidle_threshold_percent = 12\n"
                                       "[activity]\nhost_cpu_fraction = 0.8\n"))
    assert s.idle_threshold_percent == 12.0 and s.host_cpu_fraction == 0.8
    assert s.input_read_bytes_per_second == ActivitySettings.input_read_bytes_per_second


def test_a_bad_activity_table_exits_2_naming_file_line_and_key(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[node]\nresource_group = 'x'\n[activity]\nhost_cpu_fraction = 2\n")
    out = subprocess.run(allsmi_exe() + ["snapshot", "--simulate", "mixed", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert str(config) in out.stderr and "line 4" in out.stderr
    assert "activity.host_cpu_fraction" in out.stderr

"""``nothing`` only when every signal was measured quiet: an InfiniBand port whose counter is
stuck at its maximum, a node whose ports were none read twice, one direction of traffic
unknown. And several holders on one device, one holder on several devices, each right."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from allsmi.hostactivity.sampler import (HostActivity, HostActivitySampler, NodeActivity,
                                         ProcessActivity)
from allsmi.hostactivity.settings import ActivitySettings
from allsmi.schema import DeviceSample, ProcessSample
from allsmi.collection.waiting import WaitingClassifier, classify, classify_holder

from .fakeproc import write_node

S = ActivitySettings()
WORDS_MAX = 2**32 - 1  # a 32-bit port_rcv_data/port_xmit_data at its maximum (4-byte words)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _dev(dev_id: str = "GPU-1", active: float = 1.0, link: float | None = None,
         procs: tuple[ProcessSample, ...] = (ProcessSample(1, "ann"),)) -> DeviceSample:
    return DeviceSample(id=dev_id, vendor="nvidia", kind="gpu", backend="nvidia",
                        utilization_percent=100.0, compute_active_percent=active,
                        compute_active_source="sm_active", interconnect_rx_bytes_per_second=link,
                        interconnect_tx_bytes_per_second=link, processes=procs)


def _idle(pid: int = 1, **kw: object) -> ProcessActivity:
    fields: dict[str, object] = dict(pid=pid, cpu_cores=0.0, threads=1, blocked_threads=0,
                                     read_bytes_per_second=0.0)
    fields.update(kw)
    return ProcessActivity(**fields)  # type: ignore[arg-type]


def _node_over(tmp: Path, *ib: tuple[int, int]) -> NodeActivity:
    """The node activity between readings of one port ``mlx4_0`` with these counters (words),
    two seconds apart, its network quiet."""
    clock = _Clock()
    sampler = HostActivitySampler(str(tmp / "proc"), str(tmp / "sys"), monotonic=clock)
    node = NodeActivity()
    for rx_tx in ib:
        write_node(tmp, net={"eth0": (0, 0)}, ib={"mlx4_0": rx_tx})
        node = sampler.sample([]).node
        clock.now += 2.0
    return node


def test_a_saturated_infiniband_counter_is_unknown_not_quiet(tmp_path: Path) -> None:
    """A 32-bit PortCounters port_rcv_data stops at its maximum (the IBA counters saturate,
    they do not wrap): it read 0 B/s however busy the port, and an idle-looking holder beside
    it was ``nothing``."""
    node = _node_over(tmp_path, (WORDS_MAX, WORDS_MAX), (WORDS_MAX, WORDS_MAX))
    r, why = classify_holder(_dev(), (ProcessSample(1, "ann"),),
                             HostActivity({1: _idle()}, node, 2.0), S)
    assert r == "unknown" and "InfiniBand/RoCE traffic not measured" in why, why
    assert (node.infiniband_rx_bytes_per_second, node.infiniband_tx_bytes_per_second) \
        == (None, None)
    assert node.infiniband_ports == 1
    # reaching its maximum in the interval: its change is a part of the traffic, not all of it
    node = _node_over(tmp_path / "b", (WORDS_MAX - 100, 0), (WORDS_MAX, 50))
    assert (node.infiniband_rx_bytes_per_second, node.infiniband_tx_bytes_per_second) \
        == (None, 100.0)


def test_a_node_whose_ports_were_none_read_twice_is_not_quiet(tmp_path: Path) -> None:
    """The node's only port reset (or was replaced) in the interval: its rate is unknown, so a
    holder of a device without links of its own is not known to be idle."""
    node = _node_over(tmp_path, (10**9, 10**9), (5, 5))
    r, why = classify_holder(_dev(), (ProcessSample(1, "ann"),),
                             HostActivity({1: _idle()}, node, 2.0), S)
    assert r == "unknown" and "InfiniBand" in why, why
    assert node.infiniband_rx_bytes_per_second is None and node.infiniband_ports == 1
    # a device with links of its own, quiet: the node's InfiniBand, which alone makes a
    # holder communication (inter-node traffic does not cross the device's links), is unknown
    r, _ = classify_holder(_dev(link=0.0), (ProcessSample(1, "ann"),),
                           HostActivity({1: _idle()}, node, 2.0), S)
    assert r == "unknown"
    # a node without InfiniBand: its network decides
    quiet = NodeActivity(network_rx_bytes_per_second=0.0, network_tx_bytes_per_second=0.0)
    assert classify_holder(_dev(), (ProcessSample(1, "ann"),),
                           HostActivity({1: _idle()}, quiet, 2.0), S)[0] == "nothing"


def test_one_direction_unknown_is_enough_for_busy_never_for_quiet() -> None:
    procs = (ProcessSample(1, "ann"),)
    # the node network's sent bytes unknown (every interface's counter went backwards)
    half = NodeActivity(network_rx_bytes_per_second=0.0, network_tx_bytes_per_second=None)
    r, why = classify_holder(_dev(), procs, HostActivity({1: _idle()}, half, 2.0), S)
    assert r == "unknown" and "network not reported" in why, why
    # InfiniBand: 3 GB/s sent is communication whatever the received bytes were
    sending = NodeActivity(infiniband_rx_bytes_per_second=None, infiniband_tx_bytes_per_second=3e9,
                           infiniband_ports=1, network_rx_bytes_per_second=0.0,
                           network_tx_bytes_per_second=0.0)
    r, why = classify_holder(_dev(), procs, HostActivity({1: _idle(cpu_cores=1.0)}, sending,
                                                         2.0), S)
    assert r == "communication" and "InfiniBand/RoCE 3000 MB/s" in why, why
    # ...and 0 B/s sent with the received bytes unknown is not quiet
    silent = NodeActivity(infiniband_rx_bytes_per_second=None, infiniband_tx_bytes_per_second=0.0,
                          infiniband_ports=1, network_rx_bytes_per_second=0.0,
                          network_tx_bytes_per_second=0.0)
    r, why = classify_holder(_dev(), procs, HostActivity({1: _idle()}, silent, 2.0), S)
    assert r == "unknown" and "InfiniBand" in why, why


class _Fixed:
    """A host source answering the same evidence, recording which threads were asked for."""

    def __init__(self, host: HostActivity) -> None:
        self.host, self.detailed = host, []  # type: ignore[var-annotated]

    def sample(self, pids: object, detailed: object = None) -> HostActivity:
        self.detailed.append(set(detailed or ()))  # type: ignore[call-overload]
        return self.host


def test_several_holders_on_one_device_each_by_their_own_processes() -> None:
    procs = (ProcessSample(1, "ann"), ProcessSample(2, "bob"), ProcessSample(3, "bob"),
             ProcessSample(4, "cat"))
    node = NodeActivity(network_rx_bytes_per_second=0.0, network_tx_bytes_per_second=0.0)
    host = HostActivity({1: _idle(1, read_bytes_per_second=5e6), 2: _idle(2, cpu_cores=1.0),
                         3: _idle(3), 4: _idle(4)}, node, 2.0)
    found = classify(_dev(link=0.0, procs=procs), host, S)
    assert found is not None
    assert {w.user: w.reason for w in found} == {"ann": "input", "bob": "host", "cat": "nothing"}
    bob = next(w for w in found if w.user == "bob")
    assert "1 of 2 processes CPU-bound" in bob.evidence


def test_one_holder_on_several_devices_each_right() -> None:
    """Pid 1 computes on GPU-A and holds GPU-B idle while it waits on its input: A is
    computing, B input; its threads are read (B is below the threshold), once."""
    node = NodeActivity(network_rx_bytes_per_second=0.0, network_tx_bytes_per_second=0.0)
    source = _Fixed(HostActivity({1: _idle(blocked_threads=1)}, node, 2.0))
    a = _dev("GPU-A", active=70.0, procs=(ProcessSample(1, "ann", utilization_percent=60.0),))
    b = _dev("GPU-B", active=0.0, link=0.0,
             procs=(ProcessSample(1, "ann", utilization_percent=0.0),))
    out = WaitingClassifier(S, source=source).apply([a, b])
    assert source.detailed == [{1}]
    assert [[w.reason for w in d.waiting or ()] for d in out] == [["computing"], ["input"]]


def test_a_sum_missing_a_counter_is_busy_enough_never_quiet(tmp_path: Path) -> None:
    """Two ports, one stuck at its maximum: the other's quiet says nothing of its traffic (the
    holder was ``nothing``); a NIC whose counters reset beside a quiet one, likewise. A part
    that is already busy is busy: the sum is a lower bound."""
    clock = _Clock()
    sampler = HostActivitySampler(str(tmp_path / "proc"), str(tmp_path / "sys"), monotonic=clock)
    procs = (ProcessSample(1, "ann"),)

    def step(net: dict[str, tuple[int, int]], ib: dict[str, tuple[int, int]]) -> NodeActivity:
        write_node(tmp_path, net=net, ib=ib)
        node = sampler.sample([]).node
        clock.now += 2.0
        return node

    step({"eth0": (0, 0)}, {"mlx4_0": (0, 0), "mlx5_0": (WORDS_MAX, WORDS_MAX)})
    node = step({"eth0": (0, 0)}, {"mlx4_0": (0, 0), "mlx5_0": (WORDS_MAX, WORDS_MAX)})
    assert node.infiniband_rx_bytes_per_second == 0.0 and node.infiniband_unmeasured == 1
    r, why = classify_holder(_dev(), procs, HostActivity({1: _idle()}, node, 2.0), S)
    assert r == "unknown" and "InfiniBand/RoCE traffic partly measured (1 port(s)" in why, why
    # measured whole again: quiet is quiet
    node = step({"eth0": (0, 0)}, {"mlx4_0": (0, 0), "mlx5_0": (0, 0)})
    node = step({"eth0": (0, 0)}, {"mlx4_0": (0, 0), "mlx5_0": (0, 0)})
    assert node.infiniband_unmeasured == 0 and node.network_unmeasured == 0
    assert classify_holder(_dev(), procs, HostActivity({1: _idle()}, node, 2.0), S)[0] == "nothing"
    # eth1's counters went backwards (a driver reset): its traffic in the interval is unknown
    step({"eth0": (0, 0), "eth1": (10**9, 10**9)}, {"mlx4_0": (0, 0), "mlx5_0": (0, 0)})
    node = step({"eth0": (0, 0), "eth1": (5, 5)}, {"mlx4_0": (0, 0), "mlx5_0": (0, 0)})
    assert node.network_rx_bytes_per_second == 0.0 and node.network_unmeasured == 1
    no_ib = NodeActivity(network_rx_bytes_per_second=0.0, network_tx_bytes_per_second=0.0,
                         network_unmeasured=node.network_unmeasured)
    r, why = classify_holder(_dev(), procs, HostActivity({1: _idle()}, no_ib, 2.0), S)
    assert r == "unknown" and "node network partly measured (1 interface(s)" in why, why
    # ...while a measured part already at 3 GB/s is communication
    sending = NodeActivity(infiniband_rx_bytes_per_second=3e9, infiniband_tx_bytes_per_second=0.0,
                           infiniband_ports=2, infiniband_unmeasured=1,
                           network_rx_bytes_per_second=0.0, network_tx_bytes_per_second=0.0)
    r, _ = classify_holder(_dev(), procs, HostActivity({1: _idle()}, sending, 2.0), S)
    assert r == "communication"


def test_device_links_with_one_direction_unknown_are_not_quiet() -> None:
    """The device's NVLink received bytes measured at 0 while its sent bytes are unknown: the
    links' quiet is half measured, so an idle-looking holder is ``unknown``, never ``nothing``
    (it was ``nothing``); a busy half is still enough for ``communication``."""
    procs = (ProcessSample(1, "ann"),)
    host = HostActivity({1: _idle()}, NodeActivity(), 2.0)
    for rx, tx, unknown in ((0.0, None, "sent"), (None, 0.0, "received")):
        dev = replace(_dev(link=0.0), interconnect_rx_bytes_per_second=rx,
                      interconnect_tx_bytes_per_second=tx)
        r, why = classify_holder(dev, procs, host, S)
        assert r == "unknown" and f"device links' {unknown} bytes not reported" in why, why
    busy = replace(_dev(link=0.0), interconnect_rx_bytes_per_second=4e9,
                   interconnect_tx_bytes_per_second=None)
    assert classify_holder(busy, procs, host, S)[0] == "communication"
    assert classify_holder(_dev(link=0.0), procs, host, S)[0] == "nothing"  # both measured


def test_a_gpm_nvlink_metric_that_fails_leaves_the_holder_unknown(monkeypatch) -> None:
    """Through the NVIDIA backend over the fake NVML: GPM's NVLink sent-bytes metric fails on
    its own (its nvmlReturn a Timeout) while the received bytes read 0, on a GPU whose SMs are
    1 % active; the holder, idle on the host, is ``unknown``, not ``nothing``."""
    import os

    from allsmi.backends.nvidia import NvidiaBackend, gpm
    from tests.backends.nvml_fake import FakeGpu, FakeNvml, FakeProcess, busy_looking

    monkeypatch.setattr(gpm, "MIN_INTERVAL_SECONDS", 0.0)
    gpu = busy_looking(FakeGpu.from_profile("h100-sxm5-80gb", 0), 1.0)
    gpu.gpm_metric_errors = {61: 10}  # NVML_ERROR_TIMEOUT, for this metric alone
    gpu.compute = [FakeProcess(os.getpid(), 1 << 30)]
    FakeNvml([gpu]).install(monkeypatch)
    backend = NvidiaBackend(options={"processes": True})
    backend.open()
    try:
        [dev] = backend.sample()
    finally:
        backend.close()
    assert dev.interconnect_rx_bytes_per_second == 0.0
    assert dev.interconnect_tx_bytes_per_second is None
    assert dev.processes and dev.processes[0].pid == os.getpid()
    quiet = NodeActivity(network_rx_bytes_per_second=0.0, network_tx_bytes_per_second=0.0)
    source = _Fixed(HostActivity({os.getpid(): _idle(os.getpid())}, quiet, 2.0))
    [out] = WaitingClassifier(S, source=source).apply([dev])
    assert [w.reason for w in out.waiting or ()] == ["unknown"], out.waiting
    assert "device links' sent bytes not reported" in out.waiting[0].evidence  # type: ignore[index]


def test_quiet_device_links_do_not_make_unmeasured_infiniband_quiet(tmp_path: Path) -> None:
    """A device with NVLink figures of its own (both 0) on a node whose only InfiniBand port's
    counters are stuck at their maximum, or reset in the interval: the node's InfiniBand makes
    a holder ``communication`` whatever its device's links say, so unmeasured it leaves the
    holder ``unknown`` (it was ``nothing``); measured and quiet, ``nothing``."""
    procs = (ProcessSample(1, "ann"),)
    for where, counters, words in (("stuck", ((WORDS_MAX, WORDS_MAX), (WORDS_MAX, WORDS_MAX)),
                                    "not measured"),
                                   ("reset", ((10**9, 10**9), (5, 5)), "not measured"),
                                   ("half", ((WORDS_MAX - 9, 0), (WORDS_MAX, 0)),
                                    "not measured")):
        node = _node_over(tmp_path / where, *counters)
        r, why = classify_holder(_dev(link=0.0), procs, HostActivity({1: _idle()}, node, 2.0), S)
        assert r == "unknown" and f"InfiniBand/RoCE traffic {words}" in why, (where, why)
        assert "device links quiet" in why, why
    node = _node_over(tmp_path / "two", (0, 0), (0, 0))
    half = replace(node, infiniband_unmeasured=1)  # a second port gone in the interval
    r, why = classify_holder(_dev(link=0.0), procs, HostActivity({1: _idle()}, half, 2.0), S)
    assert r == "unknown" and "InfiniBand/RoCE traffic partly measured (1 port(s)" in why, why
    assert classify_holder(_dev(link=0.0), procs,
                           HostActivity({1: _idle()}, node, 2.0), S)[0] == "nothing"

"""InfiniBand/RoCE ports whose adapters keep no ``counters/port_*_data`` (AWS EFA, Broadcom
``bnxt_re``: only ``hw_counters``, in bytes), and ports whose bytes cannot be read at all: the
first are measured, the second make a quiet holder ``unknown``, never ``nothing``."""

from __future__ import annotations

import os
from pathlib import Path

from allsmi.hostactivity import probe
from allsmi.hostactivity.node import read_infiniband
from allsmi.hostactivity.sampler import HostActivity, HostActivitySampler, ProcessActivity
from allsmi.hostactivity.settings import ActivitySettings
from allsmi.schema import DeviceSample, ProcessSample
from allsmi.collection.waiting import classify_holder

from .fakeproc import write_node, write_process

S = ActivitySettings()
PROCS = (ProcessSample(1, "ann"),)


class _Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _port(root: Path, dev: str, files: dict[str, int], where: str = "hw_counters") -> None:
    base = root / "sys" / "class" / "infiniband" / dev / "ports" / "1" / where
    base.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (base / name).write_text(f"{value}\n")


def _dev(link: float | None = None) -> DeviceSample:
    return DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                        compute_active_percent=1.0, compute_active_source="sm_active",
                        interconnect_rx_bytes_per_second=link,
                        interconnect_tx_bytes_per_second=link, processes=PROCS)


def _idle() -> ProcessActivity:
    return ProcessActivity(pid=1, cpu_cores=0.0, threads=1, blocked_threads=0,
                           read_bytes_per_second=0.0)


def _node(root: Path, steps: list[dict[str, int]], dev: str = "efa_0") -> object:
    """The node's activity over readings 2 s apart of one EFA-like port with these
    ``hw_counters`` (and a quiet eth0)."""
    clock = _Clock()
    sampler = HostActivitySampler(str(root / "proc"), str(root / "sys"), monotonic=clock)
    node = None
    for files in steps:
        write_node(root, net={"eth0": (0, 0)})
        _port(root, dev, files)
        node = sampler.sample([]).node
        clock.now += 2.0
    return node


def test_an_efa_port_is_read_from_its_hw_counters_in_bytes(tmp_path: Path) -> None:
    node = _node(tmp_path, [{"rx_bytes": 0, "tx_bytes": 0, "rdma_read_bytes": 0},
                            {"rx_bytes": 4_000_000_000, "tx_bytes": 2_000, "rdma_read_bytes": 7}])
    assert node.infiniband_ports == 1 and node.infiniband_unmeasured == 0  # type: ignore[attr-defined]
    assert node.infiniband_rx_bytes_per_second == 2e9  # bytes, not 4-byte words
    assert node.infiniband_tx_bytes_per_second == 1e3
    reason, why = classify_holder(_dev(link=0.0), PROCS, HostActivity({1: _idle()}, node, 2.0), S)  # type: ignore[arg-type]
    assert reason == "communication" and "InfiniBand/RoCE" in why, why
    quiet = _node(tmp_path / "q", [{"rx_bytes": 5, "tx_bytes": 5}, {"rx_bytes": 5, "tx_bytes": 5}])
    assert classify_holder(_dev(link=0.0), PROCS,
                           HostActivity({1: _idle()}, quiet, 2.0), S)[0] == "nothing"  # type: ignore[arg-type]


def test_the_standard_counters_win_where_both_sets_are_there(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", {"port_rcv_data": 10, "port_xmit_data": 20}, "counters")
    _port(tmp_path, "mlx5_0", {"rx_bytes": 999, "tx_bytes": 999})
    ports, unreadable = read_infiniband(str(tmp_path / "sys"))
    assert list(ports.values()) == [(40, 80)] and unreadable == ()


def test_a_port_without_readable_byte_counters_leaves_a_quiet_holder_unknown(tmp_path: Path) -> None:
    """An ``irdma`` port (its octets counted by protocol, no byte total) or one whose files
    cannot be read: it was left out as if the node had no such port, and a holder idle on a
    device with quiet links was ``nothing`` while that port may have moved gigabytes."""
    for dev in ("irdma0", "efa_0"):
        node = _node(tmp_path / dev, [{"ip4RxOcts": 0}, {"ip4RxOcts": 10**12}], dev=dev)
        assert node.infiniband_ports == 1 and node.infiniband_unmeasured == 1  # type: ignore[attr-defined]
        for link in (0.0, None):
            reason, why = classify_holder(_dev(link=link), PROCS,
                                          HostActivity({1: _idle()}, node, 2.0), S)  # type: ignore[arg-type]
            assert reason == "unknown" and "InfiniBand/RoCE traffic" in why, (dev, link, why)
    # beside a measured port: partly measured, still unknown
    root = tmp_path / "mixed"
    clock = _Clock()
    sampler = HostActivitySampler(str(root / "proc"), str(root / "sys"), monotonic=clock)
    for _ in range(2):
        write_node(root, net={"eth0": (0, 0)}, ib={"mlx5_0": (0, 0)})
        _port(root, "irdma0", {"ip4RxOcts": 1})
        node = sampler.sample([]).node
        clock.now += 2.0
    assert node.infiniband_ports == 2 and node.infiniband_unmeasured == 1
    reason, why = classify_holder(_dev(link=0.0), PROCS, HostActivity({1: _idle()}, node, 2.0), S)
    assert reason == "unknown" and "partly measured (1 port(s)" in why and "byte counters" in why, why


def test_doctor_names_the_ports_it_cannot_read(tmp_path: Path) -> None:
    write_node(tmp_path, net={"eth0": (0, 0)}, ib={"mlx5_0": (1, 1)})
    write_process(tmp_path, os.getpid())
    _port(tmp_path, "irdma0", {"ip4RxOcts": 1})
    found = {s.name: s for s in probe.host_signals(str(tmp_path / "proc"), str(tmp_path / "sys"))}
    signal = found["InfiniBand/RoCE ports"]
    assert not signal.readable
    assert "1 port(s), 1 port(s) without readable byte counters (irdma0/1)" in signal.detail
    _port(tmp_path / "efa", "efa_0", {"rx_bytes": 1, "tx_bytes": 1})
    write_node(tmp_path / "efa")
    write_process(tmp_path / "efa", os.getpid())
    found = {s.name: s for s in probe.host_signals(str(tmp_path / "efa" / "proc"),
                                                   str(tmp_path / "efa" / "sys"))}
    assert found["InfiniBand/RoCE ports"].readable
    assert found["InfiniBand/RoCE ports"].detail == "1 port(s)"

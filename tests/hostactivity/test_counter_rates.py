"""The node's network and InfiniBand/RoCE rates are summed counter by counter: an interface or
port that appears, disappears, cannot be read once or goes backwards adds nothing to that
interval, and with no counter read both times the rate is unknown, never invented."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from allsmi.hostactivity import portable
from allsmi.hostactivity.sampler import HostActivitySampler, NodeActivity
from allsmi.hostactivity.settings import ActivitySettings
from allsmi.schema import DeviceSample, ProcessSample
from allsmi.collection.waiting import WaitingClassifier

from .fakeproc import real_cgroups, write_node


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Node:
    """A fake node read by a real sampler, one two-second interval per :meth:`step`."""

    def __init__(self, root: Path) -> None:
        self.root, self.clock = root, _Clock()
        write_node(root)
        self.sampler = HostActivitySampler(str(root / "proc"), str(root / "sys"),
                                           monotonic=self.clock)

    def step(self, net: dict[str, tuple[int, int]] | None = None,
             ib: dict[str, tuple[int, int]] | None = None) -> NodeActivity:
        write_node(self.root, net=net, ib=ib)
        node = self.sampler.sample([]).node
        self.clock.now += 2.0
        return node

    def remove(self, path: str) -> None:
        shutil.rmtree(self.root / "sys" / "class" / path)


def _ib(node: NodeActivity) -> tuple[float | None, float | None]:
    return node.infiniband_rx_bytes_per_second, node.infiniband_tx_bytes_per_second


def _net(node: NodeActivity) -> tuple[float | None, float | None]:
    return node.network_rx_bytes_per_second, node.network_tx_bytes_per_second


def test_a_hot_added_port_adds_nothing_until_it_was_read_twice(tmp_path: Path) -> None:
    n = _Node(tmp_path)
    n.step(ib={"mlx5_0": (1000, 1000)})
    assert _ib(n.step(ib={"mlx5_0": (1500, 1000)})) == (1000.0, 0.0)  # 500 words x 4 / 2 s
    # a second port, with 500 G words counted over its life, appears
    assert _ib(n.step(ib={"mlx5_0": (2000, 1000), "mlx5_1": (5 * 10**11, 5 * 10**11)})) \
        == (1000.0, 0.0)
    # from its second reading on, its own change counts
    assert _ib(n.step(ib={"mlx5_0": (2500, 1000), "mlx5_1": (5 * 10**11 + 250, 5 * 10**11)})) \
        == (1500.0, 0.0)


def test_a_port_unreadable_for_one_cycle_adds_nothing_to_either_interval(tmp_path: Path) -> None:
    n = _Node(tmp_path)
    n.step(ib={"mlx5_0": (0, 0), "mlx5_1": (10**9, 10**9)})
    counters = tmp_path / "sys" / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters"
    (counters / "port_rcv_data").unlink()  # gone for one reading
    assert _ib(n.step(ib={"mlx5_0": (500, 500)})) == (1000.0, 1000.0)
    # back, 10 G words later: still only mlx5_0's change, as it was read in both readings
    assert _ib(n.step(ib={"mlx5_0": (1000, 1000), "mlx5_1": (11 * 10**9, 11 * 10**9)})) \
        == (1000.0, 1000.0)
    assert _ib(n.step(ib={"mlx5_0": (1000, 1000), "mlx5_1": (11 * 10**9 + 5, 11 * 10**9)})) \
        == (10.0, 0.0)


def test_a_removed_port_or_interface_takes_nothing_away(tmp_path: Path) -> None:
    n = _Node(tmp_path)
    n.step(net={"eth0": (0, 0), "eth1": (10**12, 10**12)}, ib={"mlx5_0": (0, 0), "mlx5_1": (9, 9)})
    n.remove("net/eth1")
    n.remove("infiniband/mlx5_1")
    node = n.step(net={"eth0": (2000, 4000)}, ib={"mlx5_0": (100, 50)})
    assert _net(node) == (1000.0, 2000.0) and _ib(node) == (200.0, 100.0)


def test_counters_that_go_backwards_add_nothing_and_alone_are_unknown(tmp_path: Path) -> None:
    n = _Node(tmp_path)
    n.step(net={"eth0": (10**6, 10**6), "eth1": (4 * 10**9, 0)},
           ib={"mlx5_0": (10**6, 10**6), "mlx5_1": (100, 100)})
    # eth1 and mlx5_0 wrapped (or their driver was reloaded); rx only for eth1
    node = n.step(net={"eth0": (10**6 + 200, 10**6 + 400), "eth1": (10, 6)},
                  ib={"mlx5_0": (5, 5), "mlx5_1": (150, 125)})
    assert _net(node) == (100.0, 203.0)
    assert _ib(node) == (100.0, 50.0)
    # the only port resets: nothing read twice moved forward, so the rate is unknown, not 0
    n.remove("infiniband/mlx5_1")
    assert _ib(n.step(net={"eth0": (0, 0)}, ib={"mlx5_0": (1, 1)})) == (None, None)
    assert _net(n.step(net={"eth0": (0, 0)})) == (0.0, 0.0)  # read twice, no traffic: 0


def test_no_counter_read_twice_is_unknown(tmp_path: Path) -> None:
    n = _Node(tmp_path)
    n.step(net={"eth0": (10, 10)}, ib={"mlx5_0": (10, 10)})
    n.remove("net/eth0")
    n.remove("infiniband/mlx5_0")
    # both replaced by new ones in the same interval (a driver reload renaming them)
    node = n.step(net={"eth1": (10**12, 10**12)}, ib={"mlx5_1": (10**11, 10**11)})
    assert _net(node) == (None, None) and _ib(node) == (None, None)


def test_the_portable_reader_keeps_interfaces_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    def nic(received: int, sent: int) -> SimpleNamespace:
        return SimpleNamespace(bytes_recv=received, bytes_sent=sent)
    counters = {"en0": nic(100, 200)}
    monkeypatch.setattr(psutil, "net_io_counters", lambda pernic=False: dict(counters))
    clock = _Clock()
    sampler = HostActivitySampler(portable=True, monotonic=clock)
    sampler.sample([])
    clock.now += 2.0
    counters["en0"] = nic(300, 600)
    counters["en1"] = nic(10**12, 10**12)  # appeared
    node = sampler.sample([]).node
    assert _net(node) == (100.0, 200.0)
    assert portable.read_node_psutil().network == {"en0": (300, 600), "en1": (10**12, 10**12)}


def test_an_idle_holder_beside_a_hot_added_port_is_not_communicating(tmp_path: Path) -> None:
    """The tester's case: a sleeping holder of a busy-looking GPU, and an InfiniBand port with
    a large lifetime count added while it sleeps: never ``communication``. In the interval the
    port appeared its traffic is unknown, so the holder is not known to be idle then either
    (``unknown``, saying so); from its second reading on, it is measured."""
    write_node(tmp_path, net={"eth0": (1, 1)}, ib={"mlx5_0": (1000, 1000)})
    clock = _Clock()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        sampler = HostActivitySampler(sys_root=str(tmp_path / "sys"), monotonic=clock,
                                      tree=real_cgroups(tmp_path, sleeper.pid))
        dev = DeviceSample(id="G", vendor="nvidia", kind="gpu", backend="nvidia",
                           utilization_percent=100.0, compute_active_percent=1.0,
                           compute_active_source="sm_active",
                           processes=(ProcessSample(sleeper.pid, "ann"),))
        classifier = WaitingClassifier(ActivitySettings(), sampler)
        reasons, evidence = [], []
        for cycle in range(4):
            if cycle == 2:
                write_node(tmp_path, net={"eth0": (1, 1)}, ib={"mlx5_1": (5 * 10**11, 5 * 10**11)})
            waiting = classifier.apply([dev])[0].waiting
            assert waiting is not None
            reasons.append(waiting[0].reason)
            evidence.append(waiting[0].evidence)
            clock.now += 1.0
    finally:
        sleeper.kill()
        sleeper.wait()
    assert reasons[1:] == ["nothing", "unknown", "nothing"], reasons
    assert "InfiniBand/RoCE traffic partly measured (1 port(s) new" in evidence[2], evidence


def test_a_bond_and_a_vlan_are_not_counted_beside_their_members(tmp_path: Path) -> None:
    """bond0 over eth0 and eth1, and eth0.100 over eth0: the kernel counts their bytes again on
    the members, so the node's rate is the members' alone (each byte once)."""
    n = _Node(tmp_path)
    net = tmp_path / "sys" / "class" / "net"
    n.step(net={"eth0": (0, 0), "eth1": (0, 0), "bond0": (0, 0), "eth0.100": (0, 0)})
    for upper, lowers in (("bond0", ("eth0", "eth1")), ("eth0.100", ("eth0",))):
        for lower in lowers:
            (net / upper / f"lower_{lower}").symlink_to(net / lower)
    n.step(net={"eth0": (0, 0), "eth1": (0, 0), "bond0": (0, 0), "eth0.100": (0, 0)})
    node = n.step(net={"eth0": (3000, 300), "eth1": (1000, 100), "bond0": (4000, 400),
                       "eth0.100": (500, 50)})
    assert _net(node) == (2000.0, 200.0)


def test_another_device_under_the_same_name_starts_its_own_counters(tmp_path: Path) -> None:
    """A NIC replaced (or an SR-IOV function re-created) as eth1, an adapter as mlx5_1, with
    larger lifetime totals: told apart by ifindex and node_guid, they add nothing until read
    twice, never the difference between two devices' totals."""
    n = _Node(tmp_path)
    net, ib = tmp_path / "sys" / "class" / "net", tmp_path / "sys" / "class" / "infiniband"

    def identities(index: int, guid: str) -> None:
        (net / "eth0" / "ifindex").write_text("2\n")
        (net / "eth1" / "ifindex").write_text(f"{index}\n")
        (ib / "mlx5_0" / "node_guid").write_text("b8ce:f603:00aa:0001\n")
        (ib / "mlx5_1" / "node_guid").write_text(f"{guid}\n")

    n.step(net={"eth0": (0, 0), "eth1": (10, 10)}, ib={"mlx5_0": (0, 0), "mlx5_1": (10, 10)})
    identities(3, "b8ce:f603:00aa:0002")
    n.step(net={"eth0": (0, 0), "eth1": (10, 10)}, ib={"mlx5_0": (0, 0), "mlx5_1": (10, 10)})
    identities(9, "b8ce:f603:00bb:0009")  # both replaced, same names, far larger totals
    node = n.step(net={"eth0": (2000, 4000), "eth1": (10**12, 10**12)},
                  ib={"mlx5_0": (100, 50), "mlx5_1": (10**11, 10**11)})
    assert _net(node) == (1000.0, 2000.0) and _ib(node) == (200.0, 100.0)
    node = n.step(net={"eth0": (2000, 4000), "eth1": (10**12 + 600, 10**12)},
                  ib={"mlx5_0": (100, 50), "mlx5_1": (10**11 + 5, 10**11)})
    assert _net(node) == (300.0, 0.0) and _ib(node) == (10.0, 0.0)


def test_virtual_interfaces_beside_network_devices_are_not_counted_again(tmp_path: Path) -> None:
    """Traffic through a tunnel, a WireGuard link or an ifb mirror also crosses the NIC: where
    the node has network devices only they count; without any (a pod's own network namespace)
    the virtual interfaces do."""
    n = _Node(tmp_path)
    net = tmp_path / "sys" / "class" / "net"
    virtual = {"wg0": (0, 0), "ifb0": (0, 0), "vxlan.calico": (0, 0), "lxc12ab": (0, 0)}
    n.step(net={"eth0": (0, 0), **virtual})
    (net / "eth0" / "device").mkdir()  # a PCI network device (a symlink in a real sysfs)
    moved = {name: (2000, 2000) for name in virtual}
    assert _net(n.step(net={"eth0": (2000, 2000), **moved})) == (1000.0, 1000.0)
    (net / "eth0" / "device").rmdir()  # no device: a pod's namespace, its veth named eth0
    n.step(net={"eth0": (2000, 2000), **moved})
    assert _net(n.step(net={"eth0": (4000, 4000), "wg0": (4000, 4000)})) == (2000.0, 2000.0)

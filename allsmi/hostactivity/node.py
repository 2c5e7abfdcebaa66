"""The node's host counters at one moment (Linux): CPU I/O wait, pressure stall information,
network bytes per interface and InfiniBand/RoCE port counters.

Every figure is cumulative, kept per interface and per port: :mod:`allsmi.hostactivity.sampler`
turns two readings into rates counter by counter, so an interface or port that appears,
disappears or cannot be read once never brings its whole lifetime count into one interval.
A file the kernel does not have (PSI before 4.20 or disabled, no InfiniBand) leaves its
figure ``None``, with the reason in :attr:`NodeReading.problems`; nothing here raises. The
cost is bounded by the node's interfaces and ports, not by its processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

PRESSURE_KINDS = ("cpu", "io", "memory")
#: Interfaces and ports read at most (a node has a handful; a container host may have
#: thousands of veth interfaces, which are not the node's traffic).
MAX_INTERFACES = 64
_SKIPPED_PREFIXES = ("veth", "docker", "cni", "flannel", "cali", "virbr", "br-")


@dataclass(frozen=True)
class NodeReading:
    """Cumulative node counters at one moment (``None``: not available here)."""

    cpu_ticks: tuple[float, ...] | None = None
    """``/proc/stat``'s first line (user, nice, system, idle, iowait, ...), in ticks."""
    pressure_some_usec: dict[str, int] = field(default_factory=dict)
    """Per kind (cpu, io, memory): PSI ``some`` ``total=`` microseconds."""
    network: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per interface (not loopback, bridges, veths): (received, sent) bytes; empty when none
    could be read."""
    infiniband: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per InfiniBand/RoCE port (``mlx5_0/1``): (received, sent) bytes (the counters count
    4-byte words, multiplied out here); empty when the node has none."""
    infiniband_unreadable: tuple[str, ...] = ()
    """The ports listed whose byte counters could not be read (neither set is there, or a
    read failed): their traffic is unknown, never none."""
    problems: tuple[str, ...] = ()


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(16384)


def parse_cpu_line(data: bytes) -> tuple[float, ...] | None:
    fields = data.split(b"\n", 1)[0].split()
    if fields[:1] != [b"cpu"] or len(fields) < 6:
        return None
    try:
        return tuple(float(v) for v in fields[1:11])
    except ValueError:
        return None


def parse_pressure_some(data: bytes) -> int | None:
    """``total=`` of the ``some`` line of a ``/proc/pressure/*`` file, in microseconds."""
    for line in data.splitlines():
        if line.startswith(b"some "):
            for part in line.split()[1:]:
                if part.startswith(b"total="):
                    try:
                        return int(part[6:])
                    except ValueError:
                        return None
    return None


def _counter(path: str) -> int | None:
    try:
        return int(_read(path).strip() or b"x")
    except (OSError, ValueError):
        return None


def _identity(path: str) -> str:
    """What tells one interface (``ifindex``) or one InfiniBand device (``node_guid``) from
    another that later takes its name; empty where unreadable."""
    try:
        return _read(path).strip().decode("ascii", "replace")
    except OSError:
        return ""


def read_network(sys_root: str) -> dict[str, tuple[int, int]]:
    """(received, sent) bytes per interface of the node's own (at most :data:`MAX_INTERFACES`),
    each byte once: an interface stacked on others is left out for those beneath it; so is one
    whose counters cannot be read. Where the node has network devices (interfaces with a
    ``device`` link), only they count: the virtual ones (tunnels, WireGuard, ``ifb`` mirrors,
    Cilium's ``lxc``) carry traffic that also crosses a device, or stays on the node; a pod's
    own network namespace, with no device, counts its virtual interfaces. Keyed by name and ``ifindex`` (``eth0#2``), so that another
    interface given the same name (a NIC replaced, an SR-IOV function re-created) starts its
    own counters instead of adding the difference between two devices' lifetime totals."""
    base = os.path.join(sys_root, "class", "net")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return {}
    names = [name for name in names
             if name != "lo" and not name.startswith(_SKIPPED_PREFIXES) and not _stacked(base, name)]
    physical = [name for name in names if os.path.exists(os.path.join(base, name, "device"))]
    out: dict[str, tuple[int, int]] = {}
    for name in physical or names:
        if len(out) >= MAX_INTERFACES:
            break
        r = _counter(os.path.join(base, name, "statistics", "rx_bytes"))
        t = _counter(os.path.join(base, name, "statistics", "tx_bytes"))
        if r is not None and t is not None:
            index = _identity(os.path.join(base, name, "ifindex"))
            out[f"{name}#{index}" if index else name] = (r, t)
    return out


def _stacked(base: str, name: str) -> bool:
    """Whether interface ``name`` is stacked on others (a bond, a VLAN, a macvlan, a bridge: its
    sysfs directory links ``lower_<dev>``): its bytes are the ones beneath it, which are counted
    there, so counting it too would double the node's traffic."""
    try:
        return any(entry.startswith("lower_") for entry in os.listdir(os.path.join(base, name)))
    except OSError:
        return False


def read_infiniband(sys_root: str) -> tuple[dict[str, tuple[int, int]], tuple[str, ...]]:
    """(received, sent) bytes per InfiniBand/RoCE port (``device/port``), at most
    :data:`MAX_INTERFACES`, and the ports whose bytes could not be read.

    A port's bytes are ``counters/port_rcv_data``/``port_xmit_data``, which count 4-byte
    words (64-bit where the driver reads the extended set); a port without them (AWS EFA,
    Broadcom ``bnxt_re``: their adapters keep only ``hw_counters``) is read from
    ``hw_counters/rx_bytes``/``tx_bytes``, in bytes, all the port's traffic. A port with
    neither (``irdma``'s octet counters by protocol), or whose files cannot be read, is listed
    as unreadable: its traffic is unknown. Keyed by device, port and the device's
    ``node_guid`` (``mlx5_0/1#...``): an adapter replaced under the same name starts its own
    counters."""
    base = os.path.join(sys_root, "class", "infiniband")
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return {}, ()
    out: dict[str, tuple[int, int]] = {}
    unreadable: list[str] = []
    for dev in devices:
        try:
            ports = sorted(os.listdir(os.path.join(base, dev, "ports")))
        except OSError:
            continue
        guid = _identity(os.path.join(base, dev, "node_guid"))
        for port in ports:
            if len(out) + len(unreadable) >= MAX_INTERFACES:
                return out, tuple(unreadable)
            key = f"{dev}/{port}#{guid}" if guid else f"{dev}/{port}"
            where = os.path.join(base, dev, "ports", port)
            r = _counter(os.path.join(where, "counters", "port_rcv_data"))
            t = _counter(os.path.join(where, "counters", "port_xmit_data"))
            if r is not None and t is not None:
                out[key] = (4 * r, 4 * t)
                continue
            r = _counter(os.path.join(where, "hw_counters", "rx_bytes"))
            t = _counter(os.path.join(where, "hw_counters", "tx_bytes"))
            if r is not None and t is not None:
                out[key] = (r, t)
            else:
                unreadable.append(f"{dev}/{port}")
    return out, tuple(unreadable)


def read_node(proc_root: str = "/proc", sys_root: str = "/sys") -> NodeReading:
    """The node's counters now."""
    problems: list[str] = []
    try:
        cpu = parse_cpu_line(_read(os.path.join(proc_root, "stat")))
    except OSError as exc:
        cpu = None
        problems.append(f"{proc_root}/stat unreadable ({exc.strerror or exc})")
    pressure: dict[str, int] = {}
    for kind in PRESSURE_KINDS:
        try:
            value = parse_pressure_some(_read(os.path.join(proc_root, "pressure", kind)))
        except OSError:
            value = None
        if value is not None:
            pressure[kind] = value
    if not pressure:
        problems.append(f"no pressure stall information ({proc_root}/pressure: kernel before "
                        "4.20, or booted without psi)")
    network = read_network(sys_root)
    if not network:
        problems.append(f"no network interface counters under {sys_root}/class/net")
    infiniband, unreadable = read_infiniband(sys_root)
    return NodeReading(cpu_ticks=cpu, pressure_some_usec=pressure, network=network,
                       infiniband=infiniband, infiniband_unreadable=unreadable,
                       problems=tuple(problems))

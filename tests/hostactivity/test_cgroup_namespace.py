"""Other processes' CPU throttling read from a cgroup namespace of allsmi's own.

On cgroup v2 a container runtime gives each container that is not privileged a cgroup
namespace of its own (containerd, CRI-O): from the Kubernetes kit's DaemonSet (``hostPID:
true``) another pod's ``/proc/PID/cgroup`` reads ``0::/../../../kubepods-besteffort.slice/...``
(relative to the exporter's own cgroup) and the container's ``/sys/fs/cgroup`` shows only its
own subtree. Every holder's throttling was unknown there, so ``host`` (a pod's CPU limit) could
never be found, and a quiet holder was called ``nothing`` although its throttling was never
measured. Here the host's tree is read where the kit mounts it, the exporter's own cgroup found
on it by its pid in a ``cgroup.procs``, and a cgroup that cannot be placed counts as not measured.

Fake trees: ``proc`` (this exporter's ``self`` with its ``ns/cgroup`` link and ``cgroup``, and
the holder's ``/proc/PID``), ``sys/fs/cgroup`` (the container's own view) and
``host/sys/fs/cgroup`` (the host's tree, as the kit mounts it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from allsmi.collection.waiting import WaitingClassifier, classify_holder
from allsmi.config import ConfigError, parse_config
from allsmi.hostactivity import cgrouptree
from allsmi.hostactivity.cgrouptree import PROC_CGROUP_INIT_INO, CgroupTree
from allsmi.hostactivity.probe import cgroup_signal
from allsmi.hostactivity.procfs import read_process
from allsmi.hostactivity.sampler import HostActivity, HostActivitySampler
from allsmi.hostactivity.settings import ActivitySettings, activity_settings
from allsmi.schema import DeviceSample, ProcessSample

from .fakeproc import write_node, write_process

S = ActivitySettings()
ME = 777  # the exporter's pid, as the tree's cgroup.procs lists it
PID = 60  # the holder's
IO = {"rchar": 0, "wchar": 0, "read_bytes": 0, "write_bytes": 0}
MINE = "kubepods.slice/kubepods-burstable.slice/pod-allsmi.slice/cri-containerd-allsmi.scope"
POD = "kubepods.slice/kubepods-besteffort.slice/pod-train.slice"
THEIRS = f"{POD}/cri-containerd-train.scope"
#: The holder's cgroup as the kernel writes it for a reader whose namespace's root is MINE.
RELATIVE = "/../../../kubepods-besteffort.slice/pod-train.slice/cri-containerd-train.scope"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _periods(periods: int, throttled: int) -> str:
    return f"usage_usec 0\nnr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec 0\n"


def _cgroup(tree: Path, path: str, text: str, procs: str = "") -> None:
    where = tree / path
    where.mkdir(parents=True, exist_ok=True)
    (where / "cpu.stat").write_text(text)
    (where / "cgroup.procs").write_text(procs)


def _node(root: Path, own_ns: int = 4026532100, host: bool = True, holder: str = RELATIVE,
          pod: tuple[int, int] = (0, 0)) -> Path:
    """The exporter in its own cgroup namespace (``own_ns``; the initial one's inode: the
    host's), its own view, the host's tree (``host``) and one holder in ``holder``."""
    write_node(root, net={"eth0": (0, 0)})
    me = root / "proc" / "self"
    (me / "ns").mkdir(parents=True, exist_ok=True)
    if os.path.lexists(me / "ns" / "cgroup"):
        (me / "ns" / "cgroup").unlink()
    (me / "ns" / "cgroup").symlink_to(f"cgroup:[{own_ns}]")
    (me / "cgroup").write_text("0::/\n")
    _cgroup(root / "sys" / "fs" / "cgroup", "", "usage_usec 5\n", f"1\n{ME}\n")  # its own view
    hosts = root / "host" / "sys" / "fs" / "cgroup"
    if host:
        _cgroup(hosts, "", "usage_usec 0\n", "1\n2\n")
        (hosts / "cgroup.controllers").write_text("cpu io memory pids\n")  # (a v2 tree)
        for above in ("kubepods.slice", "kubepods.slice/kubepods-besteffort.slice",
                      "kubepods.slice/kubepods-burstable.slice", os.path.dirname(MINE)):
            _cgroup(hosts, above, "usage_usec 0\n")  # (no CPU controller: no limit)
        for i in range(1, 5):  # other pods first in the walk's order, and deeper ones
            _cgroup(hosts, f"kubepods.slice/kubepods-besteffort.slice/pod-a{i}.slice/c.scope",
                    _periods(0, 0), f"{1000 + i}\n")
        _cgroup(hosts, MINE, _periods(0, 0), f"1\n{ME}\n")
        _pod(root, pod)
    write_process(root, PID, io=IO, sched=(0, 0), cgroup=f"0::{holder}\n")
    return hosts


def _pod(root: Path, pod: tuple[int, int], container: tuple[int, int] = (0, 0)) -> None:
    hosts = root / "host" / "sys" / "fs" / "cgroup"
    _cgroup(hosts, POD, _periods(*pod))
    _cgroup(hosts, THEIRS, _periods(*container), f"{PID}\n")


def _tree(root: Path, clock: _Clock | None = None, setting: str = "auto") -> CgroupTree:
    return CgroupTree(str(root / "proc"), str(root / "sys" / "fs" / "cgroup"), setting, pid=ME,
                      monotonic=clock or _Clock(), kit_root=str(root / "host" / "sys" / "fs" / "cgroup"))


def _sampler(root: Path, clock: _Clock, tree: CgroupTree | None = None) -> HostActivitySampler:
    return HostActivitySampler(str(root / "proc"), str(root / "sys"), monotonic=clock,
                               tree=tree or _tree(root, clock))


def _classify(activity: HostActivity) -> tuple[str, str]:
    dev = DeviceSample(id="GPU-1", vendor="nvidia", kind="gpu", backend="nvidia",
                       utilization_percent=100.0, compute_active_percent=2.0,
                       compute_active_source="sm_active", interconnect_rx_bytes_per_second=0.0,
                       interconnect_tx_bytes_per_second=0.0,
                       processes=(ProcessSample(PID, "ann"),))
    return classify_holder(dev, dev.processes or (), activity, S)


def test_another_pods_limit_is_read_on_the_hosts_tree(tmp_path: Path) -> None:
    """The holder's pod is throttled in half its periods: ``host``, at the pod's cgroup on the
    host's tree (its ``..``-relative path placed from the exporter's own cgroup there)."""
    clock = _Clock()
    _node(tmp_path)
    sampler = _sampler(tmp_path, clock)
    sampler.sample([PID])
    clock.now += 2.0
    _pod(tmp_path, pod=(20, 10), container=(20, 0))
    activity = sampler.sample([PID])
    p = activity.processes[PID]
    hosts = tmp_path / "host" / "sys" / "fs" / "cgroup"
    assert p.throttled_fraction == pytest.approx(0.5) and p.throttling_unmeasured == 0
    assert p.throttled_cgroup == str(hosts / POD)
    reason, why = _classify(activity)
    assert reason == "host" and f"(at {hosts / POD})" in why, why
    clock.now += 2.0  # measured at every level, none throttled: idle
    assert _classify(sampler.sample([PID]))[0] == "nothing"


def test_auto_reads_the_hosts_tree_only_in_a_namespace_of_its_own(tmp_path: Path) -> None:
    """``auto``: the kit's mount in a namespace of its own; ``/sys/fs/cgroup`` in the host's
    (the initial namespace's inode), where paths are whole; a path set is read as given."""
    hosts = _node(tmp_path)
    private = _tree(tmp_path)
    assert private.chosen()[:2] == (True, str(hosts))
    mount, parts, below = private.place("0", "", RELATIVE)  # type: ignore[misc]
    assert (mount, "/".join(parts), below) == (str(hosts), THEIRS, False)
    _node(tmp_path, own_ns=PROC_CGROUP_INIT_INO)
    shared = _tree(tmp_path)
    assert shared.chosen()[:2] == (False, str(tmp_path / "sys" / "fs" / "cgroup"))
    assert shared.place("0", "", f"/{THEIRS}") == (str(tmp_path / "sys" / "fs" / "cgroup"),
                                                   tuple(THEIRS.split("/")), False)
    assert _tree(tmp_path, setting=str(hosts)).chosen()[:2] == (False, str(hosts))


def test_without_the_hosts_tree_a_quiet_holder_is_never_idle(tmp_path: Path) -> None:
    """No host tree mounted: the holder's cgroup (outside the namespace) names nothing this
    exporter can read. Its throttling was never measured, so it is ``unknown``, saying why and
    what to mount, where it used to be ``nothing``. Read by the sampler's own defaults."""
    clock = _Clock()
    _node(tmp_path, host=False)
    sampler = HostActivitySampler(str(tmp_path / "proc"), str(tmp_path / "sys"), monotonic=clock)
    sampler.sample([PID])
    clock.now += 2.0
    activity = sampler.sample([PID])
    assert activity.processes[PID].throttled_fraction is None
    reason, why = _classify(activity)
    assert reason == "unknown", why
    assert "cgroup CPU throttling not measured" in why and "cgroup namespace of its own" in why
    assert "/host/sys/fs/cgroup" in why


@pytest.mark.parametrize("cgroup", [
    "0::/../../../../../../outside\n",           # above the host's root
    "0::/kubepods.slice/gone.scope\n",           # no such cgroup (a wrong tree, or removed)
    "0::/a\n0::/kubepods/victim\n",              # a forged line (a cgroup name holding a newline)
], ids=["above-root", "missing", "forged"])
def test_a_cgroup_that_cannot_be_placed_is_not_measured(tmp_path: Path, cgroup: str) -> None:
    clock = _Clock()
    _node(tmp_path, holder="/x")
    (tmp_path / "proc" / str(PID) / "cgroup").write_text(cgroup)
    sampler = _sampler(tmp_path, clock)
    sampler.sample([PID])
    clock.now += 2.0
    activity = sampler.sample([PID])
    p = activity.processes[PID]
    assert p.throttled_fraction is None and p.throttling_unmeasured == 1
    assert any(f"/proc/{PID}/cgroup: CPU throttling unknown" in x for x in p.problems), p.problems
    assert _classify(activity)[0] == "unknown"


def test_holders_in_its_own_view_leave_the_levels_above_it_unchecked(tmp_path: Path) -> None:
    """No host tree: a holder inside the exporter's own namespace is read in its own view, the
    view's root (a container's cgroup, which may hold a limit) included, and the levels above
    it (the pod's) count as not measured: a limit there is found, a quiet holder not idle."""
    clock = _Clock()
    _node(tmp_path, host=False, holder="/worker")
    own = tmp_path / "sys" / "fs" / "cgroup"
    _cgroup(own, "worker", _periods(0, 0), f"{PID}\n")
    _cgroup(own, "", _periods(0, 0), f"{ME}\n")
    sampler = HostActivitySampler(str(tmp_path / "proc"), str(tmp_path / "sys"), monotonic=clock)
    sampler.sample([PID])
    clock.now += 2.0
    _cgroup(own, "", _periods(10, 5), f"{ME}\n")
    assert _classify(sampler.sample([PID]))[0] == "host"
    clock.now += 2.0
    reason, why = _classify(sampler.sample([PID]))
    assert reason == "unknown" and "cgroup CPU throttling partly measured" in why, why


def test_its_own_cgroup_is_found_once_and_again_when_it_moves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search (every directory's cgroup.procs) runs once; each cycle one cgroup.procs
    checks it. The exporter found elsewhere (the old one no longer lists it): found again,
    and the holder's path (the kernel writes it from the new root) placed again."""
    clock = _Clock()
    hosts = _node(tmp_path)
    reads: list[str] = []
    real = cgrouptree.read_limited

    def counted(path: str, limit: int) -> bytes:
        reads.append(path)
        return real(path, limit)
    monkeypatch.setattr(cgrouptree, "read_limited", counted)
    sampler = _sampler(tmp_path, clock)
    sampler.sample([PID])
    searched = sum(1 for r in reads if r.endswith("cgroup.procs"))
    assert searched > 3
    for _ in range(3):
        reads.clear()
        clock.now += 2.0
        sampler.sample([PID])
        assert [r for r in reads if r.endswith("cgroup.procs")] == [str(hosts / MINE / "cgroup.procs")]
    (hosts / MINE / "cgroup.procs").write_text("1\n")  # moved: one level up, say
    moved = "kubepods.slice/kubepods-burstable.slice/pod-allsmi.slice"
    (hosts / moved / "cgroup.procs").write_text(f"{ME}\n")
    (tmp_path / "proc" / str(PID) / "cgroup").write_text(
        "0::/../../kubepods-besteffort.slice/pod-train.slice/cri-containerd-train.scope\n")
    clock.now += 2.0
    sampler.sample([PID])  # placed again (a new place: not an interval yet)
    clock.now += 2.0
    _pod(tmp_path, pod=(40, 30), container=(40, 0))
    p = sampler.sample([PID]).processes[PID]
    assert p.throttled_cgroup == str(hosts / POD) and p.throttled_fraction == pytest.approx(0.75)


def test_a_search_that_fails_is_bounded_and_not_repeated_every_cycle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    _node(tmp_path)
    monkeypatch.setattr(cgrouptree, "MAX_SEARCHED", 3)  # the exporter's cgroup lies deeper
    reads: list[str] = []
    real = cgrouptree.read_limited
    monkeypatch.setattr(cgrouptree, "read_limited", lambda p, n: (reads.append(p), real(p, n))[1])
    sampler = _sampler(tmp_path, clock)
    sampler.sample([PID])
    assert sum(1 for r in reads if r.endswith("cgroup.procs")) == 3
    clock.now += 2.0
    activity = sampler.sample([PID])
    assert any("own cgroup (its pid in cgroup.procs) not found" in x
               for x in activity.processes[PID].problems)
    assert _classify(activity)[0] == "unknown"
    assert sum(1 for r in reads if r.endswith("cgroup.procs")) == 3  # not searched again yet
    clock.now += cgrouptree.RETRY_SECONDS
    monkeypatch.setattr(cgrouptree, "MAX_SEARCHED", 20_000)
    sampler.sample([PID])
    clock.now += 2.0
    assert sampler.sample([PID]).processes[PID].throttled_fraction == 0.0  # found: measured


def test_doctor_says_whether_other_processes_cgroups_are_readable(tmp_path: Path) -> None:
    """Its own cgroup's cpu.stat alone said ``[+]`` where no other process's could be read."""
    _node(tmp_path, host=False)
    (tmp_path / "proc" / "1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc" / "1" / "cgroup").write_text("0::/../../../../../init.scope\n")
    own = tmp_path / "sys" / "fs" / "cgroup"
    _cgroup(own, "", _periods(5, 0), f"{ME}\n")
    write_process(tmp_path, ME, io=IO, cgroup="0::/\n")
    tree = _tree(tmp_path)
    me = read_process(ME, str(tmp_path / "proc"), tree)
    assert me is not None
    signal = cgroup_signal(me, tree, str(tmp_path / "proc"))
    assert not signal.readable and "other processes' cgroups cannot be found" in signal.detail
    assert "/host/sys/fs/cgroup" in signal.detail, signal.detail
    hosts = _node(tmp_path)  # the host's tree mounted: readable, and where from
    _cgroup(hosts, "init.scope", "usage_usec 0\n", "1\n")
    (tmp_path / "proc" / "1" / "cgroup").write_text("0::/../../../../init.scope\n")
    tree = _tree(tmp_path)
    signal = cgroup_signal(read_process(ME, str(tmp_path / "proc"), tree), tree,  # type: ignore[arg-type]
                           str(tmp_path / "proc"))
    assert signal.readable, signal.detail
    assert f"the host's, mounted at {hosts}" in signal.detail and f"/{MINE}" in signal.detail


def test_the_setting_reaches_the_sampler(tmp_path: Path) -> None:
    hosts = _node(tmp_path)
    s = activity_settings(parse_config(f"[activity]\ncgroup_root = '{hosts}/'\n"))
    assert s.cgroup_root == str(hosts) and ActivitySettings().cgroup_root == "auto"
    step = WaitingClassifier.for_backends(s, [], str(tmp_path / "proc"))
    assert step.source.tree.chosen()[1] == str(hosts)  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["'host/sys/fs/cgroup'", "'/a/../b'", "''", "5", "'automatic'"])
def test_a_bad_cgroup_root_names_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        activity_settings(parse_config(f"[activity]\ncgroup_root = {value}\n", Path("c.toml")))
    assert info.value.key == "activity.cgroup_root" and info.value.line == 2


def test_a_v1_cpu_hierarchy_is_placed_under_its_own_mount(tmp_path: Path) -> None:
    """cgroup v1 in a namespace of its own: the ``cpu`` hierarchy's path is placed from the
    exporter's cgroup in that hierarchy, never from the v1 trees' tmpfs root (where the v2
    search would have found the exporter's pid in a v1 hierarchy's cgroup.procs)."""
    clock = _Clock()
    _node(tmp_path, host=False, holder="/x")
    (tmp_path / "proc" / "self" / "cgroup").write_text("4:cpu,cpuacct:/\n1:name=systemd:/\n0::/\n")
    (tmp_path / "proc" / str(PID) / "cgroup").write_text(
        "4:cpu,cpuacct:/../../../besteffort/pod-b/c\n1:name=systemd:/../../../besteffort/pod-b/c\n"
        "0::/../../../besteffort/pod-b/c\n")
    cpu = tmp_path / "host" / "sys" / "fs" / "cgroup" / "cpu,cpuacct"
    for path, text, procs in (("", _periods(0, 0), "1\n"), ("kubepods", _periods(0, 0), ""),
                              ("kubepods/burstable", _periods(0, 0), ""),
                              ("kubepods/burstable/pod-a", _periods(0, 0), ""),
                              ("kubepods/burstable/pod-a/allsmi", _periods(0, 0), f"{ME}\n"),
                              ("kubepods/besteffort", _periods(0, 0), ""),
                              ("kubepods/besteffort/pod-b", _periods(0, 0), ""),
                              ("kubepods/besteffort/pod-b/c", _periods(0, 0), f"{PID}\n")):
        _cgroup(cpu, path, text, procs)
    tree = _tree(tmp_path, clock)
    assert "not a cgroup v2 tree" in str(tree.place("0", "", "/../../../besteffort/pod-b/c"))
    sampler = _sampler(tmp_path, clock, tree)
    sampler.sample([PID])
    clock.now += 2.0
    _cgroup(cpu, "kubepods/besteffort/pod-b", _periods(10, 4))
    p = sampler.sample([PID]).processes[PID]
    assert p.throttled_fraction == pytest.approx(0.4), p.problems
    assert p.throttled_cgroup == str(cpu / "kubepods/besteffort/pod-b")

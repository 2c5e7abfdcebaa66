"""The cgroup source on fixture /proc trees: Slurm v1/v2, kubepods (cgroupfs, systemd), systemd."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from allsmi.attribution import Attributor, CgroupSource, ProcessAttribution, parse_cgroup
from allsmi.schema import ProcessSample

from ..hostactivity.fakeproc import pid_namespace
from .helpers import find, mixed_devices

PROC = Path(__file__).resolve().parents[2] / "fixtures" / "attribution" / "proc"


@pytest.fixture(scope="module")
def host_proc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture tree as the host's /proc shows it: its pid 1 in the initial PID namespace
    (``1/ns/pid``), so that the drivers' pids are its own (allsmi/support/pidns.py)."""
    root = tmp_path_factory.mktemp("proc") / "proc"
    shutil.copytree(PROC, root)
    pid_namespace(root)
    return root
DEVICES = mixed_devices()

EXPECTED = {
    1001: ProcessAttribution("4242", None, None),
    1002: ProcessAttribution("4243", None, None),
    1003: ProcessAttribution(None, "8f2d6a3c-5b1e-4f7a-9c2d-0e1f2a3b4c5d",
                             "4c6f1e0f8a7d3b2c1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d"),
    1004: ProcessAttribution(None, "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
                             "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    1005: ProcessAttribution(None, None, None),
    1006: ProcessAttribution(None, "0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5",
                             "7e6d5c4b3a2918070f6e5d4c3b2a19087e6d5c4b3a2918070f6e5d4c3b2a1908"),
    1007: ProcessAttribution(None, "2b3c4d5e-6f7a-8b9c-0d1e-2f3a4b5c6d7e",
                             "aa11bb22cc33dd44ee55ff6677889900aa11bb22cc33dd44ee55ff6677889900"),
    1008: ProcessAttribution(None, None, None),
}


@pytest.mark.parametrize("pid", sorted(EXPECTED))
def test_each_layout_parses(pid: int) -> None:
    assert parse_cgroup((PROC / str(pid) / "cgroup").read_text()) == EXPECTED[pid]


def test_garbage_and_lookalikes_say_nothing() -> None:
    assert not parse_cgroup("")
    assert not parse_cgroup("\x00\xff garbage\nno colons here\n1:memory:relative/job_5\n")
    # a "job_" outside a Slurm hierarchy is not a Slurm job
    assert parse_cgroup("0::/user.slice/job_77/app.scope") == ProcessAttribution()
    # a slurm-looking tree inside a pod's cgroup is the container's own doing: the pod is told,
    # the job is not (anyone root in the container can create it)
    both = parse_cgroup("0::/kubepods/pod11111111-2222-3333-4444-555555555555/slurm/job_9/step_0")
    assert both.job_id is None and both.pod_uid == "11111111-2222-3333-4444-555555555555"


@pytest.mark.parametrize("text, job", [
    # cgroup v2, as slurmd's cgroup/v2 plugin creates it (and with several slurmd per host)
    ("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n", "4242"),
    ("0::/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0\n", "4242"),
    ("0::/system.slice/slurmstepd.scope/job_4242\n", "4242"),
    ("0::/system.slice/node7_slurmstepd.scope/job_17/step_0/user/task_0\n", "17"),
    # cgroup v1, the documented /slurm/uid_U/job_N/step_S/task_T layout (and slurm_<node>)
    ("4:memory:/slurm/uid_1000/job_4242/step_0/task_0\n2:devices:/slurm/uid_1000/job_4242/step_0\n",
     "4242"),
    ("3:devices:/slurm_node7/uid_0/job_5/step_extern\n", "5"),
    # spoofed: a user's delegated subtree (systemd's default on cgroup v2) naming another's job
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/slurm/job_4242\n", None),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/slurm/uid_0/job_4242\n", None),
    ("0::/user.slice/user-1000.slice/user@1000.service/system.slice/slurmstepd.scope/job_4242\n",
     None),
    ("0::/user.slice/user-1000.slice/user@1000.service/slurmstepd.scope/job_4242/step_0\n", None),
    ("0::/system.slice/slurmstepd.scope/user/job_4242\n", None),
    ("0::/system.slice/slurmstepd.scope/job_4242x/step_0\n", None),
    ("1:name=systemd:/user.slice/user-1000.slice/slurm/uid_1000/job_4242/step_0\n", None),
])
def test_slurm_job_only_from_slurmd_created_cgroups(text: str, job: str | None) -> None:
    assert parse_cgroup(text).job_id == job


UID = "11111111-2222-3333-4444-555555555555"
CID = "a" * 64


@pytest.mark.parametrize("text", [
    # a user's delegated subtree naming another's pod or container, in every layout read
    f"0::/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
    f"cri-containerd-{CID}.scope\n",
    f"0::/user.slice/user-1000.slice/user@1000.service/kubepods/burstable/pod{UID}/{CID}\n",
    f"0::/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{CID}.scope\n",
    f"0::/user.slice/user-1000.slice/kubepods/pod{UID}/{CID}\n",
    f"0::/user.slice/user-1000.slice/user@1000.service/docker/{CID}\n",
])
def test_a_pod_or_container_named_in_a_user_s_delegated_subtree_is_not_taken(text: str) -> None:
    assert parse_cgroup(text) == ProcessAttribution()


def test_the_kubelet_s_own_pods_are_still_read() -> None:
    systemd = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" \
        f"{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
    kind = f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/" \
        f"kubelet-kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
    for text in (systemd, kind, f"0::/kubepods/burstable/pod{UID}/{CID}\n"):
        assert parse_cgroup(text) == ProcessAttribution(None, UID, CID), text


def _with_processes(pids_by_device: dict[str, list[tuple[int, str]]]) -> list:
    return [replace(d, processes=tuple(ProcessSample(pid, user) for pid, user in pids_by_device[d.id]))
            if d.id in pids_by_device else d for d in DEVICES]


def test_source_attributes_processes_and_puts_slurm_jobs_on_devices(host_proc: Path) -> None:
    h0, amd = find(DEVICES, "nvidia", 0), find(DEVICES, "amd", 2)
    devices = _with_processes({h0.id: [(1001, "alice"), (1003, "svc")],
                               amd.id: [(1002, "bob"), (1005, "carol"), (99999, "gone")]})
    with Attributor([CgroupSource(host_proc)], 5) as attributor:
        result = attributor.resolve(devices)
    assert result.statuses[0].status == "ok" and result.statuses[0].message == ""
    assert result.process(1001) == EXPECTED[1001] and result.process(1003) == EXPECTED[1003]
    assert result.process(99999) == ProcessAttribution()  # exited: nothing, no error
    assert [w.to_dict() for w in result.device_workloads(h0.id) or ()] == [
        {"source": "cgroup", "namespace": None, "pod": None, "container": None, "job_id": "4242",
         "user": "alice", "share": None}]
    assert [(w.job_id, w.user) for w in result.device_workloads(amd.id) or ()] == [("4243", "bob")]
    assert result.device_workloads(find(DEVICES, "gaudi", 0).id) == ()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_cgroup_is_reported(tmp_path: Path) -> None:
    (tmp_path / "4000").mkdir()
    (tmp_path / "4000" / "cgroup").write_text("0::/slurm/job_1\n")
    (tmp_path / "4000" / "cgroup").chmod(0)
    pid_namespace(tmp_path)
    devices = _with_processes({DEVICES[0].id: [(4000, "x")]})
    result = Attributor([CgroupSource(tmp_path)], 5).resolve(devices)
    assert "cannot read the cgroup of 1 process(es): 4000" in result.statuses[0].message


def test_a_process_that_exits_between_open_and_read_is_skipped_silently(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel answers a read of an exited process's open ``cgroup`` file with ESRCH: that
    process is gone, as one whose file is not there, not a cgroup that cannot be read."""
    import subprocess
    import allsmi.attribution.cgroup as cgroup_module
    child = subprocess.Popen(["sleep", "60"])
    (tmp_path / "4000").symlink_to(f"/proc/{child.pid}")  # its real /proc entry
    pid_namespace(tmp_path)
    real_open = os.open

    def open_then_exit(path: object, *args: object, **kwargs: object) -> int:
        fd = real_open(path, *args, **kwargs)  # type: ignore[arg-type]
        if str(path).endswith("/4000/cgroup"):
            child.kill()
            child.wait()
        return fd

    monkeypatch.setattr(cgroup_module.os, "open", open_then_exit)
    try:
        devices = _with_processes({DEVICES[0].id: [(4000, "x")]})
        with Attributor([CgroupSource(tmp_path)], 5) as attributor:
            result = attributor.resolve(devices)
    finally:
        child.kill()
        child.wait()
    assert child.returncode is not None
    assert (result.statuses[0].status, result.statuses[0].message) == ("ok", "")
    assert result.process(4000) == ProcessAttribution()


def test_missing_proc_root_is_unavailable(tmp_path: Path) -> None:
    result = Attributor([CgroupSource(tmp_path / "nope")], 5).resolve(DEVICES)
    assert result.statuses[0].status == "unavailable" and result.workloads is None


def test_a_proc_root_gone_after_it_was_read_is_a_failure(host_proc: Path, tmp_path: Path) -> None:
    """A ``proc_root`` read before, then gone (the host's /proc mount lost): the devices with
    processes have their last holders carried, then unknown, never no job."""
    root = tmp_path / "proc"
    shutil.copytree(host_proc, root, symlinks=True)
    h0 = find(DEVICES, "nvidia", 0)
    devices = _with_processes({h0.id: [(1001, "alice")]})
    with Attributor([CgroupSource(root)], 5) as attributor:
        assert [w.job_id for w in attributor.resolve(devices).device_workloads(h0.id) or ()] \
            == ["4242"]
        shutil.rmtree(root)
        gone = attributor.resolve(devices)
        assert gone.statuses[0].status == "error", gone.statuses[0]
        assert f"{root} not found (it was read before" in gone.statuses[0].message
        assert [w.job_id for w in gone.device_workloads(h0.id) or ()] == ["4242"]
        attributor.carry_seconds = 0
        assert h0.id in attributor.resolve(devices).unknown


def test_an_idle_node_hands_the_cgroup_source_nothing_to_read(host_proc: Path) -> None:
    """No process on any device: each cycle is answered without a call to it (no hand-off to a
    thread on an idle exporter, none started by a one-shot snapshot: its proc root is there,
    so its call would answer nothing); with processes, it is asked again."""
    calls: list[int] = []

    class Counted(CgroupSource):
        def collect(self, devices, now):  # type: ignore[no-untyped-def]
            calls.append(sum(len(d.processes or ()) for d in devices))
            return super().collect(devices, now)

    idle = [replace(d, processes=()) for d in DEVICES]
    attributor = Attributor([Counted(host_proc)], timeout_seconds=5.0)
    try:
        for _ in range(4):
            result = attributor.resolve(idle)
            [status] = result.statuses
            assert status.status == "ok" and not result.processes
            assert all(result.device_workloads(d.id) == () for d in idle)  # known: nobody
        assert calls == [] and attributor.runners[0]._flight.thread is None
        attributor.resolve(DEVICES)
        assert len(calls) == 1 and calls[-1] > 0  # processes: read, on its thread
        assert attributor.runners[0]._flight.thread is not None
    finally:
        attributor.close()


_UID = "8f2d6a3c-5b1e-4f7a-9c2d-0e1f2a3b4c5d"
_CID = "4c6f1e0f8a7d3b2c1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d"
_OTHER = "11111111-2222-3333-4444-555555555555"


@pytest.mark.parametrize("text", [
    # allsmi in a pod with its own cgroup namespace (the default on cgroup v2): the others'
    # cgroups are written relative to its own, cgroupfs driver (the systemd one already worked)
    f"0::/../../../burstable/pod{_UID}/{_CID}\n",
    f"0::/../../pod{_UID}/{_CID}\n",
    # CRI-O with the cgroupfs driver names the container's cgroup crio-<id>, no .scope
    f"0::/kubepods/burstable/pod{_UID}/crio-{_CID}\n",
    # a process that can write below its container's cgroup (privileged) names another pod
    # and container there: the outermost ones are its own
    f"0::/kubepods/burstable/pod{_UID}/{_CID}/kubepods-pod{_OTHER.replace('-', '_')}.slice/"
    f"cri-containerd-{'e' * 64}.scope\n",
    f"0::/kubepods/burstable/pod{_UID}/{_CID}/x/{'e' * 64}\n",
    # a kind node: the node's own docker container is not the pod's container
    f"0::/system.slice/docker-{'d' * 64}.scope/kubelet.slice/kubelet-kubepods.slice/"
    f"kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{_UID.replace('-', '_')}"
    f".slice/cri-containerd-{_CID}.scope\n",
])
def test_the_outermost_pod_and_its_container(text: str) -> None:
    assert parse_cgroup(text) == ProcessAttribution(None, _UID, _CID)

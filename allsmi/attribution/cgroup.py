"""Slurm job id, Kubernetes pod uid and container id from a process's cgroup.

``/proc/<pid>/cgroup`` has one line per hierarchy, ``ID:CONTROLLERS:PATH``;
cgroup v2 has a single ``0::PATH`` line, v1 one line per controller. The
layouts recognized (v1 and v2 alike):

* Slurm, only where slurmd puts its jobs (from the root of the hierarchy):
  ``/slurm/uid_1000/job_1234/step_0/task_0`` (v1; ``/slurm_<node>/...`` with several slurmd on
  one host), ``/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0`` (v2;
  ``<node>_slurmstepd.scope`` with several slurmd). A ``job_N`` anywhere else (a user's
  delegated subtree, ``/user.slice/.../slurm/job_N``; a container's own tree) is someone
  naming a job they do not run, and is ignored;
* kubepods, cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container id>`` (CRI-O:
  ``crio-<id>``), also after the ``/..`` of a reader in its own cgroup namespace;
* kubepods, systemd driver: ``/kubepods.slice/kubepods-besteffort.slice/
  kubepods-besteffort-pod<uid with _>.slice/cri-containerd-<id>.scope``
  (also ``crio-``, ``docker-``, ``containerd-``);
* plain containers: ``/docker/<id>``, ``docker-<id>.scope``;
* plain systemd (``user.slice``, ``system.slice/x.service``): nothing to say.

A path naming several pods or containers gives the outermost pod and the outermost container in it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from allsmi.support.pidns import pid_view
from allsmi.support.lazylog import get_logger
from allsmi.schema import DeviceSample

from .model import ProcessAttribution, SourceError, SourceResult, SourceUnavailable, Workload
from .runner import AttributionSource

log = get_logger(__name__)

#: A cgroup file is a few lines; more than this is not one.
MAX_CGROUP_BYTES = 64 * 1024

#: The cgroups slurmd creates, anchored at the root of the hierarchy: v1 (Slurm's
#: ``/slurm/uid_U/job_N``, ``/slurm_<node>/...`` with several slurmd on one host) and v2
#: (``/system.slice/slurmstepd.scope/job_N``, ``<node>_slurmstepd.scope``). Only root can write
#: there; a user's delegated subtree (systemd's default on cgroup v2) cannot. These patterns
#: are compiled on first use (``re``'s own cache): a snapshot with no device process never does.
_JOB = (r"^(?:/slurm(?:_[A-Za-z0-9._-]+)?/uid_\d+"
        r"|/system\.slice/(?:[A-Za-z0-9._-]+_)?slurmstepd\.scope)/job_(\d+)(?=/|$)")
#: A cgroupfs pod, and the container right below it (containerd, docker: the bare id; CRI-O:
#: ``crio-<id>``).
_POD_FS = r"/kubepods(?:/[a-z-]+)?/pod([0-9a-fA-F-]{8,})(?:/(?:crio-)?([0-9a-f]{64}))?(?=/|$)"
#: The same after the ``/..`` components of a process outside the reader's cgroup namespace
#: (allsmi in a pod, whose own cgroup is its namespace's root): ``/../../burstable/pod<uid>/<id>``.
_POD_FS_UP = (r"(?:/kubepods)?(?:/(?:burstable|besteffort))?"
              r"/pod([0-9a-fA-F-]{8,})(?:/(?:crio-)?([0-9a-f]{64}))?(?=/|$)")
_UP = r"^(?:/\.\.)+(?=/|$)"
_POD_SYSTEMD = r"kubepods(?:-[a-z]+)?-pod([0-9a-fA-F_]{8,})\.slice"
_CONTAINER_SCOPE = r"(?:cri-containerd|containerd|crio|docker|cri-o|libpod)-([0-9a-f]{12,})\.scope"
_DOCKER_DIR = r"/docker/([0-9a-f]{64})(?=/|$)"
#: Where a user's delegated subtree starts (systemd on cgroup v2: ``/user.slice/user-1000.slice/
#: user@1000.service/...``): its owner names the cgroups below it, so a pod or container named
#: there is not taken (a user could claim any pod's uid); a job's pattern is anchored anyway.
_DELEGATED = r"/user\.slice(?=/|$)|/user@\d+\.service(?=/|$)"
#: v1 controllers read first (the same path appears under each; any one names the job).
_PREFERRED = ("memory", "pids", "devices", "cpu", "cpuacct", "name=systemd", "freezer")


def _paths(text: str) -> list[str]:
    """The cgroup paths of a ``/proc/<pid>/cgroup`` text, the most telling first."""
    v2: list[str] = []
    ranked: list[tuple[int, str]] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hier, controllers, path = parts
        if not path.startswith("/"):
            continue
        if controllers == "":
            v2.append(path)
            continue
        names = controllers.split(",")
        rank = min((_PREFERRED.index(n) for n in names if n in _PREFERRED), default=len(_PREFERRED))
        ranked.append((rank, path))
    ranked.sort(key=lambda item: item[0])
    return v2 + [path for _rank, path in ranked]


def _pod_and_container(path: str) -> tuple[str | None, str | None]:
    """The outermost pod of ``path`` and the outermost container inside it (or, outside any
    pod, the outermost container): whoever can write below a container's cgroup (a privileged
    container, a delegated subtree) can name any pod and container there, never above. Nothing
    below a user's delegated subtree counts (:data:`_DELEGATED`)."""
    delegated = re.search(_DELEGATED, path)
    if delegated is not None:
        path = path[:delegated.start()]
    up = re.match(_UP, path)
    pods = [m for m in (re.search(_POD_SYSTEMD, path), re.search(_POD_FS, path),
                        re.compile(_POD_FS_UP).match(path, up.end()) if up else None) if m]
    pod = min(pods, key=lambda m: m.start()) if pods else None
    after = pod.start() if pod else 0
    containers = [(m.start(1), m.group(1))
                  for m in (re.compile(_CONTAINER_SCOPE).search(path, after),
                            re.compile(_DOCKER_DIR).search(path, after)) if m]
    if pod is not None and pod.re.groups > 1 and pod.group(2):
        containers.append((pod.start(2), pod.group(2)))
    uid = pod.group(1).replace("_", "-").lower() if pod else None
    return uid, min(containers)[1] if containers else None


def parse_cgroup(text: str) -> ProcessAttribution:
    """What a ``/proc/<pid>/cgroup`` text says (fields ``None`` where it says nothing)."""
    job_id = pod_uid = container_id = None
    for path in _paths(text):
        if job_id is None:
            match = re.match(_JOB, path)
            if match:
                job_id = match.group(1)
        if pod_uid is None or container_id is None:
            uid, container = _pod_and_container(path)
            if pod_uid is None and uid is not None:
                pod_uid, container_id = uid, container or container_id
            elif container_id is None and (uid is None or uid == pod_uid):
                container_id = container
    return ProcessAttribution(job_id, pod_uid, container_id)


def read_process(proc_root: Path, pid: int) -> ProcessAttribution | None:
    """The cgroup facts of ``pid`` under ``proc_root``; ``None`` when the process is gone
    (no file, or ``ESRCH``: it exited between the open and the read).

    Raises ``OSError`` for other failures (permission denied).
    """
    try:
        fd = os.open(proc_root / str(pid) / "cgroup", os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        data = os.read(fd, MAX_CGROUP_BYTES)
    except ProcessLookupError:
        return None
    finally:
        os.close(fd)
    return parse_cgroup(data.decode("utf-8", "replace"))


class CgroupSource(AttributionSource):
    """Reads the cgroup of every process on every device (``/proc`` or a fixture tree)."""

    name = "cgroup"
    only_processes = True

    def __init__(self, proc_root: Path | str = "/proc") -> None:
        self.proc_root = Path(proc_root)
        self._said: str | None = None  # the PID namespace problem last logged (once, not per cycle)
        #: ``proc_root`` was read once: gone since (a host ``/proc`` mount lost), it is a
        #: failure, not a node without processes to read (carried, then unknown).
        self._answered = False

    def absent(self) -> str | None:
        return None if os.path.isdir(self.proc_root) else f"{self.proc_root} not found"

    def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
        why = self.absent()
        if why is not None:
            if self._answered:
                raise SourceError(f"{why} (it was read before: unmounted?)")
            raise SourceUnavailable(why)
        # The drivers report host pids: under another PID namespace's /proc they name other
        # processes, whose pods and jobs would be taken for the holders'. Nothing is read then;
        # the devices with processes have unknown holders where no other source names one.
        withheld = pid_view(str(self.proc_root)).problem
        if withheld is not None:
            if withheld != self._said:
                self._said = withheld
                log.warning("attribution cgroup: processes not attributed: %s", withheld)
            raise SourceError(f"processes not attributed: {withheld}")
        self._answered = True
        processes: dict[int, ProcessAttribution] = {}
        failed: dict[int, str] = {}
        seen: dict[int, ProcessAttribution | None] = {}
        workloads: dict[str, tuple[Workload, ...]] = {}
        for dev in devices:
            found: dict[str, Workload] = {}
            for proc in dev.processes or ():
                if proc.pid not in seen:
                    try:
                        seen[proc.pid] = read_process(self.proc_root, proc.pid)
                    except (OSError, ValueError) as exc:
                        seen[proc.pid] = None
                        failed[proc.pid] = getattr(exc, "strerror", None) or str(exc)
                info = seen[proc.pid]
                if not info:
                    continue
                processes[proc.pid] = info
                if info.job_id and info.job_id not in found:
                    found[info.job_id] = Workload("cgroup", job_id=info.job_id, user=proc.user)
            if found:
                workloads[dev.id] = tuple(found.values())
        message = ""
        if failed:
            shown = ", ".join(f"{pid} ({why})" for pid, why in sorted(failed.items())[:5])
            message = f"cannot read the cgroup of {len(failed)} process(es): {shown}"
        return SourceResult(workloads, processes, message)

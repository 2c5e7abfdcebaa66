"""A hostile node for the readability checks: names as long and as odd as real fleets have.

Served as one node's ``/api/v1/snapshot`` (``allsmi view --hosts URL``): four-digit indexes that
differ only in their first digit, a 42-character hostname, a label holding a newline and a
carriage return, long pod names in long namespaces, long user and group names, long commands, a
device shared by more holders than a panel shows at once.
"""

from __future__ import annotations

from dataclasses import replace

from allsmi.output import to_json
from allsmi.schema import HolderWaiting, ProcessSample, Snapshot, Workload

from .fixtures import simulated_snapshots

HOSTNAME = "gpu-node-017.us-east-1.cluster.example.com"
INDEXES = (1064, 2064, 3064, 4064)
NAMESPACE = "research-foundation-models"
POD = "llama-70b-finetune-7f9c8d6b5-x2k4q"
USER = "alexandra.konstantinopoulou"
GROUP = "research-foundation-models-eu"
COMMAND = ("python -m torch.distributed.run --nproc-per-node 8 train.py --config "
           "configs/llama70b.yaml --resume-from s3://bucket/checkpoints/step-120000 END-OF-COMMAND")
LABEL = "line one\nline two\rafter-cr"
#: compute_active_percent and its source per index (None: not reported): 2064 is the busy-looking
#: GPU, 100 % utilization with 20 % of its SMs active.
ACTIVE = {1064: (0.0, "sm_active"), 2064: (20.0, "sm_active"), 3064: (None, None),
          4064: (35.0, "sm_active")}
#: What each device's holders waited on: (reason, evidence), cycled over the holders.
WAITING = {
    1064: (("nothing", "nothing: no process of the holder ran on the device"),),
    2064: (("computing", "computing: 20% SM active"),),
    3064: (("input", "input: 3 of 4 processes in I/O wait, 480 MB/s read"),),
    4064: (("host", "host: 1 process at 100% of a core per thread"),
           ("communication", "communication: NVLink 2.4 GB/s in"), ("computing", "computing: 35% SM active")),
}
#: Holders of the shared device (index 4064): more than the details panel shows at once.
SHARED = tuple(f"tenant-{k:02d}" for k in range(6))


def hostile_node() -> Snapshot:
    """The simulated mixed node made hostile (see the module's docstring)."""
    base = simulated_snapshots(1)[0]
    whole = [d for d in base.devices if d.parent is None and d.vendor == "nvidia"][:4]
    devices = []
    for k, (dev, index) in enumerate(zip(whole, INDEXES)):
        procs = (ProcessSample(pid=40000 + k, user=USER, command=COMMAND, memory_bytes=1 << 34,
                               utilization_percent=40.0),)
        holders: tuple[Workload, ...] = (Workload(source="kubernetes", namespace=NAMESPACE,
                                                  pod=POD, container="trainer"),)
        if index == 4064:
            holders = tuple(Workload(source="hpc-job", namespace=NAMESPACE, pod=f"{name}-pod",
                                     job_id=f"70{j}", user=f"user{j}", share=0.125)
                            for j, name in enumerate(SHARED))
            procs = tuple(ProcessSample(pid=41000 + j, user=f"user{j}", command=f"python serve_{j}.py",
                                        memory_bytes=1 << 30, utilization_percent=5.0 + j,
                                        job_id=f"70{j}")
                          for j in range(len(SHARED)))
        waiting = tuple(HolderWaiting(reason=WAITING[index][j % len(WAITING[index])][0],
                                      evidence=WAITING[index][j % len(WAITING[index])][1],
                                      namespace=h.namespace, pod=h.pod, job_id=h.job_id, user=h.user)
                        for j, h in enumerate(holders))
        devices.append(replace(dev, index=index, resource_group=GROUP,
                               labels={"team": LABEL}, processes=procs, workloads=holders,
                               utilization_percent=100.0 if index == 2064 else 1.0 if index == 3064
                               else dev.utilization_percent,
                               compute_active_percent=ACTIVE[index][0],
                               compute_active_source=ACTIVE[index][1],
                               sm_occupancy_percent=12.0 if index == 2064 else None,
                               interconnect_rx_bytes_per_second=2.4e9 if index == 4064 else None,
                               interconnect_tx_bytes_per_second=2.2e9 if index == 4064 else None,
                               waiting=waiting))
    return replace(base, host=replace(base.host, hostname=HOSTNAME), devices=tuple(devices))


def hostile_body() -> bytes:
    return to_json(hostile_node()).encode()

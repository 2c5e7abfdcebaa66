"""A hostile node for the readability checks: names as long and as odd as real fleets have.

Served as one node's ``/api/v1/snapshot`` (``allsmi view --hosts URL``): four-digit indexes that
differ only in their first digit, a 42-character hostname, a label holding a newline and a
carriage return, long pod names in long namespaces, long user and group names, long commands, a
device shared by more holders than a panel shows at once.
"""

from __future__ import annotations

from dataclasses import replace

from allsmi.output import to_json
from allsmi.schema import ProcessSample, Snapshot, Workload

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
        devices.append(replace(dev, index=index, resource_group=GROUP,
                               labels={"team": LABEL}, processes=procs, workloads=holders,
                               utilization_percent=1.0 if index == 3064 else dev.utilization_percent))
    return replace(base, host=replace(base.host, hostname=HOSTNAME), devices=tuple(devices))


def hostile_body() -> bytes:
    return to_json(hostile_node()).encode()

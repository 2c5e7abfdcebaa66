"""The processes panel's ``job / pod`` column names the holder a process belongs to, as the
details panel does, also where the process's own sample carries no job id or pod uid (the
workloads are known per device: the simulated node, the kubelet's pod-resources API, a
job-mapping file, Prometheus' ``allsmi_device_workload_info``)."""

from __future__ import annotations

from dataclasses import replace

from allsmi.schema import ProcessSample, Workload

from .conftest import make_app, play_all, screen_text
from .fixtures import simulated_snapshots

WIDE = (240, 50)  # every column of the processes panel shows


def _job_cells(app) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """Pid -> the ``job / pod`` cell of each process row shown."""
    table = app.process_table
    return {int(str(cells[0])): str(cells[5]) for cells in table._values.values()}


async def test_a_simulated_process_shows_the_job_that_holds_its_device() -> None:
    """``nvidia 1`` of the simulated node is held by job 4931180 (the details panel says
    ``held by job 4931180``); its process carries no job id of its own: the column read ``-``."""
    snaps = simulated_snapshots(3, step=1.0, attribution=True)
    app, source = make_app(snaps)
    async with app.run_test(size=WIDE) as pilot:
        await play_all(app, source, pilot)
        dev = next(r.device for r in app.shown if r.device.vendor == "nvidia" and r.device.index == 1)
        assert [w.job_id for w in dev.workloads or ()] == ["4931180"]
        procs = dev.processes or ()
        assert procs and all(p.job_id is None and p.pod_uid is None for p in procs)
        key = next(r.key for r in app.shown if r.device is dev)
        app.device_table.move_cursor(row=[r.key for r in app.shown].index(key))
        await pilot.pause()
        assert app.selected == key
        assert "held by job 4931180" in screen_text(app)
        cells = _job_cells(app)
        assert cells and all(cells[p.pid] == "4931180" for p in procs), cells
        # every shown process of a device held by one pod shows that pod's name
        await pilot.press("p")
        await pilot.pause()
        cells = _job_cells(app)
        for ref in app.shown:
            works = ref.device.workloads or ()
            if len(works) == 1 and works[0].pod and not works[0].job_id:
                for p in ref.device.processes or ():
                    if p.pid in cells:
                        assert cells[p.pid] == works[0].pod, (ref.device.id, cells[p.pid])


async def test_the_real_attribution_path_names_the_pod_or_job_of_an_unlabelled_process() -> None:
    """A device held by one Kubernetes pod whose process sample has no pod uid (its cgroup not
    readable, or the processes read through Prometheus) shows that pod; of a device shared by
    two batch jobs, a process shows its own job id, and one matching neither job ``-`` (it
    cannot be told whose it is); a process's own job id always comes first."""
    snaps = simulated_snapshots(2, step=1.0)
    nvidia = [d for d in snaps[0].devices if d.vendor == "nvidia" and d.parent is None][:3]
    pod, shared, own = (d.id for d in nvidia)
    k8s = Workload("kubernetes", namespace="serving", pod="vllm-0", container="main")
    jobs = (Workload("hpc-job", job_id="701"), Workload("hpc-job", job_id="702"))

    def held(dev):  # type: ignore[no-untyped-def]
        if dev.id == pod:
            return replace(dev, workloads=(k8s,), processes=(ProcessSample(501, "ann", "serve", 1 << 30),))
        if dev.id == shared:
            return replace(dev, workloads=jobs, processes=(
                ProcessSample(502, "bob", "train", 2 << 30, job_id="702"),
                ProcessSample(503, "cid", "stray", 3 << 30)))
        if dev.id == own:
            return replace(dev, workloads=(Workload("hpc-job", job_id="900"),), processes=(
                ProcessSample(504, "dan", "other", 4 << 30, job_id="901"),
                ProcessSample(505, "eve", "cuda", 5 << 30, pod_uid="0c1d-uid")))
        return replace(dev, processes=())
    frames = [replace(s, devices=tuple(held(d) for d in s.devices)) for s in snaps]
    app, source = make_app(frames)
    app.process_scope = "all"
    async with app.run_test(size=WIDE) as pilot:
        await play_all(app, source, pilot)
        assert _job_cells(app) == {501: "vllm-0", 502: "702", 503: "-", 504: "901", 505: "900"}
        text = screen_text(app)
        assert "vllm-0" in text and "702" in text

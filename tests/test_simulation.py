"""The simulated cluster: deterministic, faithful to each vendor, and moving over time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from allsmi.backends.simulated import load_scenario, simulated_backends
from allsmi.collection.collector import Collector
from allsmi.schema import HEADLINE_SOURCES

T = 1_790_000_000.0


class _Node:
    """The simulated backends of a scenario, built and opened once, sampled at any moment."""

    def __init__(self, scenario: str = "mixed") -> None:
        self.now = T
        self.backends = list(simulated_backends(scenario, clock=lambda: self.now))
        for backend in self.backends:
            backend.open()

    def sample(self, at: float) -> dict[str, object]:
        self.now = at
        return {dev.id: dev for backend in self.backends for dev in backend.sample()}


def _sample_all(at: float, scenario: str = "mixed") -> dict[str, object]:
    return _Node(scenario).sample(at)


def test_two_processes_at_the_same_moment_agree() -> None:
    code = ("import json,sys; from allsmi.backends.simulated import simulated_backends\n"
            "out=[]\n"
            "for b in simulated_backends('mixed', clock=lambda: float(sys.argv[1])):\n"
            "    b.open(); out += [[d.id, d.utilization_percent, d.power_watts, d.energy_joules,"
            " d.memory_used_bytes, [p.pid for p in d.processes]] for d in b.sample()]\n"
            "print(json.dumps(out))")
    runs = [subprocess.run([sys.executable, "-c", code, str(T)], capture_output=True, text=True,
                           check=True, timeout=60).stdout for _ in range(2)]
    assert runs[0] == runs[1]
    assert len(json.loads(runs[0])) == 41


def test_values_move_smoothly_and_processes_come_and_go() -> None:
    node = _Node()
    series = [node.sample(T + 10 * i) for i in range(360)]  # one hour, every 10 s
    gpu = next(iter(series[0]))
    utils = [s[gpu].utilization_percent for s in series]
    assert len(set(utils)) > 50
    pid_sets = {tuple(p.pid for p in s[gpu].processes) for s in series}
    assert len(pid_sets) >= 2  # jobs changed within an hour
    temps = [s[gpu].temperature_celsius for s in series]
    assert max(abs(a - b) for a, b in zip(temps, temps[1:])) < 10  # thermal lag: no jumps


def test_energy_counter_is_the_integral_of_power() -> None:
    start, seconds, node = T, 1800, _Node()
    first = node.sample(start)
    integral = {k: 0.0 for k in first}
    prev = first
    for i in range(1, seconds + 1):
        cur = node.sample(start + i)
        for k, dev in cur.items():
            if dev.power_watts is not None and prev[k].power_watts is not None:
                integral[k] += (dev.power_watts + prev[k].power_watts) / 2
        prev = cur
    for k, dev in prev.items():
        if dev.energy_joules is not None:
            counted = dev.energy_joules - first[k].energy_joules
            assert abs(counted - integral[k]) / integral[k] < 0.005, k


def test_vendor_faithful_unknowns() -> None:
    devs = list(_sample_all(T).values())
    gaudi = [d for d in devs if d.backend == "gaudi"]
    assert gaudi and all(d.energy_joules is None for d in gaudi)  # hl-smi has no energy counter
    furiosa = [d for d in devs if d.vendor == "furiosa"]
    for d in furiosa:
        cores = d.details["core_utilization_percent"]
        assert len(cores) == 8
        assert abs(sum(cores) / 8 - d.utilization_percent) < 0.01
    mig_parent = next(d for d in devs if d.details.get("mig_mode") == "enabled")
    assert mig_parent.utilization_percent is None  # as nvidia-smi shows N/A in MIG mode
    children = [d for d in devs if d.parent == mig_parent.id]
    assert sum(c.memory_used_bytes for c in children) == mig_parent.memory_used_bytes


def test_fault_scenario_marks_device_lost_and_backend_errors() -> None:
    scenario = load_scenario("mixed-faults")
    at = scenario.epoch + 600 * 5000 + 30  # inside both the lost and the error windows
    collector = Collector(list(simulated_backends("mixed-faults", clock=lambda: at)), timeout_seconds=0.3)
    snap = collector.collect_once()
    collector.close()
    status = {b.name: b for b in snap.backends}
    assert status["rebellions"].status == "error" and "rbln" in status["rebellions"].message
    assert status["tenstorrent"].status == "timeout"
    lost = [d for d in snap.devices if d.health == "lost"]
    assert [d.index for d in lost] == [3]
    assert lost[0].power_watts is None and lost[0].utilization_percent is None


def test_backends_enabled_is_honoured_under_simulate(tmp_path: Path) -> None:
    """``[backends] enabled`` picks among the simulated backends as among the real ones."""
    import csv
    import io

    from .conftest import run_allsmi
    config = tmp_path / "config.toml"
    config.write_text('[backends]\nenabled = ["nvidia", "amd"]\n')
    out = run_allsmi("snapshot", "--simulate", "mixed", "--config", str(config), "--format", "json")
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    assert {d["vendor"] for d in snap["devices"]} == {"nvidia", "amd"}
    assert sorted(b["name"] for b in snap["backends"]) == ["amd", "nvidia"]
    # two hours replayed, not today's so far (up to a day's replay late in the day)
    bill = run_allsmi("export", "--simulate", "mixed", "--config", str(config),
                      "--since", "2026-11-02T09:00:00Z", "--until", "2026-11-02T11:00:00Z",
                      "--group-by", "vendor", timeout=300)
    assert bill.returncode in (0, 3), bill.stderr
    assert {row["vendor"] for row in csv.DictReader(io.StringIO(bill.stdout))} == {"nvidia", "amd"}


def test_doctor_counts_devices_and_partitions_apart() -> None:
    """``allsmi doctor`` says ``8 device(s) + 3 partition(s)``, as the dashboard says
    ``38 devices + 3 partitions``: a MIG slice is not a device of its own."""
    from .conftest import run_allsmi
    text = run_allsmi("doctor", "--simulate", "mixed")
    assert text.returncode == 0, text.stderr
    assert "nvidia       ok           8 device(s) + 3 partition(s)" in text.stdout
    doc = run_allsmi("doctor", "--simulate", "mixed", "--json")
    counts = {b["name"]: (b["devices"], b["partitions"]) for b in json.loads(doc.stdout)["backends"]}
    assert counts["nvidia"] == (8, 3) and counts["amd"] == (8, 0)
    assert sum(d for d, _ in counts.values()) == 38 and sum(p for _, p in counts.values()) == 3


def test_mixed_node_has_shared_gpus_whose_holders_differ_in_activity() -> None:
    """Fair shares have something to show: two users' processes on one GPU at different
    activity, which the used split bills differently while allocation stays equal."""
    from allsmi.backends.simulated import simulated_backends
    from allsmi.fairshare import split

    now = [1_790_000_000.0]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for b in backends:
        b.open()
    shared = []
    for _ in range(60):
        now[0] += 60.0
        for dev in (d for b in backends for d in b.sample()):
            users = {p.user for p in dev.processes or ()}
            if dev.vendor == "nvidia" and len(users) == 2 and not dev.parent:
                shared.append(dev)
    assert shared, "no simulated GPU was shared by two users in an hour"
    dev = shared[0]
    acts = [p.utilization_percent for p in dev.processes]
    assert all(a is not None for a in acts) and acts[0] != acts[1]
    sp = split(dev)
    if not dev.workloads:
        assert sp.allocation_method == "equal" and sp.usage_method == "activity"
        used = sorted(w for _, w in sp.used)
        assert used[0] < used[1] and {w for _, w in sp.allocated} == {0.5}
    # Vendors whose tools give no per-process figure carry none in the simulation either.
    for b in backends:
        for d in b.sample():
            if d.backend in ("gaudi", "furiosa", "tenstorrent") or d.parent:
                assert all(p.utilization_percent is None for p in d.processes or ())


def test_an_activity_that_is_the_headline_under_another_name_equals_it_stalled_or_not() -> None:
    """engine_time, pe_busy and core_busy are the vendors' headline figures (docs/activity.md,
    ``allsmi.schema.HEADLINE_SOURCES``): every
    simulated device that names one gives the same value, over an hour of its jobs and stalls;
    sm_active devices still show their stalls below the headline."""
    node = _Node()
    same = below = 0
    for step in range(0, 3600, 150):
        for dev in node.sample(T + step).values():
            source = getattr(dev, "compute_active_source")
            active, util = getattr(dev, "compute_active_percent"), getattr(dev, "utilization_percent")
            if source in HEADLINE_SOURCES and util is not None:
                assert active == util, (dev, step)
                same += 1
            elif source == "sm_active" and util is not None and active is not None \
                    and active < util - 20:
                below += 1
    assert same > 100 and below > 0, (same, below)

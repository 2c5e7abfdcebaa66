"""The simulated backend keeps what is the same for a whole job (the memory its unit keeps for
itself, the job's share of the rest) from the job's first sample on: the loads of every
sample are those worked out afresh, and the share is drawn once per job, not per sample."""

from __future__ import annotations

from allsmi.backends.simulated import simulated_backends

T0 = 1_790_000_000.0
CYCLES = 180  # three hours: several jobs per unit


class _Counting:
    """A unit's job draws, counting what :meth:`SimulatedBackend._load` asks of them."""

    def __init__(self, jobs: object) -> None:
        self.jobs = jobs
        self.asked: list[tuple[str, int]] = []

    def draw(self, scenario, key, job):  # type: ignore[no-untyped-def]
        self.asked.append((key, job))
        return self.jobs.draw(scenario, key, job)  # type: ignore[attr-defined]

    def processes(self, *args):  # type: ignore[no-untyped-def]
        return self.jobs.processes(*args)  # type: ignore[attr-defined]


def test_a_job_s_constants_are_kept_for_its_run_with_the_loads_of_working_them_out_afresh(
        ) -> None:
    now = [T0]
    kept = simulated_backends("mixed", clock=lambda: now[0])
    for backend in kept:
        backend.open()
        backend._jobs = _Counting(backend._jobs)  # type: ignore[attr-defined,assignment]
    busy = compared = 0
    for _ in range(CYCLES):
        for backend in kept:
            fresh = simulated_backends(backend.scenario, clock=lambda: now[0])  # no memory
            [afresh] = [b for b in fresh if b._target == backend._target]
            afresh.open()
            s = now[0] - backend.scenario.epoch
            for unit in backend._units:
                for one in unit.children or (unit,):
                    args = (backend.scenario, one.cycle, one, s, one.memory_total)
                    load = backend._load(*args)
                    assert load == afresh._load(*args)
                    compared += 1
                    busy += load[4] < one.cycle.active  # (a job runs: its share is read)
        now[0] += 60.0
    assert compared > CYCLES * 30
    asked = [pair for backend in kept for pair in backend._jobs.asked]  # type: ignore[attr-defined]
    assert len(asked) == len(set(asked))  # once per job
    assert busy > 10 * len(asked)  # (not once per sample of it: about 14 a job)


def test_a_job_s_draws_hash_its_unit_once_and_draw_what_unit_hash_draws() -> None:
    from allsmi.backends.simulated.model import unit_hash, unit_hasher

    for parts in [("nvidia:node-a:3", 12345), ("amd|x", -1), ("", 0), ("gpu", "1.5", None)]:
        draw = unit_hasher(*parts)
        for tag in ("user", "shared", "pid", "", "|", "ünï"):
            assert draw(tag) == unit_hash(*parts, tag)
            assert 0.0 <= draw(tag) < 1.0

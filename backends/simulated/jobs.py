"""The simulated jobs' processes: what each job draws once for its whole run, and the processes
it shows at each sample (a pure function of the unit, the job number and the sample's load)."""

from __future__ import annotations

from typing import Any

from allsmi.schema.samplecopy import deriver
from allsmi.schema import ProcessSample

from .model import unit_hasher
from .scenario import Scenario

MIB = 1024**2
#: The memory of a job's helper process (one that does no compute).
_HELPER = 512 * MIB
#: ``derive(proc, memory_bytes=..., utilization_percent=...)``'s maker, looked up once (a
#: replayed month moves a job's processes 800,000 times).
_MOVED = deriver(ProcessSample, ("memory_bytes", "utilization_percent"))


class JobDraws:
    """Each job's draws, remembered: a job spans many samples, and hashing its draws again at
    every one of them was a tenth of a simulated bill's time."""

    #: Jobs remembered; beyond it the memory starts afresh.
    MEMORY = 4096

    def __init__(self) -> None:
        self._jobs: dict[tuple[str, int], tuple[Any, ...]] = {}
        #: Per unit, its last processes and what they were made of: a job's processes are the
        #: same from one sample to the next once its memory has ramped up, wherever the real
        #: tool reports no per-process activity (which moves every sample).
        self._last: dict[str, tuple[tuple[Any, ...], tuple[ProcessSample, ...]]] = {}
        #: Per unit, its current job's processes as first made (their names cleaned once):
        #: the job's later samples change only their memory and utilization.
        self._first: dict[str, tuple[int, tuple[ProcessSample, ...], Any, bool]] = {}

    def draw(self, scenario: Scenario, key: str, job: int) -> tuple[Any, ...]:
        """(memory fraction, pid, user, command, the other user and command and the main
        process's part when it shares its device or ``None``, whether a helper runs beside it)
        of job number ``job`` of the load unit ``key``."""
        found = self._jobs.get((key, job))
        if found is not None:
            return found
        h = unit_hasher(key, job)
        users, commands = scenario.users, scenario.commands
        first = int(h("user") * len(users))
        shared = None
        if h("shared") < 0.35 and len(users) > 1:
            shared = (users[(first + 1 + int(h("user2") * (len(users) - 1))) % len(users)],
                      commands[int(h("cmd2") * len(commands))], round(0.55 + 0.4 * h("split"), 3))
        found = (0.35 + 0.55 * h("mem"), 1000 + int(h("pid") * 4_000_000), users[first],
                 commands[int(h("cmd") * len(commands))], shared,
                 shared is None and h("pair") < 0.3)
        if len(self._jobs) >= self.MEMORY:
            self._jobs.clear()
        self._jobs[(key, job)] = found
        return found

    def processes(self, scenario: Scenario, key: str, job: int, used: int, util: float,
                  activity: bool) -> tuple[ProcessSample, ...]:
        """The job's processes. About a third of jobs share their device with another user's
        process, each with its own part of the device's activity (so that fair shares bill
        them differently); about a third run a helper of the same user that does no compute.
        ``activity``: whether the real tool reports per-process utilization."""
        made = (job, used, util if activity else None)
        last = self._last.get(key)
        if last is not None and last[0] == made:
            return last[1]
        procs = self._processes(scenario, key, job, used, util, activity)
        self._last[key] = (made, procs)
        return procs

    def _processes(self, scenario: Scenario, key: str, job: int, used: int, util: float,
                   activity: bool) -> tuple[ProcessSample, ...]:
        """The job's processes now (see :meth:`processes`): the job's first processes with
        their memory and utilization of now, which is what building them afresh gives
        (tests/test_replay_invariants.py), without cleaning their names again."""
        first = self._first.get(key)
        if first is not None and first[0] == job:
            # _parts' memory and utilization of each process, written out with the job's draw
            # kept beside its first processes (a replayed month moves a job's processes
            # 800,000 times: no draw looked up, no list of parts made each time)
            _, procs, shared, pair = first
            if shared is not None:
                main = shared[2]
                mine = int(used * main) // MIB * MIB
                return (_MOVED(procs[0], {"memory_bytes": mine, "utilization_percent":
                                          round(util * main, 2) if activity else None}),
                        _MOVED(procs[1], {"memory_bytes": used - mine, "utilization_percent":
                                          round(util * (1.0 - main), 2) if activity else None}))
            if pair:
                return (_MOVED(procs[0], {"memory_bytes": max(used - _HELPER, 0),
                                          "utilization_percent":
                                          round(util * 1.0, 2) if activity else None}),
                        _MOVED(procs[1], {"memory_bytes": _HELPER, "utilization_percent":
                                          round(util * 0.0, 2) if activity else None}))
            return (_MOVED(procs[0], {"memory_bytes": used, "utilization_percent":
                                      round(util * 1.0, 2) if activity else None}),)
        drawn = self.draw(scenario, key, job)
        procs = tuple(ProcessSample(pid, user, command, mem, utilization_percent=pct)
                      for pid, user, command, mem, pct in _parts(drawn, used, util, activity))
        self._first[key] = (job, procs, drawn[4], drawn[5])
        return procs


def _parts(drawn: tuple[Any, ...], used: int, util: float, activity: bool
           ) -> list[tuple[int, str, str, int, float | None]]:
    """(pid, user, command, memory, utilization) of each process of the job whose draw
    (:meth:`JobDraws.draw`) is ``drawn``: the same processes for the whole job, whatever its
    memory and load."""
    _, pid, user, command, shared, pair = drawn
    pct = lambda part: round(util * part, 2) if activity else None  # noqa: E731
    if shared is not None:
        other, other_command, main = shared
        mine = int(used * main) // MIB * MIB
        return [(pid, user, command, mine, pct(main)),
                (pid + 7, other, other_command, used - mine, pct(1.0 - main))]
    if pair:
        helper = _HELPER
        return [(pid, user, command, max(used - helper, 0), pct(1.0)),
                (pid + 1, user, "python -m torch.distributed.run --monitor", helper, pct(0.0))]
    return [(pid, user, command, used, pct(1.0))]

"""Billing a simulation: the scenario replayed over a past window into a temporary ledger, which
``allsmi export --simulate`` and ``allsmi idle --simulate`` then read like any other.

The replay is cut into chunks (six hours to a day, :data:`CHUNK_SECONDS`) billed side by side
in worker processes (one per CPU this process may use, up to 8): the simulation is a pure function of
time, so a chunk replayed on its own books exactly what the same stretch of one long replay
books (see :func:`simulated_ledger`). The command writes the chunks' intervals into the ledger
in order. When it samples, how the ledger's rows are cut and which chunk replays what:
:mod:`allsmi.cli.simulate.grid`.
"""

from __future__ import annotations

import gc
import math
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from allsmi.cli.billing.reportcmd import Failed
from allsmi.cli.simulate.grid import (CHUNKS_PER_WORKER, ROW_SECONDS, chunk_tasks, declared_interval,
                                replay_chunks, replay_step)

__all__ = ["CHUNKS_PER_WORKER", "CHUNK_SECONDS", "MAX_WORKERS", "ROW_SECONDS", "replay_chunks",
           "replay_grid", "replay_span", "simulated_ledger"]

#: The shortest and the longest chunk one worker replays at a time, in simulated seconds (a
#: multiple of the sampling step and of the rows' grid is used). Each chunk builds its own
#: collector and recorder (milliseconds) and sends its intervals back at once: a window is cut
#: into :data:`CHUNKS_PER_WORKER` chunks per worker within these bounds (a day: four chunks of
#: six hours; a month: a chunk a day, so that a worker slowed by other work holds up little).
CHUNK_SECONDS, MAX_CHUNK_SECONDS = 6 * 3600, 86400
#: Worker processes at most, whatever the CPUs (each holds a replay's state, tens of MiB).
MAX_WORKERS = 8


@dataclass(frozen=True)
class _Replay:
    """What every chunk of one replay shares (handed to the workers once, by fork)."""

    scenario: Any
    config: Any
    settings: Any
    step: float
    directory: str
    declarations: Any
    impersonate: Any
    """The installed backend class each simulated backend takes its declarations from, looked
    up once (a look-up reads the installed distributions' entry points)."""


def _replay_chunk(job: _Replay, first: float, last: float, lo: float = -math.inf,
                  hi: float = math.inf, strip: bool = False) -> tuple[list[Any], float]:
    """The intervals of samples ``first, first + step, ...`` and ``last`` (raises
    ``ConfigError``) that start from ``lo`` to before ``hi``, and the time up to which they
    are complete (the last sample, or ``hi`` before it): a window whose length is not a
    multiple of the step ends with a shorter increment, not short of its end. The rows before
    ``lo`` and from ``hi`` on are the neighbouring chunks' (which replay the increments across
    ``lo`` and ``hi`` too: :func:`allsmi.cli.simulate.grid.chunk_tasks`). A row that starts before
    ``first`` (the window's first, on the grid before the window starts) is booked at
    ``first``; with ``strip``, the last sample's memory is not booked (it belongs to the row
    that sample opens, outside the window)."""
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.attribution import build_attributor
    from allsmi.backends.simulated import simulated_backends
    from allsmi.cli.simulate.collect import ReplayCollector
    from allsmi.collection.host import HostSampler
    from allsmi.collection.registry import enabled_only
    from allsmi.schema import HostSample

    class Gathering(LedgerRecorder):
        """A recorder that hands its completed intervals back instead of storing them (it
        opens no ledger file)."""

        def _open(self, path: Any) -> Any:
            return _Nowhere()

        def _store(self, records: list[Any], now: float) -> None:
            gathered.extend(records)
            self.intervals_written += len(records)

    class PastHost(HostSampler):
        """The host of a replayed past: its name (what the ledger records); its CPU and memory
        then are unknown (``None``), not this machine's now, and are not read every cycle."""

        def sample(self) -> HostSample:
            return HostSample(hostname=self.hostname)

    gathered: list[Any] = []
    step, config = job.step, job.config
    now, sampled = [first], first - step
    clock = lambda: now[0]  # noqa: E731
    recorder = Gathering(job.directory, config, settings=job.settings, max_gap_seconds=3 * step)
    try:
        # The simulated pods and jobs (and any real source configured) are billed too.
        attributor = build_attributor(config, simulate=True, declarations=job.declarations,
                                      inline=True)
        backends = enabled_only(simulated_backends(job.scenario, clock=clock,
                                                   impersonate=job.impersonate),
                                config.backends_enabled)
        for backend in backends:  # (what no bill reads is not computed: a replay is a bill)
            backend.bill_only = True
            backend.reuse_samples = True  # (and no sample is kept past its cycle)
        collector = ReplayCollector(backends, config, clock=clock,
                                    timeout_seconds=config.backend_timeout_seconds,
                                    attributor=attributor, host_sampler=PastHost(), inline=True,
                                    history_size=1,  # (the recorder reads each snapshot once)
                                    direct=not job.scenario.faults)
        stripping = [False]
        collector.subscribe(lambda snapshot: recorder.on_snapshot(
            _without_memory(snapshot) if stripping[0] else snapshot))
        collector.waiting.explain = False  # (the ledger books the reasons, not their evidence)
        # No collection of reference cycles while the chunk replays: a day's replay leaves a
        # few hundred objects in cycles, while the collector traversed the intervals the chunk
        # keeps (tens of thousands of objects, growing) again and again: 8 % of a replay, even
        # with a young generation of 50,000 allocations. Left to the next collection after it.
        enabled = gc.isenabled()
        gc.disable()
        try:
            while now[0] <= last:
                stripping[0] = strip and now[0] == last
                collector.collect_once()
                sampled = now[0]
                if now[0] == last:
                    break
                now[0] = min(now[0] + step, last)
        finally:
            if enabled:
                gc.enable()
            collector.close()
    finally:
        recorder.close()
    gathered = [r if r.start >= first else replace(r, start=int(first))
                for r in gathered if lo <= r.start < hi]
    return gathered, min(sampled, hi)


def _without_memory(snapshot: Any) -> Any:
    """``snapshot`` with no device's memory in use (the rest of it the same objects)."""
    return replace(snapshot, devices=tuple(replace(dev, memory_used_bytes=None)
                                           for dev in snapshot.devices))


class _Nowhere:
    """The ledger of a recorder that keeps its intervals (see ``Gathering``): nothing to close."""

    def close(self) -> None:
        pass


def _work(*task: Any) -> tuple[list[Any], float]:
    """In a worker process: :func:`_replay_chunk` of the replay it serves, its intervals as
    tuples (:mod:`allsmi.cli.simulate.rows`)."""
    from allsmi.cli.simulate.rows import packed
    assert _JOB is not None
    records, sampled = _replay_chunk(_JOB, *task)
    return packed(records), sampled


def _received(future: Any) -> tuple[list[Any], float]:
    """The intervals of a chunk a worker replayed (``future``'s), as records to write."""
    from allsmi.cli.simulate.rows import unpacked
    rows, sampled = future.result()
    return unpacked(rows), sampled


def _start_worker(job: _Replay) -> None:
    """A worker process serves ``job`` (inherited by the fork, never pickled) and leaves signals
    to the command: Ctrl-C (sent to the whole process group) is ignored, and the termination
    signal the command sends when it unwinds ends it at once (the command's own handlers,
    inherited too, would unwind the worker instead)."""
    import signal
    global _JOB
    _JOB = job
    # A worker collects no reference cycles (see _replay_chunk): the intervals it keeps until
    # they are sent back would be traversed at each chunk's end, and a chunk leaves only a few
    # hundred objects in cycles (a month's worker, some thousands: kept until it ends).
    gc.disable()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _stop(pool: Any) -> None:
    """End ``pool``'s workers at once (on a failure or a signal), not after their chunks."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()


_JOB: _Replay | None = None
"""The replay a worker process serves (see :func:`_start_worker`)."""


def _workers(chunks: int) -> int:
    """Worker processes for ``chunks``: one per CPU this process may run on, at most one per
    chunk and :data:`MAX_WORKERS`; 1 (this process) where processes cannot be forked."""
    import multiprocessing
    if "fork" not in multiprocessing.get_all_start_methods():  # pragma: no cover - not POSIX
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, chunks, MAX_WORKERS))


def _row(window: Any, grid: int = ROW_SECONDS) -> int:
    """The scratch ledger's declared interval: as long as both edges of the window allow (a
    divisor of a quarter hour; its rows are longer: :mod:`allsmi.cli.simulate.grid`)."""
    return declared_interval(window.start_unix, window.end_unix, grid)


def _declared(path: str) -> int:
    """The declared interval of the ledger at ``path`` (one a replay made)."""
    from allsmi.accounting.ledger.store import Ledger
    with Ledger(path, readonly=True) as ledger:
        return ledger.interval_seconds


def replay_span(window: Any) -> tuple[float, float]:
    """(first, last sample) of a replay of ``window``: the whole seconds the export bills
    (``start_unix``, ``end_unix``: the ledger's query and the coverage count them), never past
    now. The last sample is the window's end, however the window's length falls on the step."""
    return float(window.start_unix), float(min(window.end_unix, math.floor(time.time())))


def replay_grid(window: Any, config: Any) -> tuple[float, int]:
    """(seconds between samples, the scratch ledger's declared interval) of a replay of
    ``window`` (raises ``ConfigError`` for a bad ``[ledger]``)."""
    from allsmi.accounting.settings import ledger_settings
    return replay_step(ledger_settings(config, path_flag="replay")), _row(window)


def simulated_ledger(scenario: Any, window: Any, config: Any, directory: str,
                     step: float | None = None, row_seconds: int | None = None,
                     chunk_seconds: int = CHUNK_SECONDS, workers: int | None = None,
                     progress: Any = None, into: tuple[str, float] | None = None) -> str:
    """Replay ``scenario`` over the window (never past now) into a ledger in ``directory``.

    Simulated values are a pure function of time, so any past window can be
    recorded after the fact, exactly as a recorder running then would have. It is
    sampled at the ledger's resolution (one cycle per ledger interval, not per
    second: the bill's totals stay within 0.5 % of a 20 s replay, which
    tests/accounting checks), and the simulated backends and pods are called in the
    replaying thread (``inline``): a pure function needs no worker thread and no deadline.

    The window is replayed in chunks of at least ``chunk_seconds`` (see :data:`CHUNK_SECONDS`)
    by ``workers`` processes (default: one per usable CPU, up to :data:`MAX_WORKERS`; 1 replays
    in this process). The chunks are cut between rows, and each starts with the sample before
    its first row (the sample its predecessor ended with, where the cut is on the sampling
    grid), so the increments between samples, the holders of each increment (those of the
    sample before) and every interval's samples are those of one long replay, and so are the
    totals, to the millisecond (tests/accounting checks that too).

    The temporary ledger is thrown away when the command ends, so it is kept for the
    window alone: its rows are quarter hours, cut where the window starts and ends (whatever
    its edges: :mod:`allsmi.cli.simulate.grid`; the bill counts the rows that start inside the
    window, so none straddles its edges), with no checkpoints, no pruning and no fsync. The
    same recorder sums the same samples into fewer rows: the totals are those of
    one-interval rows, to the millisecond rounding of each row. ``step`` (seconds between
    samples) and ``row_seconds`` (the rows' grid, a divisor of 900) override both choices, as
    the tests' reference replay does. ``progress`` (:class:`allsmi.cli.progress.Progress`) is
    told the number of chunks and each one written.

    ``into`` (the path of a ledger this function made for a later window that starts where
    this one ends, and the time it was replayed up to) adds this window's intervals to that
    ledger, as if one replay had run from this window's start (the caller checks that the
    two share their sampling grid and rows: :func:`allsmi.cli.simulate.reuse.extends`); it returns
    that path.
    """
    from allsmi.collection import registry
    from allsmi.accounting.ledger.store import Ledger
    from allsmi.accounting.settings import ledger_settings
    from allsmi.attribution import build_attributor
    from allsmi.config import ConfigError

    start, end = replay_span(window)
    path = into[0] if into else f"{directory}/ledger.db"
    declarations = registry.declarations()
    try:  # one cycle per ledger interval, at least 20 s apart
        configured = ledger_settings(config, path_flag=path)
        # a bad [attribution] fails here, once (this also loads what the workers run)
        build_attributor(config, simulate=True, declarations=declarations, inline=True).close()
        from allsmi.hostactivity.settings import activity_settings
        activity_settings(config)  # and a bad [activity]
    except ConfigError as exc:
        raise Failed("config", str(exc), 2) from None
    step = step or replay_step(configured)
    grid = row_seconds or ROW_SECONDS  # (the recorder's rows, cut at the window's edges)
    row = _declared(into[0]) if into else _row(window, grid)
    job = _Replay(scenario, config, replace(configured, interval_seconds=grid, checkpoint_seconds=0,
                                            retention_days=None, rollup_retention_days=None),
                  step, directory, declarations,
                  {name: registry.impersonated(name) for name in scenario.backend_names()}.get)
    count = workers or _workers(max(1, int((end - start) // chunk_seconds)))
    length = min(max(chunk_seconds, MAX_CHUNK_SECONDS),
                 max(chunk_seconds, (end - start) / (CHUNKS_PER_WORKER * count)))
    # The last chunks (one per worker) are cut finer: the workers run out of work together,
    # not one of them replaying a whole chunk while the others wait (a month: 31 chunks of a
    # day for 2 workers left one idle for most of a day's replay).
    chunks = replay_chunks(start, end, step, grid, length, tail=count, shortest=chunk_seconds)
    # (extending a later replay: its first sample is this window's last, whose row that
    # replay booked)
    tasks = chunk_tasks(chunks, start, end, step, grid, window.end_unix, final=not into)
    if progress is not None:
        progress.set_total(len(tasks))
    pool = None
    if count > 1 and len(chunks) > 1:
        import collections
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        import allsmi.accounting.recorder  # noqa: F401 - loaded once, before the fork
        import allsmi.backends.simulated  # noqa: F401
        import allsmi.cli.simulate.collect  # noqa: F401 - (and the collector)
        import allsmi.cli.simulate.rows  # noqa: F401
        import allsmi.hostactivity.simulated  # noqa: F401 - (the waiting step's, first cycle)
        import allsmi.collection.waiting  # noqa: F401
        pool = ProcessPoolExecutor(count, multiprocessing.get_context("fork"),
                                   initializer=_start_worker, initargs=(job,))
    try:
        if pool is not None:
            gc.freeze()  # what the workers inherit is never collected there (nor copied for it)
            try:  # (the workers are forked by the first submit)
                futures = collections.deque(pool.submit(_work, *task) for task in tasks)
            finally:
                gc.unfreeze()
            # in order, each chunk's intervals let go of once written
            results = (_received(futures.popleft()) for _ in range(len(tasks)))
        else:
            results = (_replay_chunk(job, *task) for task in tasks)
        ledger = Ledger(path, interval_seconds=row)  # (opened after the fork: never shared)
        enabled = gc.isenabled()
        gc.disable()  # (each chunk's intervals are freed once written: no cycles among them)
        try:
            ledger.scratch()  # deleted on exit: no fsync per write
            for records, sampled in results:
                ledger.write(records, sampled)
                if progress is not None:
                    progress.advance()
            if into:  # the roll-ups of the later replay's quarters, hours and days again
                ledger.write([], into[1])
        finally:
            if enabled:
                gc.enable()
            ledger.close()
    except BaseException as exc:
        if pool is not None:
            _stop(pool)
        from concurrent.futures.process import BrokenProcessPool
        if isinstance(exc, BrokenProcessPool):
            raise Failed("source", "a worker process of the simulated bill ended unexpectedly "
                         "(killed?); nothing was written") from None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return path

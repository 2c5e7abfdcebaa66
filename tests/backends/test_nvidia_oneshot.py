"""What a one-shot ``allsmi snapshot`` asks of the NVIDIA backend's start: its first cycle's
readers and its device model (issue 36, target 3; ``tests/test_snapshot_imports.py`` runs the
whole snapshot)."""

from __future__ import annotations

from allsmi.backends.nvidia import schedule

from .nvml_fake import FakeNvml, fleet
from .test_nvidia_schedule import opened, reader_threads


def test_fast_reads_never_make_the_pool_slow_first_reads_start_threads_that_end(monkeypatch, backends):
    """Fast reads run on the schedule's first reader, cycle after cycle: the pool never makes
    its executor (nor imports ``concurrent.futures``). Where the first cycle's reads are slow
    (past the hedge) the GPUs left go to threads of their own, which end with the cycle (a
    one-shot's exit waits for no reader stuck in the library); a later slow cycle makes the
    executor and keeps its threads."""
    backend = opened(FakeNvml(fleet(4)), monkeypatch, backends)
    pool = backend._pool
    assert pool is not None and pool.executor is None
    seen = reader_threads(monkeypatch)
    for _ in range(3):
        assert [d.health for d in backend.sample()] == ["ok"] * 4
    assert pool.executor is None and len(set(seen)) == 1

    slow = opened(FakeNvml(fleet(4)), monkeypatch, backends)
    monkeypatch.setattr(schedule, "HEDGE_SECONDS", 0.0)  # every cycle past the hedge
    assert [d.health for d in slow.sample()] == ["ok"] * 4
    assert slow._pool.executor is None  # the first cycle's extra readers: threads of their own
    seen.clear()
    for _ in range(3):
        assert [d.health for d in slow.sample()] == ["ok"] * 4
    assert slow._pool.executor is not None
    assert set(seen) <= {t.ident for t in slow._pool.executor._threads}, "read on the kept pool"


def test_the_device_models_mutable_records_compile_only_their_init() -> None:
    """Nothing compares or prints a GPU, a MIG instance, a GPM target or a utilization state;
    ``@dataclass`` compiled ``__eq__`` and ``__repr__`` for each at every start-up (about 6 M
    instructions of a one-shot snapshot's 430 M)."""
    from allsmi.backends.nvidia.devices import Gpu
    from allsmi.backends.nvidia.gpm import GpmTarget
    from allsmi.backends.nvidia.mig import Mig
    from allsmi.backends.nvidia.procutil import UtilizationState
    for cls in (Gpu, Mig, GpmTarget, UtilizationState):
        assert cls.__eq__ is object.__eq__ and cls.__repr__ is object.__repr__, cls

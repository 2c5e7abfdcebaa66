"""What a one-shot ``allsmi snapshot`` asks of the NVIDIA backend's start: its first cycle's
readers and its device model (issue 36, target 3; ``tests/test_snapshot_imports.py`` runs the
whole snapshot)."""

from __future__ import annotations

from allsmi.backends.nvidia import schedule

from .nvml_fake import FakeNvml, fleet
from .test_nvidia_schedule import opened, reader_threads


def test_the_first_cycle_reads_on_threads_of_its_own_the_next_on_a_kept_pool(monkeypatch, backends):
    """A one-shot snapshot (one cycle) never makes the executor (nor imports
    ``concurrent.futures``); a second cycle makes it, and later cycles reuse its threads."""
    monkeypatch.setattr(schedule, "HEDGE_SECONDS", 30.0)
    backend = opened(FakeNvml(fleet(4)), monkeypatch, backends)
    pool = backend._pool
    assert pool is not None and pool.executor is None
    seen = reader_threads(monkeypatch)
    assert [d.health for d in backend.sample()] == ["ok"] * 4
    assert pool.executor is None and len(set(seen)) == 1
    kept = set()
    for _ in range(3):
        seen.clear()
        assert [d.health for d in backend.sample()] == ["ok"] * 4
        kept.update(seen)
    assert pool.executor is not None and len(kept) == 1
    assert {t.ident for t in pool.executor._threads} == kept


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

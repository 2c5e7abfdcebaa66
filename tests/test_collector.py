"""The collector: isolation between backends, timeouts, no leaked threads or children."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from allsmi.backend_api import Backend, BackendError, BackendUnavailable, ProbeResult
from allsmi.backends._common.runner import ToolTimeout, run_tool
from allsmi.collection.collector import Collector
from allsmi.config import parse_config
from allsmi.schema import DeviceSample


class _Quick(Backend):
    name = "quick"
    vendor = "nvidia"

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.opened = 0
        self.calls = 0

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        self.opened += 1

    def sample(self) -> list[DeviceSample]:
        self.calls += 1
        return [DeviceSample(id=f"GPU-{i}", vendor="nvidia", kind="gpu", backend=self.name, index=i,
                             name="Quick GPU", health="ok", utilization_percent=10.0 * i)
                for i in range(2)]


class _Hang(Backend):
    """Hangs in sample() until closed, like a stuck vendor call that close() can abort."""

    name = "hang"
    vendor = "amd"

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> list[DeviceSample]:
        self.release.wait(60)
        raise BackendError("aborted")

    def close(self) -> None:
        self.release.set()


class _HangingTool(Backend):
    """Runs a vendor tool that never answers; the tool timeout kills it."""

    name = "hangtool"
    vendor = "intel"

    def __init__(self, script: Path) -> None:
        super().__init__(timeout_seconds=0.5)
        self.script = script

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> list[DeviceSample]:
        try:
            run_tool([str(self.script)], timeout=self.timeout_seconds)
        except ToolTimeout as exc:
            raise BackendError(str(exc)) from exc
        return []


class _Absent(Backend):
    name = "absent"

    def probe(self) -> ProbeResult:
        return ProbeResult(False, "libvendor.so not found")

    def open(self) -> None:
        raise BackendUnavailable("never")

    def sample(self) -> list[DeviceSample]:
        raise AssertionError("sample() must not be called on an unavailable backend")


class _Buggy(Backend):
    name = "buggy"

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> list[DeviceSample]:
        raise ZeroDivisionError("oops")


def _eventually(condition, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``condition()`` turns true within ``timeout`` (polled; a loaded machine is slow)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _no_threads_left() -> bool:
    return _eventually(lambda: _threads() == set(), timeout=10.0)


def _threads() -> set[str]:
    # Only the collector's own threads: other suites' helpers (a dashboard's query pool) may
    # still be winding down and are not this module's concern.
    own = ("allsmi-backend-", "allsmi-collector", "allsmi-gaudi-")
    return {t.name for t in threading.enumerate() if t.name.startswith(own)}


def test_hung_backend_times_out_while_others_report() -> None:
    quick, hang = _Quick(), _Hang()
    collector = Collector([quick, hang], timeout_seconds=0.5)
    started = time.monotonic()
    snap = collector.collect_once()
    elapsed = time.monotonic() - started
    assert elapsed < 1.5, "the hung backend held the cycle past its timeout"
    status = {b.name: b for b in snap.backends}
    assert status["quick"].status == "ok"
    assert status["hang"].status == "timeout"
    assert "0.5" in status["hang"].message
    assert [d.id for d in snap.devices] == ["GPU-0", "GPU-1"]
    # the next cycle does not pile up another call onto the hung one
    snap2 = collector.collect_once()
    assert {b.name: b.status for b in snap2.backends} == {"quick": "ok", "hang": "timeout"}
    assert "still running" in {b.name: b for b in snap2.backends}["hang"].message
    assert quick.calls == 2 and quick.opened == 1
    collector.close()
    assert _no_threads_left(), f"collector left backend threads behind: {_threads()}"


def test_hanging_tool_child_is_killed_and_reaped(tmp_path: Path) -> None:
    script = tmp_path / "hl-smi"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    script.chmod(0o755)
    collector = Collector([_Quick(), _HangingTool(script)], timeout_seconds=2.0)
    started = time.monotonic()
    snap = collector.collect_once()
    assert time.monotonic() - started < 2.0
    status = {b.name: b for b in snap.backends}
    assert status["hangtool"].status == "timeout"  # the tool's own timeout, reported as such
    assert "did not finish within 0.5 s" in status["hangtool"].message
    assert len(snap.devices) == 2
    collector.close()
    me = psutil.Process()
    assert [c for c in me.children(recursive=True) if "hl-smi" in " ".join(c.cmdline())] == []
    assert _threads() == set()


def test_unavailable_and_buggy_backends_become_status_not_crash() -> None:
    collector = Collector([_Absent(), _Buggy(), _Quick()], timeout_seconds=1.0)
    snap = collector.collect_once()
    collector.close()
    status = {b.name: b for b in snap.backends}
    assert status["absent"].status == "unavailable"
    assert status["absent"].message == "libvendor.so not found"
    assert status["buggy"].status == "error"
    assert "ZeroDivisionError" in status["buggy"].message
    assert status["quick"].status == "ok"


def test_resource_groups_assigned_and_history_bounded() -> None:
    config = parse_config('[groups.train]\nlabels = { team = "ml" }\n'
                          '[[rules]]\nresource_group = "train"\nindex = "1"\n')
    collector = Collector([_Quick()], config, timeout_seconds=1.0, history_size=3)
    for _ in range(5):
        snap = collector.collect_once()
    collector.close()
    groups = {d.id: (d.resource_group, dict(d.labels)) for d in snap.devices}
    assert groups == {"GPU-0": ("default", {}), "GPU-1": ("train", {"team": "ml"})}
    assert len(collector.history) == 3
    assert collector.history[-1] is collector.latest


def test_cycles_never_overlap_and_background_loop_runs() -> None:
    quick = _Quick()
    collector = Collector([quick], interval_seconds=0.05, timeout_seconds=1.0)
    seen: list[float] = []
    collector.subscribe(lambda s: seen.append(time.monotonic()))
    collector.subscribe(lambda s: 1 / 0)  # a failing subscriber must not stop the loop
    collector.start()
    assert collector.wait_for_first(5) is not None
    threads = [threading.Thread(target=collector.collect_once) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _eventually(lambda: len(seen) >= 5), f"the background loop ran {len(seen)} cycles"
    collector.close()
    assert quick.calls == len(seen)  # each cycle made exactly one call: none overlapped
    assert _no_threads_left(), _threads()


@pytest.mark.parametrize("scenario", ["mixed-faults"])
def test_simulated_hang_is_isolated(scenario: str) -> None:
    from allsmi.backends.simulated import simulated_backends
    collector = Collector(list(simulated_backends(scenario)), timeout_seconds=0.5)
    started = time.monotonic()
    snap = collector.collect_once()
    assert time.monotonic() - started < 1.5
    status = {b.name: b.status for b in snap.backends}
    assert status["tenstorrent"] == "timeout"
    assert status["nvidia"] == "ok" and status["amd"] == "ok"
    assert not [d for d in snap.devices if d.vendor == "tenstorrent"]
    collector.close()
    assert _no_threads_left(), _threads()


class _FlakyOpen(Backend):
    """open() starts something, then fails; the runner must close it before retrying."""

    name = "flaky"
    vendor = "amd"

    def __init__(self) -> None:
        super().__init__()
        self.live = 0  # resources open() started and close() has not released
        self.attempts = 0

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        self.attempts += 1
        self.live += 1
        if self.attempts < 3:
            raise BackendError(f"init failed (attempt {self.attempts})")

    def sample(self) -> list[DeviceSample]:
        return [DeviceSample(id="x", vendor="amd", kind="gpu", backend=self.name, health="ok")]

    def close(self) -> None:
        self.live = 0


def test_failed_open_is_closed_before_the_retry() -> None:
    flaky = _FlakyOpen()
    collector = Collector([flaky], timeout_seconds=1.0)
    statuses = [collector.collect_once().backends[0].status for _ in range(4)]
    assert statuses == ["error", "error", "ok", "ok"]
    assert flaky.live == 1, "each failed open() must be closed before the next attempt"
    collector.close()
    assert flaky.live == 0


def test_inline_collector_calls_backends_in_the_collecting_thread() -> None:
    """``inline`` (the simulation replayed by export/idle): no worker thread, same snapshot."""
    import threading as _threading

    from allsmi.backends.simulated import simulated_backends

    at = [1_790_000_000.0]
    threaded = Collector(list(simulated_backends("mixed", clock=lambda: at[0])), clock=lambda: at[0])
    inline = Collector(list(simulated_backends("mixed", clock=lambda: at[0])), clock=lambda: at[0],
                        inline=True)
    before = _threading.active_count()
    try:
        a, b = threaded.collect_once(), inline.collect_once()
        assert all(r._flight.thread is None for r in inline.runners)
        assert all(r._flight.thread is not None for r in threaded.runners)
        assert a.devices == b.devices and [s.status for s in a.backends] == [s.status for s in b.backends]
    finally:
        threaded.close()
        inline.close()
    assert _threading.active_count() <= before + len(threaded.runners)


class _Appearing(_Quick):
    """A vendor absent until ``present`` is set: its quick_probe decides from 'the files'."""

    name = "appearing"
    present = False

    def quick_probe(self) -> ProbeResult | None:
        self.quick_probes = getattr(self, "quick_probes", 0) + 1
        return None if self.present else ProbeResult(False, "no absent-vendor device node", {"searched": "/dev/x*"})

    def probe(self) -> ProbeResult:
        return ProbeResult(self.present, "" if self.present else "no absent-vendor device node")

    def sample(self) -> list[DeviceSample]:  # ids of its own (one id reported twice is left out)
        return [DeviceSample(id=f"appearing-{i}", vendor="nvidia", kind="gpu", backend=self.name,
                             index=i, health="ok") for i in range(2)]


def test_an_absent_vendor_gets_no_thread_until_its_hardware_appears() -> None:
    absent, quick = _Appearing(), _Quick()
    collector = Collector([quick, absent], timeout_seconds=1.0)
    runner = next(r for r in collector.runners if r.name == "appearing")
    runner.reprobe_seconds = 0.2
    try:
        snap = collector.collect_once()
        status = {b.name: b for b in snap.backends}
        assert status["appearing"].status == "unavailable"
        assert status["appearing"].message == "no absent-vendor device node"
        assert status["quick"].status == "ok" and len(snap.devices) == 2
        assert runner.probe_result is not None and runner.probe_result.details == {"searched": "/dev/x*"}
        assert "allsmi-backend-appearing" not in _threads(), "a thread for a vendor that is not here"
        collector.collect_once()  # within the re-probe delay: the answer stands, not asked again
        assert absent.quick_probes == 1
        absent.present = True  # the driver is loaded: the next re-probe opens it on its thread
        assert _eventually(lambda: len(collector.collect_once().devices) == 4, timeout=10.0)
        assert "allsmi-backend-appearing" in _threads() and absent.opened == 1
    finally:
        collector.close()
    assert _no_threads_left(), _threads()


def test_closing_an_absent_vendor_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-shot snapshot closes every installed backend: those answered by their quick probe
    never opened anything, so they are closed on the caller's thread (a thread each cost more
    than the rest of closing), and so is a single backend that ran (closing it is bounded
    there as on a thread); several that ran are closed at once, each on a thread of its own."""
    started: list[str] = []
    real_start = threading.Thread.start
    for ran in (1, 2):
        absent, quick = _Appearing(), [_Quick() for _ in range(ran)]
        closed: list[str] = []
        monkeypatch.setattr(_Appearing, "close", lambda self: closed.append("appearing"), raising=False)
        collector = Collector([*quick, absent], timeout_seconds=1.0)
        collector.collect_once()
        started.clear()
        monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), real_start(self))[1])
        assert collector.close_within(1.0)
        monkeypatch.setattr(threading.Thread, "start", real_start)
        assert closed == ["appearing"]
        assert started == ([] if ran == 1 else ["allsmi-closing-quick"] * ran), started
        assert _no_threads_left(), _threads()


def test_closing_attribution_sources_that_never_ran_starts_no_thread(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A node with neither a kubelet socket nor a device process: no source ran on a thread, so
    none is closed on one either."""
    from allsmi.attribution import Attributor, CgroupSource
    from allsmi.attribution.kubernetes import KubeletSource
    attributor = Attributor([KubeletSource(tmp_path / "kubelet.sock"), CgroupSource(tmp_path)])
    collector = Collector([_Quick()], timeout_seconds=1.0, attributor=attributor)
    snap = collector.collect_once()
    assert [(s.name, s.status) for s in snap.attribution] == [("kubernetes", "unavailable"), ("cgroup", "ok")]
    started: list[str] = []
    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), real_start(self))[1])
    assert collector.close_within(1.0)
    assert started == [], started
    assert _no_threads_left(), _threads()


def test_the_vendor_backends_know_their_absence_without_their_library(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every built-in backend answers quick_probe on a machine without its hardware (this one)
    as its probe() does, and none imports its vendor binding for it."""
    from allsmi.collection import registry
    monkeypatch.setenv("PATH", str(tmp_path))
    for name in ("ALLSMI_HL_SMI", "ALLSMI_FURIOSA_SMI", "ALLSMI_RBLN_SMI", "ALLSMI_TT_SMI"):
        monkeypatch.delenv(name, raising=False)
    answered = set()
    for name in registry.hardware_names():
        backend = registry.load(name)()
        quick = backend.quick_probe()
        if quick is None:  # "may be present": allowed (e.g. a binding already imported by tests)
            continue
        answered.add(name)
        probe = backend.probe()
        assert not quick.available and not probe.available, name
        assert quick.reason == probe.reason, name
    assert {"gaudi", "furiosa", "rebellions", "tenstorrent"} <= answered  # they only look for a tool

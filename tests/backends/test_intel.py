"""The Intel GPU backend's counters between two samples: busy share from GT idle residency, power
from the energy counter, each process's engine share from DRM fdinfo (a copy of the fixture tree,
its counters advanced between samples, a clock the test moves)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from allsmi.backends.intel import IntelGpuBackend

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "intel"


class Clock:
    """A clock the test moves; the backend's waits move it too."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _backend(tree: Path, clock: Clock) -> IntelGpuBackend:
    return IntelGpuBackend(options={"sysfs_root": str(tree / "sys"), "proc_root": str(tree / "proc")},
                           search_dirs=(), clock=clock, sleep=clock.sleep, lookup_user=lambda pid: None)


def opened_a_second_ago(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        fixture: str | Path) -> tuple[Path, Clock, IntelGpuBackend]:
    """A copy of ``fixture``'s tree (a name under FIXTURES, or a tree's path), its backend
    opened (the first reading), a second ago."""
    monkeypatch.delenv("ALLSMI_XPU_SMI", raising=False)
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / fixture, tree, symlinks=True)
    clock = Clock()
    backend = _backend(tree, clock)
    backend.open()
    clock.now += 1.0
    return tree, clock, backend


def advance(path: Path, by: int) -> None:
    """Add ``by`` to the counter in file ``path``."""
    path.write_text(f"{int(path.read_text()) + by}\n")


def test_i915_busy_power_and_engine_share_between_two_samples(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALLSMI_XPU_SMI", raising=False)
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "i915-flex170x2", tree, symlinks=True)
    clock = Clock()
    backend = _backend(tree, clock)
    backend.open()  # the first reading
    card0 = tree / "sys" / "class" / "drm" / "card0"
    clock.now += 2.0
    advance(card0 / "gt" / "gt0" / "rc6_residency_ms", 500)            # idle 0.5 s of 2 s
    advance(card0 / "device" / "hwmon" / "hwmon3" / "energy1_input", 150_000_000)  # 150 J
    info = tree / "proc" / "4242" / "fdinfo"
    for fd in ("5", "6"):  # one client (17) seen through two descriptors: counted once
        text = (info / fd).read_text()
        text = text.replace("drm-engine-compute:\t118493820115 ns", "drm-engine-compute:\t122493820115 ns")
        (info / fd).write_text(text)
    second = {d.index: d for d in backend.sample()}
    dev = second[0]
    assert dev.utilization_percent == pytest.approx(75.0)
    assert dev.compute_active_percent == pytest.approx(75.0) and dev.compute_active_source == "engine_time"
    assert dev.power_watts == pytest.approx(75.0)  # 150 J over 2 s
    # 4 s of compute-engine time over 2 s on 4 compute engines: 50 %
    assert dev.processes[0].pid == 4242 and dev.processes[0].utilization_percent == pytest.approx(50.0)
    # card1's counters did not move: its GT was busy the whole time, its process idle
    assert second[1].utilization_percent == pytest.approx(100.0)
    assert second[1].processes[0].utilization_percent == pytest.approx(0.0)
    assert second[1].power_watts == pytest.approx(0.0)
    assert clock.slept == []  # two seconds since the reading of open(): nothing to wait for
    clock.now += 0.05
    backend.sample()  # 50 ms after the last reading: waits out the rest of the 200 ms
    assert clock.slept == [pytest.approx(0.15)]
    backend.close()


def test_xe_cycles_are_shared_over_the_engine_class_capacity(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """xe sums ``drm-cycles-<class>`` over the class's engines: one of four compute engines busy
    for the whole interval is 25 %, not 100 % (the same rule as i915's nanoseconds)."""
    tree, clock, backend = opened_a_second_ago(tmp_path, monkeypatch, "xe-arc-b580")
    fdinfo = tree / "proc" / "7777" / "fdinfo" / "9"
    text = fdinfo.read_text()
    for key, old, by in (("drm-cycles-ccs", 0, 100_000_000), ("drm-total-cycles-ccs", 7655183225, 100_000_000),
                         ("drm-total-cycles-rcs", 7655183225, 100_000_000)):
        text = text.replace(f"{key}:\t{old}\n", f"{key}:\t{old + by}\n")
    fdinfo.write_text(text)
    (proc,) = [p for dev in backend.sample() for p in dev.processes or ()]
    assert proc.pid == 7777 and proc.utilization_percent == pytest.approx(25.0)
    backend.close()


def test_a_counter_that_goes_backwards_is_unknown_not_negative(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    tree, clock, backend = opened_a_second_ago(tmp_path, monkeypatch, "xe-arc-b580")
    gt0 = tree / "sys" / "class" / "drm" / "card1" / "device" / "tile0" / "gt0" / "gtidle" / "idle_residency_ms"
    gt0.write_text("10\n")  # the driver was reloaded
    energy = tree / "sys" / "class" / "drm" / "card1" / "device" / "hwmon" / "hwmon2" / "energy1_input"
    energy.write_text("5\n")
    (dev,) = backend.sample()
    assert dev.utilization_percent is None and dev.power_watts is None
    assert dev.energy_joules == pytest.approx(5e-6)
    # and the status says why (never a silent unknown)
    assert any("GT idle residency (utilization) and energy (power) counter went backwards" in w
               for w in backend.warnings), backend.warnings


def test_a_card_gone_since_open_is_lost_without_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALLSMI_XPU_SMI", raising=False)
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "i915-flex170x2", tree, symlinks=True)
    backend = _backend(tree, Clock())
    backend.open()
    shutil.rmtree(tree / "sys" / "class" / "drm" / "card1")
    devices = {d.index: d for d in backend.sample()}
    assert devices[1].health == "lost" and devices[1].power_limit_watts is None
    assert any("no longer listed" in w for w in backend.warnings)


def test_processes_are_unknown_not_none_when_proc_cannot_be_listed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALLSMI_XPU_SMI", raising=False)
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "i915-flex170x2", tree, symlinks=True)
    backend = _backend(tree, Clock())
    backend.open()
    shutil.rmtree(tree / "proc")  # as unlistable as a /proc this process may not read
    devices = backend.sample()
    assert devices and all(d.processes is None for d in devices)  # unknown, not "no processes"
    assert devices[0].utilization_percent is not None  # the rest still read
    assert any("cannot list the processes" in w for w in backend.warnings), backend.warnings


def test_kubernetes_intel_plugin_ids_name_the_card() -> None:
    from allsmi.attribution.matching import DeviceIndex
    from allsmi.schema import DeviceSample
    gpu = DeviceSample(id="intel:0000:4d:00.0", vendor="intel", kind="gpu", backend="intel", index=1)
    gaudi = DeviceSample(id="hl-1", vendor="intel", kind="npu", backend="gaudi", index=1)
    index = DeviceIndex([gpu, gaudi], {"intel": ("card", "renderd"), "gaudi": ("hl",)})
    assert index.match("card1-0", "intel", "index") == [gpu]
    assert index.match("1", "intel", "index") == [gpu]


def test_a_client_without_a_client_id_is_known_by_its_descriptor(tmp_path: Path) -> None:
    """The kernel's fdinfo format requires ``drm-client-id``; a driver that leaves it out gets
    its client known by the descriptor, the same in every scan (never by a Python object's
    address, which the next scan may give another client)."""
    from allsmi.backends.intel.fdinfo import scan
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "xe-arc-b580", tree, symlinks=True)
    fdinfo = tree / "proc" / "7777" / "fdinfo" / "9"
    fdinfo.write_text("".join(line for line in fdinfo.read_text().splitlines(keepends=True)
                              if not line.startswith("drm-client-id")))
    first, again = (scan(str(tree / "proc"), ("xe",)) for _ in range(2))
    assert [c.client_id for c in first] == [c.client_id for c in again] == ["fd:9"]


def test_a_card_that_appears_after_open_and_goes_is_lost_not_silently_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALLSMI_XPU_SMI", raising=False)
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "i915-flex170x2", tree, symlinks=True)
    drm = tree / "sys" / "class" / "drm"
    shutil.move(drm / "card1", tmp_path / "card1")  # bound by its driver after open()
    clock = Clock()
    backend = _backend(tree, clock)
    backend.open()
    clock.now += 1.0
    assert sorted(d.index for d in backend.sample()) == [0]
    shutil.move(tmp_path / "card1", drm / "card1")
    clock.now += 1.0
    assert sorted(d.index for d in backend.sample()) == [0, 1]
    shutil.rmtree(drm / "card1")
    clock.now += 1.0
    devices = {d.index: d for d in backend.sample()}
    # was: card1 gone from the sample without a word
    assert sorted(devices) == [0, 1] and devices[1].health == "lost"
    assert devices[1].power_watts is None and devices[1].processes is None
    assert any("card1" in w and "no longer listed" in w for w in backend.warnings), backend.warnings

"""A TPU chip that drops out of sysfs between two samples (fallen off the bus: its config space
reads vendor ``0xffff``, or its directory goes) is reported ``degraded`` and named, never silently
gone; the chips still listed keep their index (the ``google.com/tpu`` id a pod holds) and libtpu
devices, so they keep their own values instead of taking their neighbour's number."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from allsmi.backends.tpu import TpuBackend
from tests.contract.tpu_server import TpuMetricsServer

TPU = Path(__file__).resolve().parents[2] / "fixtures" / "tpu"
DEVICES = Path("sys") / "bus" / "pci" / "devices"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(TPU / "v5e-4", tmp_path / "v5e-4")
    return tmp_path / "v5e-4"


@pytest.fixture
def server() -> TpuMetricsServer:
    answering = TpuMetricsServer(TPU / "metrics-v5e-4-training.json", "answer")
    yield answering
    answering.close()


def _read(backend: TpuBackend) -> tuple[dict[str, object], list[str]]:
    return {d.id: d for d in backend.sample()}, list(backend.warnings)


@pytest.mark.parametrize("how", ["vendor-all-ones", "directory-gone"])
def test_a_chip_that_falls_off_is_degraded_and_the_others_keep_index_and_values(
        tree: Path, server: TpuMetricsServer, how: str) -> None:
    backend = TpuBackend(timeout_seconds=5.0, options={"sysfs_root": str(tree / "sys"),
                                                       "metrics_address": server.address})
    backend.open()
    try:
        before, _ = _read(backend)
        lost = tree / DEVICES / "0000:00:05.0"
        if how == "vendor-all-ones":
            (lost / "vendor").write_text("0xffff\n")
        else:
            shutil.rmtree(lost)
        after, warnings = _read(backend)
    finally:
        backend.close()
    # was: three devices, 05.0 gone without a word, 06.0 and 07.0 renumbered 1 and 2, and every
    # value unknown (libtpu's device 3 fitted no chip)
    assert sorted(after) == sorted(before)
    gone = after["tpu:0000:00:05.0"]
    assert gone.health == "degraded" and gone.index == 1
    assert gone.utilization_percent is None and gone.memory_used_bytes is None and gone.processes is None
    assert any("tpu:0000:00:05.0" in w and "missing" in w for w in warnings), warnings
    for key in ("tpu:0000:00:04.0", "tpu:0000:00:06.0", "tpu:0000:00:07.0"):
        old, new = before[key], after[key]
        assert new.index == old.index and new.health == "ok"
        assert (new.utilization_percent, new.memory_used_bytes, new.memory_total_bytes) == (
            old.utilization_percent, old.memory_used_bytes, old.memory_total_bytes)
    assert len({d.index for d in after.values()}) == 4


def test_a_reopened_backend_numbers_the_chips_it_lists_then(tree: Path, server: TpuMetricsServer) -> None:
    backend = TpuBackend(timeout_seconds=5.0, options={"sysfs_root": str(tree / "sys"),
                                                       "metrics_address": server.address})
    backend.open()
    try:
        _read(backend)
        shutil.rmtree(tree / DEVICES / "0000:00:04.0")
        backend.close()
        backend.open()
        after, warnings = _read(backend)
    finally:
        backend.close()
    assert sorted(d.index for d in after.values()) == [0, 1, 2]
    assert all(d.health != "degraded" for d in after.values())
    assert not any("missing" in w for w in warnings)

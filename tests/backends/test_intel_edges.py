"""Intel edge readings checked against what the vendor's tools show (xpu-smi's GPU utilization is
the compute engines' busy time; a media GT's idle video engines do not halve it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .test_intel import FIXTURES, advance, opened_a_second_ago


def test_xe_media_gt_idle_time_is_not_the_gpus_compute(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    tree, clock, backend = opened_a_second_ago(tmp_path, monkeypatch, FIXTURES / "xe-arc-b580")
    tile = tree / "sys" / "class" / "drm" / "card1" / "device" / "tile0"
    # gt0 (gt0-rc, render/compute) busy the whole second; gt1 (gt1-mc, media) idle throughout
    advance(tile / "gt1" / "gtidle" / "idle_residency_ms", 1000)
    (dev,) = backend.sample()
    assert dev.utilization_percent == pytest.approx(100.0)
    assert dev.compute_active_percent == pytest.approx(100.0)
    # and a compute GT idle half the interval is 50 %, whatever the media GT does
    clock.now += 1.0
    advance(tile / "gt0" / "gtidle" / "idle_residency_ms", 500)
    (dev,) = backend.sample()
    assert dev.utilization_percent == pytest.approx(50.0)
    backend.close()


def test_xe_gt_without_a_name_file_still_counts(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels before ``gtidle/name``: every GT is averaged, as before (nothing to tell them by)."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "xe-arc-b580", src, symlinks=True)
    for name in src.glob("sys/class/drm/card1/device/tile0/gt*/gtidle/name"):
        name.unlink()
    tree, clock, backend = opened_a_second_ago(tmp_path, monkeypatch, src)
    tile = tree / "sys" / "class" / "drm" / "card1" / "device" / "tile0"
    advance(tile / "gt1" / "gtidle" / "idle_residency_ms", 1000)
    (dev,) = backend.sample()
    assert dev.utilization_percent == pytest.approx(50.0)
    backend.close()


def test_xe_package_only_hwmon_channel_gives_energy_power_and_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An xe GPU without the card channel (DG2, PVC under xe) publishes ``energy2_input`` and
    ``power2_max`` (the package domain xpu-smi reads there): read them, never report unknown."""
    src = tmp_path / "pkgonly"
    shutil.copytree(FIXTURES / "xe-arc-b580", src, symlinks=True)
    hwmon = src / "sys" / "class" / "drm" / "card1" / "device" / "hwmon" / "hwmon2"
    (hwmon / "energy1_input").rename(hwmon / "energy2_input")
    (hwmon / "power1_max").rename(hwmon / "power2_max")
    tree, clock, backend = opened_a_second_ago(tmp_path, monkeypatch, src)
    energy = tree / "sys" / "class" / "drm" / "card1" / "device" / "hwmon" / "hwmon2" / "energy2_input"
    before = int(energy.read_text())
    advance(energy, 120_000_000)  # 120 J in 1 s
    (dev,) = backend.sample()
    assert dev.power_watts == pytest.approx(120.0)
    assert dev.energy_joules == pytest.approx((before + 120_000_000) / 1e6)
    limit = int((hwmon / "power2_max").read_text())
    assert dev.power_limit_watts == pytest.approx(limit / 1e6)
    backend.close()


@pytest.mark.parametrize(("pci_id", "busy"), [
    ("8086:7D55", 100.0),  # Meteor Lake: gt1 is its media GT, whose idle time is not the GPU's
    ("8086:7DD1", 100.0),  # Arrow Lake, driven by i915 as Meteor Lake
    ("8086:0BD5", 50.0),   # Data Center GPU Max under i915: gt1 is its second compute tile
])
def test_i915_media_gt_idle_time_is_not_the_gpus_compute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         pci_id: str, busy: float) -> None:
    """i915 names no GT's kind (no ``gtidle/name``): on Meteor Lake and Arrow Lake its ``gt1`` is
    the media GT, left out as xe's ``-mc`` GT is; on Data Center GPU Max ``gt1`` is compute."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "i915-flex170x2", src, symlinks=True)
    card0 = src / "sys" / "class" / "drm" / "card0"
    uevent = card0 / "device" / "uevent"
    uevent.write_text(uevent.read_text().replace("PCI_ID=8086:56C0", f"PCI_ID={pci_id}"))
    (card0 / "gt" / "gt1").mkdir()
    (card0 / "gt" / "gt1" / "rc6_residency_ms").write_text("1000\n")
    tree, clock, backend = opened_a_second_ago(tmp_path, monkeypatch, src)
    gts = tree / "sys" / "class" / "drm" / "card0" / "gt"
    # gt0 busy the whole second; gt1 idle throughout
    advance(gts / "gt1" / "rc6_residency_ms", 1000)
    dev = {d.index: d for d in backend.sample()}[0]
    assert dev.utilization_percent == pytest.approx(busy)
    assert dev.compute_active_percent == pytest.approx(busy)
    backend.close()

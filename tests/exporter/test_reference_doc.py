"""The committed metric reference matches the declarations it is generated from."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.exporter.families import FAMILIES
from allsmi.exporter.reference import metrics_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_docs_metrics_md_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == metrics_markdown(), \
        "docs/metrics.md is stale: run `python -m allsmi.exporter.reference > docs/metrics.md`"


def test_every_family_is_documented() -> None:
    text = metrics_markdown()
    for family in FAMILIES:
        assert f"| `{family.name}` |" in text


def test_the_docs_say_where_a_partitioned_boards_energy_goes() -> None:
    """Both references said energy is exported "on the device that owns the board" only; it is
    split between the board and its partitions by their billing shares (issue 32, item 10:
    tests/exporter/test_families.py), and a reader summing the board alone undercounts."""
    from allsmi.exporter.exposition import Exposition

    from .support import T0, device, snapshot, values

    board = device("GPU-p", power_watts=420.0, energy_joules=5000.0, processes=())
    slices = [device(f"MIG-{i}", parent="GPU-p", power_watts=None, energy_joules=None,
                     partition_share=share) for i, share in enumerate((3 / 7, 2 / 7))]
    expo = Exposition()
    expo.on_snapshot(snapshot([board, *slices]))
    expo.on_snapshot(snapshot([device("GPU-p", power_watts=420.0, energy_joules=5700.0,
                                      processes=()), *slices], at=T0 + 2))
    assert expo.current is not None
    energy = values(expo.current.text.decode(), "allsmi_device_energy_joules_total")
    assert energy == pytest.approx({"GPU-p": 200.0, "MIG-0": 300.0, "MIG-1": 200.0})
    exporter_md = " ".join((DOC.parent / "exporter.md").read_text(encoding="utf-8").split())
    metrics_md = " ".join(metrics_markdown().split())
    assert "power and energy are on the owning board only" not in exporter_md
    assert "board's energy is split between its partitions and the board" in exporter_md
    assert "(power, power limit, energy) are exported once" not in metrics_md
    assert "board's energy counter is split between its partitions and the board" in metrics_md


def test_the_docs_say_a_device_without_utilization_idles_by_its_compute_activity() -> None:
    """Both references said the idle-allocated counter needs a utilization figure and that a
    MIG instance has none; a MIG instance idles by its compute activity and has the counter
    (tests/exporter/test_idle_unknown.py), only a device reporting neither (Tenstorrent) does
    not."""
    from allsmi.exporter.exposition import Exposition
    from allsmi.schema import ProcessSample

    from .support import T0, device, snapshot, values

    held = (ProcessSample(pid=7, user="ann", memory_bytes=1),)
    expo = Exposition()
    for t in (0, 10):
        expo.on_snapshot(snapshot([device("MIG-a", utilization_percent=None, processes=held,
                                          compute_active_percent=2.0),
                                   device("tt-0", utilization_percent=None, processes=held,
                                          compute_active_percent=None)], at=T0 + t))
    assert expo.current is not None
    idle = values(expo.current.text.decode(), "allsmi_device_idle_allocated_seconds_total")
    assert idle == {"MIG-a": 10.0}
    exporter_md = " ".join((DOC.parent / "exporter.md").read_text(encoding="utf-8").split())
    metrics_md = " ".join(metrics_markdown().split())
    assert "utilization was unknown (Tenstorrent, MIG instances)" not in exporter_md
    assert "without a utilization figure idles by its compute activity" in exporter_md
    assert "once a held device's utilization was unknown" not in metrics_md
    assert "utilization and compute activity were both unknown" in metrics_md

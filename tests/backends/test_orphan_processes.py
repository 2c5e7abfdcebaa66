"""Process rows that name a device the tool does not list are warned about, never dropped
in silence (backends/_common/orphans.py; Ascend, Gaudi and Furiosa use it)."""

from __future__ import annotations

from pathlib import Path

from allsmi.backends._common.orphans import note_unmatched
from allsmi.backends.ascend.parse import parse_info
from allsmi.backends.ascend.samples import build_samples

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "ascend" / "npu-smi-24.1.0-910b3x4-training.txt"


def test_note_unmatched_names_each_unlisted_device_once() -> None:
    warnings: list[str] = []
    assert note_unmatched(["npu0", "npu7", "npu7"], {"npu0"}, warnings, "tool", {"npu7": 2}) == ["npu7"]
    assert len(warnings) == 1 and "npu7 (2 row(s))" in warnings[0] and "npu0" not in warnings[0]
    assert note_unmatched(["npu0"], {"npu0"}, warnings, "tool") == [] and len(warnings) == 1


def test_ascend_process_row_for_an_unlisted_chip_is_a_warning() -> None:
    row = "| 0       0                 | 2133411       | python3.9                | 29231                   |"
    ghost = "| 6       0                 | 4242          | ghost                    | 100                     |"
    text = FIXTURE.read_text().replace(row, row + "\n" + ghost)
    warnings: list[str] = []
    table = parse_info(text, "npu-smi info", warnings)
    devices = build_samples(table, backend="Ascend", vendor="huawei", kind="npu",
                            model_name=lambda n: n, lookup_user=lambda pid: None,
                            warnings=warnings, source="core_busy")
    assert len(devices) == 4
    assert all(4242 not in {p.pid for p in d.processes or ()} for d in devices)
    assert any("NPU 6 chip 0 (1 row(s))" in w for w in warnings), warnings

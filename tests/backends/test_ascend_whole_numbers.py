"""npu-smi's integer-kind cells (NPU, chip and device numbers, PIDs, MiB counts) are ASCII digits:
``str.isdecimal``, ``int`` and ``\\d`` also take other scripts' digits (``"３"``, ``"٤"``), which no
npu-smi prints, so such a cell is no number rather than a chip, process or size of that value."""

from __future__ import annotations

from allsmi.backends.ascend.parse import parse_info
from allsmi.backends.ascend.samples import build_samples, device_numbers
from tests.contract.scenario import FIXTURES

TWO_CARDS = (FIXTURES / "ascend" / "npu-smi-23.0.0-310p3-two-cards.txt").read_text()


def test_other_scripts_digits_are_no_numbers() -> None:
    text = (TWO_CARDS
            .replace("| 1       310P3             | OK            | NA  ",
                     "| １       310P3             | OK            | NA  ")      # full-width NPU 1
            .replace("| 0       0                 | 41234 ", "| 0       0                 | ٤١٢٣٤ ")
            .replace("No running processes found in NPU 1", "No running processes found in NPU ١"))
    warnings: list[str] = []
    table = parse_info(text, "npu-smi info", warnings)
    # old: the full-width chip read as NPU 1, the Arabic-Indic pid as 41234, NPU "١" as idle NPU 1
    assert [(c.npu, c.chip) for c in table.chips] == [(0, 0), (0, 1)]
    assert table.processes == [] and table.idle_npus == set()
    assert any("a chip row without NPU and chip numbers" in w for w in warnings)
    assert any("unreadable process row" in w for w in warnings)
    table.chips[0].cells["Device"] = "٣"   # old: /dev/davinci3 (and 1 for the other chip)
    assert device_numbers(table.chips) == [0, 1]  # not every Device cell a number: the table's order


def test_mib_counts_are_ascii_digits() -> None:
    text = (TWO_CARDS.replace("1074 / 21534", "１０７４ / 21534")
            .replace("| ascend-infer             | 980  ", "| ascend-infer             | ９８０"))
    warnings: list[str] = []
    table = parse_info(text, "npu-smi info", warnings)
    first = build_samples(table, backend="ascend", vendor="huawei", kind="npu", model_name=lambda raw: raw,
                          lookup_user=lambda pid: None, warnings=warnings, source="npu-smi")[0]
    # old: 1074 MiB in use and 980 MiB for pid 41234, read from full-width digits
    assert first.memory_used_bytes is None and first.memory_total_bytes == 21534 * 1024 ** 2
    assert [(p.pid, p.memory_bytes) for p in first.processes or ()] == [(41234, None)]
    assert any("unreadable memory used '１０７４'" in w for w in warnings)

"""amdsmi's integer fields (partition ids, compute-unit counts, PIDs, byte and MiB counts, error
and engine counters, the partition count of gpu_metrics, xGMI counters): a whole number of 0 or
more, or unknown. ``int()`` used to truncate a fraction and let a negative number through."""

from __future__ import annotations

import pytest

from allsmi.backends.amd import activity
from allsmi.backends.amd import convert as conv


@pytest.mark.parametrize("raw", [
    -1,        # old: partition id -1, byte count None (its own check)
    3.7,       # old: int() truncated it to 3
    "3.7",     # old: 3
    3.0,       # no unsigned field is a float
    "1e3",     # old: 1000
    True, "N/A", None, "٣",
    0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF,  # sentinels
])
def test_whole_refuses_what_no_unsigned_field_holds(raw: object) -> None:
    assert conv.whole(raw) is None
    assert conv.byte_count(raw) is None and conv.counter(raw) is None and conv.mib_to_bytes(raw) is None


def test_whole_numbers_pass() -> None:
    assert conv.whole(7) == 7 and conv.whole("7") == 7 and conv.whole(0) == 0
    assert conv.byte_count(17179869184) == 17179869184 and conv.counter(0xFFFF) == 0xFFFF
    assert conv.mib_to_bytes(65520) == 65520 * 1024 ** 2
    assert conv.mib_to_bytes(1.5) is None  # old: 1572864 (a fraction of a MiB from a uint32 MB field)


def test_partition_count_and_xgmi_counters_are_not_truncated() -> None:
    rows = [[10, 20], [30, 40]]
    assert activity.xcc_busy({"num_partition": 1.5, "xcp_stats.gfx_busy_inst": rows}, None) == []  # old: row 0
    assert activity.xcc_busy({"num_partition": 2, "xcp_stats.gfx_busy_inst": rows}, None) == [10.0, 20.0, 30.0, 40.0]

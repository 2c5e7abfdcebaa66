"""Gaudi edge cells against what hl-smi means by them: a memory size or power limit of 0 is a
device that reports none (unknown, as the AMD and Intel backends read a 0 cap or size), while a
draw, a use or a busy share of 0 is a reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.backends.gaudi import ENV_VAR, GaudiBackend
from allsmi.schema.units import MIB
from tests.contract.scenarios_gaudi import write_standin

ROWS = (
    "0, 01P4-HL3090A0-18-U4V193-22-07-00, HL-325L, 0000:19:00.0, 1.22.1-97ec1a4, 0, 0, 0, 36, 0, 0, 0, 1600, 2, AO40020260, 0, 0\n"
    "1, 01P4-HL3090A0-18-U4V193-22-07-01, HL-325L, 0000:1a:00.0, 1.22.1-97ec1a4, 37, 131072, 45312, 48, 512, 850, 1600, 1600, 3, AO40020261, 0, 0\n"
)


def test_zero_memory_total_and_power_limit_are_unknown(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(ROWS)
    exe = write_standin(tmp_path / "bin", "gaudi3-8x-1.22", fixture_file=str(rows),
                        listing=None)
    monkeypatch.setenv(ENV_VAR, str(exe))
    backend = GaudiBackend(options={"mode": "oneshot", "firmware": False})
    backend.open()
    try:
        zero, busy = backend.sample()
    finally:
        backend.close()
    assert zero.memory_total_bytes is None and zero.power_limit_watts is None
    # readings of 0 stay readings
    assert zero.memory_used_bytes == 0 and zero.power_watts == 0.0
    assert zero.utilization_percent == 0.0 and zero.clock_mhz == 0.0
    assert busy.memory_total_bytes == 131072 * MIB and busy.power_limit_watts == 850.0

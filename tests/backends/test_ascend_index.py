"""Each Ascend chip's ``index`` is the number of its ``/dev/davinci<N>`` (what the device plugin's
``Ascend910-<N>`` ids are matched by): two chips of one NPU never share one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.contract.scenario import FIXTURES, ScenarioEnv
from tests.contract.scenarios_ascend import backend_for

CARDS = (FIXTURES / "ascend" / "npu-smi-23.0.0-310p3-two-cards.txt").read_text()


def _indices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> dict[str, int]:
    backend = backend_for(ScenarioEnv(tmp_path=tmp_path, monkeypatch=monkeypatch), None, text=text)
    backend.open()
    try:
        return {d.bus_id: d.index for d in backend.sample()}
    finally:
        backend.close()


def test_the_phy_id_column_numbers_the_chips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables whose chip header is ``Chip  Phy-ID`` (two chips per NPU) number the chips by it."""
    text = CARDS.replace("| Chip    Device            |", "| Chip    Phy-ID            |")
    assert text != CARDS
    assert _indices(tmp_path, monkeypatch, text) == {
        "0000:82:00.0": 0, "0000:82:00.1": 1, "0000:89:00.0": 2}


def test_two_chips_of_one_npu_without_a_device_column_get_their_own_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``Device``/``Phy-ID`` column: the NPU's id would give both chips of NPU 0 the same
    index; they are numbered in the order the table lists them instead."""
    lines = CARDS.splitlines()
    out = []
    for line in lines:
        if line.startswith("| Chip    Device"):
            line = line.replace("| Chip    Device            |", "| Chip                      |")
        elif re.match(r"\| \d       \d +\| 0000:", line):  # a chip row: its Device cell goes
            line = "| " + line[2] + " " * 25 + line[28:]
        out.append(line)
    text = "\n".join(out) + "\n"
    indices = _indices(tmp_path, monkeypatch, text)
    assert len(indices) == 3 and len(set(indices.values())) == 3, indices
    assert indices == {"0000:82:00.0": 0, "0000:82:00.1": 1, "0000:89:00.0": 2}


def test_the_phy_id_column_is_read_whatever_its_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """npu-smi 25 prints the A3 chip header as ``Chip  Phy-Id``: the chips are numbered by it, not
    by their place in the table (a container given NPU 1's chips, ``/dev/davinci2`` and
    ``/dev/davinci3``, lists only those: their indices are 2 and 3, never 0 and 1)."""
    text = (CARDS.replace("| Chip    Device            |", "| Chip    Phy-Id            |")
            .replace("| 0       0                 | 0000:82:00.0", "| 0       2                 | 0000:82:00.0")
            .replace("| 1       1                 | 0000:82:00.1", "| 1       3                 | 0000:82:00.1")
            .replace("| 0       2                 | 0000:89:00.0", "| 0       4                 | 0000:89:00.0"))
    assert text.count("Phy-Id") == 1 and "| 0       4 " in text
    assert _indices(tmp_path, monkeypatch, text) == {
        "0000:82:00.0": 2, "0000:82:00.1": 3, "0000:89:00.0": 4}

"""Furiosa's integer-kind values (PE core numbers, DRAM bytes, PIDs, process memory, the npuN
index): a value that cannot be right is unknown with a warning said once per device, field and
value while the backend is open, never rounded into a plausible one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from allsmi.backends.furiosa import ENV_VAR, FuriosaBackend, parse
from tests.contract.scenarios_furiosa import (FURIOSA, RNGD_4X, block_sdk, four_rngd, legacy_sdk, modern_sdk,
                                              route, use_sdk, write_standin)

TOTAL = 51002736640


def _status(**dram: object) -> dict[str, Any]:
    return {"device": "npu0", "liveness": "alive",
            "memory": {"DRAM": {"used_size": 0, "total_size": TOTAL, **dram}},
            "pe_utilizations": [{"pe_core": 0, "pe_utilization": 10.0}, {"pe_core": -1, "pe_utilization": 20.0},
                                {"pe_core": "2.6", "pe_utilization": 30.0}, {"pe_core": 3, "pe_utilization": 40.0}]}


def test_pe_core_numbers_that_are_no_whole_number_keep_the_pe_in_its_place() -> None:
    rows, warnings = parse.parse_status([_status()])
    # old: -1 sorted first and "2.6" rounded to 3, tied with PE 3: (20.0, 10.0, 30.0, 40.0)
    assert rows["npu0"].core_utilization == (10.0, 20.0, 30.0, 40.0)
    assert warnings == [
        "npu0: PE 1 pe_core value -1 is not a whole number of 0 or more; reported as unknown",
        "npu0: PE 2 pe_core value '2.6' is not a whole number of 0 or more; reported as unknown"]


@pytest.mark.parametrize(("dram", "used", "total"), [
    ({"used_size": "12884901888.4"}, None, TOTAL),           # old: 12884901888 (rounded)
    ({"used_size": 1.2884901888e10}, None, TOTAL),           # old: 12884901888 (a float)
    ({"used_size": "٣"}, None, TOTAL),                        # old: 3 (another script's digit)
    ({"total_size": "-1", "used_size": 7}, 7, None),          # old: -1, then both dropped as implausible
    ({"used_size": "12884901888"}, 12884901888, TOTAL),
])
def test_dram_sizes_are_whole_bytes_or_unknown(dram: dict[str, object], used: int | None,
                                               total: int | None) -> None:
    rows, warnings = parse.parse_status([_status(**dram)])
    row = rows["npu0"]
    assert (row.memory_used_bytes, row.memory_total_bytes) == (used, total)
    bad = [w for w in warnings if "DRAM" in w]
    assert len(bad) == (0 if used == 12884901888 else 1)
    assert all("is not a whole number of 0 or more; reported as unknown" in w for w in bad)


def test_ps_pids_and_memory_that_cannot_be_right_are_refused() -> None:
    found, warnings = parse.parse_ps([
        {"dev_name": "npu0", "pid": "41230.6", "cmdline": "a"},   # old: pid 41231
        {"dev_name": "npu0", "pid": 41230, "cmdline": "b"},
        {"npu": "npu1pe0", "pid": "3771", "cmd": "c", "memory": "-512 MiB"},  # old: -536870912 bytes
        {"dev_name": "npu٣", "pid": 5, "cmdline": "d"},             # old: a row for label "npu٣"
    ])
    assert [(p.pid, p.memory_bytes) for p in found["npu0"]] == [(41230, None)]
    assert [(p.pid, p.memory_bytes) for p in found["npu1"]] == [(3771, None)]
    assert set(found) == {"npu0", "npu1"}
    assert any("row 0 has no usable pid/device (pid '41230.6'" in w for w in warnings)
    assert any("pid 3771: memory '-512 MiB' is negative; reported as unknown" in w for w in warnings)
    assert any("row 3 has no usable pid/device" in w for w in warnings)
    assert parse.device_labels("npu４:[0, 7], npu5:[0, 7]") == ["npu5"]


def _cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: list[dict[str, Any]],
         ps: list[dict[str, Any]]) -> FuriosaBackend:
    block_sdk(monkeypatch)
    info = json.loads((FURIOSA / RNGD_4X["info"]).read_text())[:1]
    exe = write_standin(tmp_path / "bin", {"info": route(text=json.dumps(info)),
                                           "status": route(text=json.dumps(status)),
                                           "ps": route(text=json.dumps(ps))})
    monkeypatch.setenv(ENV_VAR, str(exe))
    backend = FuriosaBackend(timeout_seconds=5.0, user_lookup=lambda pid: None)
    backend.open()
    return backend


def test_cli_warnings_are_said_once_while_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _cli(tmp_path, monkeypatch, [_status(used_size="-4096")],
                   [{"dev_name": "npu0", "pid": "7.5", "cmdline": "x"}])
    first = backend.sample()[0]
    assert first.memory_used_bytes is None and first.memory_total_bytes == TOTAL
    assert first.details["core_utilization_percent"] == (10.0, 20.0, 30.0, 40.0)
    assert first.processes == ()
    said = [w for w in backend.warnings if "reported as unknown" in w or "usable pid" in w]
    assert len(said) == 4  # PE 1, PE 2, DRAM used_size, the ps row
    backend.sample()
    assert not [w for w in backend.warnings if "reported as unknown" in w or "usable pid" in w]
    backend.close()
    backend.open()  # a new open says them again
    backend.sample()
    assert len([w for w in backend.warnings if "reported as unknown" in w or "usable pid" in w]) == 4


def test_index_comes_from_ascii_digits_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "none"))
    use_sdk(monkeypatch, modern_sdk(four_rngd(npu1={"name": "npu１"})))  # full-width one
    backend = FuriosaBackend(timeout_seconds=5.0)
    backend.open()
    assert [d.index for d in backend.sample()] == [0, None, 2, 3]  # old: 1 for "npu１"


@pytest.mark.parametrize(("dram", "used", "total"), [
    ((-1, TOTAL), None, TOTAL),              # old: -1, then both dropped
    ((4.7, TOTAL), None, TOTAL),             # old: 5
    ((1024, float(TOTAL)), 1024, None),      # old: the float taken as a size
    ((1024, True), 1024, None),
])
def test_sdk_memory_blocks_are_whole_bytes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           dram: tuple[object, object], used: int | None,
                                           total: int | None) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "none"))
    use_sdk(monkeypatch, modern_sdk(four_rngd(npu2={"dram": dram})))
    backend = FuriosaBackend(timeout_seconds=5.0)
    backend.open()
    npu2 = backend.sample()[2]
    assert (npu2.memory_used_bytes, npu2.memory_total_bytes) == (used, total)
    assert len([w for w in backend.warnings if "npu2: " in w and "reported as unknown" in w]) == 1
    backend.sample()
    assert not [w for w in backend.warnings if "reported as unknown" in w]  # said once while open


def test_legacy_sdk_core_numbers_are_not_rounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "none"))
    module = legacy_sdk(four_rngd())

    class Core:
        def __init__(self, core: object, usage: float) -> None:
            self.core, self.pe_usage_percentage = (lambda: core), (lambda: usage)

    class Observer:
        def get_core_utilization(self, device: object) -> list[Core]:
            return [Core(1, 11.0), Core(0, 10.0), Core("1.6", 16.0), Core(3, 13.0)]

    module.create_default_observer = lambda: Observer()  # type: ignore[attr-defined]
    use_sdk(monkeypatch, module)
    backend = FuriosaBackend(timeout_seconds=5.0)
    backend.open()
    # old: "1.6" rounded to core 2: (10.0, 11.0, 16.0, 13.0); a core of no known number goes first
    assert backend.sample()[0].details["core_utilization_percent"] == (16.0, 10.0, 11.0, 13.0)
    said = [w for w in backend.warnings if "core() value '1.6' is not a whole number" in w]
    assert [w.split(":")[0] for w in said] == ["npu0", "npu1", "npu2", "npu3"]  # once per device
    backend.sample()
    assert not any("core() value" in w for w in backend.warnings)

"""neuron-ls and neuron-monitor integer-kind values (device numbers, NeuronCore ids, PIDs, sizes,
ECC counts) read through the shared ``int_cell``: a negative number, a fraction or another
script's digits is unknown, never a device, core or process of that number."""

from __future__ import annotations

import json

from allsmi.backends.neuron.parse import load_devices, parse_monitor


def _row(index: object, cores: object, **extra: object) -> dict[str, object]:
    return {"neuron_device": index, "bdf": f"0000:{10 + len(str(index)):02x}:00.0", "nc_count": 2,
            "memory_size": 34359738368, "neuroncore_ids": cores, "neuron_processes": [], **extra}


def test_device_numbers_and_core_ids_are_whole_numbers_of_0_or_more() -> None:
    warnings: list[str] = []
    text = json.dumps([_row(0, [0, 1]), _row(-1, [2, 3]), _row("٢", [4, 5]), _row(3, [-1, 7]),
                       _row(4, [8, 9], memory_size=-5, logical_neuroncore_config=-2)])
    devices = load_devices(text, "neuron-ls", warnings)
    # old: devices -1 and 2 ("٢" is an Arabic-Indic two), device 3 with core -1, memory -5 dropped
    # by its own check, and a logical NeuronCore config of -2
    assert [(d.index, d.cores) for d in devices] == [(0, (0, 1)), (3, ()), (4, (8, 9))]
    assert devices[2].memory_total_bytes is None and devices[2].logical_config is None
    assert sum("has no neuron_device number" in w for w in warnings) == 2
    assert any("neuron device 3: unreadable neuroncore_ids" in w for w in warnings)


def test_monitor_pids_core_numbers_and_ecc_device_numbers() -> None:
    report = {"neuron_runtime_data": [{"pid": -1, "error": "", "report": {}},
                                      {"pid": "٤٢", "error": "", "report": {}},
                                      {"pid": 42, "error": "", "report": {}}],
              "system_data": {"neuron_hw_counters": {"neuron_devices": [
                  {"neuron_device_index": "３", "mem_ecc_uncorrected": 1, "sram_ecc_uncorrected": 0},
                  {"neuron_device_index": 1, "mem_ecc_uncorrected": 2, "sram_ecc_uncorrected": -1}]}}}
    out = parse_monitor(json.dumps(report))
    assert list(out.runtimes) == [42]  # old: -1 and 42 (and "٤٢" as 42 again)
    assert out.unreadable_runtimes == 2
    assert out.ecc_uncorrected == {1: 2}  # old: {3: 1, 1: 2}

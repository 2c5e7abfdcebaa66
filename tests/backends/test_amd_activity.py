"""AMD honest activity from ``amdsmi_get_gpu_metrics_info``: per-XCC busy per compute
partition, memory bandwidth, xGMI traffic between cycles; through the real amdsmi package over
the fake libamd_smi.so (``fixtures/amd``)."""

from __future__ import annotations

import pytest

from .amd_fake import FakeLibrary, fake_backend

NA64 = "0xFFFFFFFFFFFFFFFF"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _sample(name: str, **kwargs):
    lib = FakeLibrary.from_fixture(name)
    backend = fake_backend(lib, **kwargs)
    backend.open()
    return lib, backend


def _metrics(lib: FakeLibrary, bdf_prefix: str) -> list[dict]:
    return [d["amdsmi_get_gpu_metrics_info"] for d in lib.devices
            if d.get("amdsmi_get_gpu_device_bdf", "").startswith(bdf_prefix)]


def test_a_cpx_partition_gets_its_own_activity_from_its_xcc():
    _, backend = _sample("mi300x_cpx")
    devices = {d.id: d for d in backend.sample()}
    first = devices["a6ff74a1-0000-1000-807c-d0b8a1e2c3f4"]  # partition 0 of board 0c
    # headline 91 % (any GFX work), but its XCC was busy 20 % of the time
    assert first.utilization_percent == 91.0
    assert (first.compute_active_percent, first.compute_active_source) == (20.0, "gfx_busy")
    assert first.details["xcc_busy_percent"] == (20.0,)
    # the socket-wide figures belong to the board, not to each partition
    assert first.memory_bandwidth_percent is None and first.interconnect_rx_bytes_per_second is None
    partitions = [d for d in devices.values() if d.parent == "amd:0000:0c:00"]
    assert [d.compute_active_percent for d in partitions] == [20.0, 88.0, 0.0, 5.0, 100.0, 12.0,
                                                             63.0, 40.0]
    board = devices["amd:0000:0c:00"]
    assert board.compute_active_percent == 41.0  # the mean of its eight XCCs
    assert board.memory_bandwidth_percent == 30.0
    assert board.details["pcie_bandwidth_gigabytes_per_second"] == 24.0
    assert "mm_activity_percent" not in board.details  # 0xFFFF: not reported
    assert backend.warnings == []


def test_a_board_without_gpu_metrics_has_no_activity():
    _, backend = _sample("mi300x_cpx")
    devices = backend.sample()
    other = [d for d in devices if d.id == "79ff74a1-0000-1000-80d1-1a2b3c4d5e6f"
             or d.parent == "79ff74a1-0000-1000-80d1-1a2b3c4d5e6f"]
    assert len(other) == 9
    assert all(d.compute_active_percent is None and d.compute_active_source is None
               and d.memory_bandwidth_percent is None for d in other)
    assert all(d.utilization_percent is not None for d in other)  # the headline still reads


def test_whole_gpu_mean_of_its_xccs_and_the_older_table():
    _, backend = _sample("mi300x_spx")
    first, second = backend.sample()
    assert first.utilization_percent == 87.0 and first.compute_active_percent == 25.0
    assert first.memory_bandwidth_percent == 42.0
    assert second.compute_active_percent == 0.0  # measured idle is 0, not unknown
    _, backend = _sample("mi250x")
    gcd0, gcd1 = backend.sample()
    # gpu_metrics 1.3: no per-XCC rows (num_partition N/A), so the GFX activity
    assert (gcd0.compute_active_percent, gcd0.compute_active_source) == (99.0, "gfx_busy")
    assert "xcc_busy_percent" not in gcd0.details
    assert gcd0.interconnect_rx_bytes_per_second is None  # no xGMI data counters
    assert gcd1.compute_active_percent is None  # no gpu_metrics at all


def test_xgmi_counters_become_rates_between_cycles():
    clock = Clock()
    lib, backend = _sample("mi300x_spx", clock=clock)
    first, _ = backend.sample()
    assert first.interconnect_rx_bytes_per_second is None  # one reading is no rate
    table = _metrics(lib, "0000:0c")[0]
    clock.now += 2.0
    table["xgmi_read_data_acc"] = [4000000 + 1000 * k for k in range(7)] + [NA64]
    table["xgmi_write_data_acc"] = [3000000 + 500] + [3000000] * 6 + [NA64]
    first, second = backend.sample()
    # (0 + 1000 + ... + 6000) KB over 2 s; KB are 1024 bytes
    assert first.interconnect_rx_bytes_per_second == 21000 * 1024 / 2.0
    assert first.interconnect_tx_bytes_per_second == 500 * 1024 / 2.0
    assert second.interconnect_rx_bytes_per_second is None or \
        second.interconnect_rx_bytes_per_second == 0.0


def test_xgmi_counters_going_backwards_give_no_rate_and_say_why():
    clock = Clock()
    lib, backend = _sample("mi300x_spx", clock=clock)
    backend.sample()
    table = _metrics(lib, "0000:0c")[0]
    clock.now += 1.0
    table["xgmi_read_data_acc"] = [10] * 7 + [NA64]  # the driver was reloaded
    first, _ = backend.sample()
    assert first.interconnect_rx_bytes_per_second is None
    assert first.interconnect_tx_bytes_per_second is None
    assert any("xGMI data counters went backwards" in w for w in backend.warnings)
    assert first.compute_active_percent == 25.0  # the rest still reads
    clock.now += 1.0
    table["xgmi_read_data_acc"] = [1034] * 7 + [NA64]
    first, _ = backend.sample()  # measured again from the new value
    assert first.interconnect_rx_bytes_per_second == 7 * 1024 * 1024 / 1.0
    assert not any("backwards" in w for w in backend.warnings)


def test_a_link_that_stops_reporting_restarts_the_measurement():
    clock = Clock()
    lib, backend = _sample("mi300x_spx", clock=clock)
    backend.sample()
    table = _metrics(lib, "0000:0c")[0]
    clock.now += 1.0
    table["xgmi_read_data_acc"] = [5000000] * 6 + [NA64, NA64]
    first, _ = backend.sample()
    assert first.interconnect_rx_bytes_per_second is None  # not a rate over different links


@pytest.mark.parametrize("busy", [250, "0xFFFFFFFF"])  # amdsmi turns both into "N/A"
def test_implausible_or_missing_xcc_busy_is_left_out(busy):
    lib, backend = _sample("mi300x_cpx")
    for table in _metrics(lib, "0000:0c"):
        table["xcp_stats"][1]["gfx_busy_inst"][0] = busy
    devices = {d.id: d for d in backend.sample()}
    assert devices["a7ff74a1-0000-1000-807c-d0b8a1e2c3f4"].compute_active_percent is None
    # the board's mean is over the XCCs that reported: (328 - 88) / 7
    assert devices["amd:0000:0c:00"].compute_active_percent == round(240 / 7, 3)


def test_gpu_metrics_failing_degrades_only_that_reading():
    lib, backend = _sample("mi300x_spx")
    lib.devices[0]["amdsmi_get_gpu_metrics_info"] = "AMDSMI_STATUS_DRM_ERROR"
    first, second = backend.sample()
    assert first.compute_active_percent is None and first.utilization_percent == 87.0
    assert first.health == "degraded"
    assert any("GPU metrics failed" in w for w in backend.warnings)
    assert second.compute_active_percent == 0.0 and second.health == "ok"

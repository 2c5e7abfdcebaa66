"""Issue 19 item 7: a device held while its idleness is unknown (no utilization reported:
Tenstorrent, a MIG instance) has no idle-allocated counter, never one stuck at 0."""

from __future__ import annotations

import time

from allsmi.exporter.counters import UsageCounters
from allsmi.schema import ProcessSample

from .server import run_serve
from .support import T0, device, labelsets, snapshot, values

IDLE = "allsmi_device_idle_allocated_seconds_total"


def test_served_simulation_has_no_idle_counter_for_devices_without_utilization() -> None:
    server = run_serve(["--simulate", "mixed", "--interval", "0.5"])
    try:
        server.wait_listening()
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline:  # until the counters have integrated a few cycles
            try:
                response = server.get("/metrics")
            except OSError:  # not serving yet
                response = None
            if response is None or response.status != 200:
                time.sleep(0.2)
                continue
            text = response.text
            busy = values(text, "allsmi_device_busy_seconds_total", vendor="amd")
            if busy and max(busy.values()) > 0.5:
                break
            time.sleep(0.2)
        idle = values(text, IDLE)
        assert values(text, IDLE, vendor="amd"), "devices with utilization keep their counter"
        # Tenstorrent reports neither utilization nor activity: its idleness is unknown. A MIG
        # slice has no utilization but its own compute activity, which says whether it idles.
        blind = [lab["uuid"] for lab in labelsets(text, "allsmi_device_info")
                 if lab["vendor"] == "tenstorrent"]
        slices = [lab["uuid"] for lab in labelsets(text, "allsmi_device_info")
                  if " MIG " in lab.get("model", "")]
        assert len(blind) == 2 and len(slices) == 3
        assert not [uuid for uuid in blind if uuid in idle], idle
        assert all(uuid in idle for uuid in slices), idle
    finally:
        server.stop()


def test_held_time_of_unknown_idleness_ends_the_counter() -> None:
    """Unheld (a known 0), then held with utilization unknown: not a known 0 any more."""
    counters = UsageCounters(30.0)
    held = (ProcessSample(pid=7, user="ann"),)
    for t, procs, util in [(0, (), 30.0), (10, (), 30.0), (20, held, None), (30, held, None)]:
        counters.update(snapshot([device("GPU-a", utilization_percent=util, processes=procs,
                                         compute_active_percent=None)], at=T0 + t))
    assert counters.devices()["GPU-a"].idle_allocated_seconds is None
    # A device that never reports utilization never gets one, even unheld.
    counters = UsageCounters(30.0)
    for t in (0, 10, 20):
        counters.update(snapshot([device("tt-0", utilization_percent=None, processes=(),
                                         compute_active_percent=None)], at=T0 + t))
    assert counters.devices()["tt-0"].idle_allocated_seconds is None
    # One that reports it and idles while held counts it.
    counters = UsageCounters(30.0)
    for t in (0, 10, 20):
        counters.update(snapshot([device("GPU-b", utilization_percent=1.0, processes=held)], at=T0 + t))
    assert counters.devices()["GPU-b"].idle_allocated_seconds == 20.0

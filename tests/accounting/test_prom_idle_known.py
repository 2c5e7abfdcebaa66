"""Idle-allocated time from Prometheus where the idle counter is missing.

The exporter drops a device's ``allsmi_device_idle_allocated_seconds_total`` for good
once the device was held while its utilization was unknown (a counter cannot be unknown
for a while and then go on). A later window in which nobody held the device still has a
known idle-allocated time, 0, as the ledger books it; a window in which it was held has
an unknown one. Both paths (raw counters and hourly roll-ups) must say so.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from allsmi.accounting.periods import Window
from allsmi.accounting.promsource import prometheus_parts

DEVICE = {"uuid": "MIG-1", "instance": "n1:9477", "resource_group": "training",
          "vendor": "nvidia", "model": "NVIDIA H100 80GB HBM3 MIG 1g.10gb"}


class FakeClient:
    """Answers each query with the series of the first counter it names."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        for name, value in self.values.items():
            if name in promql:
                return [{"metric": dict(DEVICE), "value": [at, repr(value)]}]
        return []


def _window() -> Window:
    end = dt.datetime(2026, 11, 26, 12, tzinfo=dt.timezone.utc)
    return Window(end - dt.timedelta(hours=1), end)


@pytest.mark.parametrize(("allocated", "idle"), [(0.0, 0.0), (1200.0, None)],
                         ids=["never-held", "held-while-unknown"])
def test_a_missing_idle_counter_is_zero_only_when_nobody_held_the_device(
        allocated: float, idle: float | None) -> None:
    client = FakeClient({"allsmi_device_observed_seconds_total": 3600.0,
                         "allsmi_device_allocated_seconds_total": allocated})
    parts, _ = prometheus_parts(client, _window())  # type: ignore[arg-type]
    assert len(parts) == 1
    assert parts[0].allocated_s == allocated
    assert parts[0].idle_s == idle

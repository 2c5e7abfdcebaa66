"""Every measured figure is kept in one range, the same wherever it is read: a sample a backend
builds (``DeviceSample``), a copy with changed fields (``derive``, as a replay makes), a peer's
snapshot and a Prometheus sample read back (``allsmi.snapshot_parse``). A value outside it is
``None`` in all of them. Before, the schema kept any finite temperature and any watts, fan or
utilization above zero, which a peer then dropped as out of range: a -273 °C sentinel showed on
the node and not in the cluster view, and a node and its peers disagreed."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from allsmi.schema.fields import BY_FIELD, MEASURED_FIELDS
from allsmi.output import snapshot_dict, snapshot_from_dict
from allsmi.schema import DEVICE_RANGES, DeviceSample, HostSample, Snapshot, derive
from allsmi.snapshot_parse import checked_measurement

from .pluginsite import plugin_site

RANGED = [m for m in MEASURED_FIELDS if not m.field.endswith("_bytes")]


def _device(**fields: Any) -> DeviceSample:
    return DeviceSample(id="X-1", vendor="acme", kind="gpu", backend="acme", **fields)


def _read_by_a_peer(field: str, value: Any) -> Any:
    """``field`` of a snapshot document holding ``value`` as a peer reads it."""
    doc = snapshot_dict(Snapshot(timestamp=dt.datetime.now(dt.timezone.utc), host=HostSample(hostname="n"),
                                 devices=(_device(),), backends=()))
    doc["devices"][0][field] = value
    problems: list[str] = []
    return getattr(snapshot_from_dict(doc, problems).devices[0], field)


def _cases(field: str) -> list[tuple[Any, bool]]:
    """(value, kept) at and just beyond each end of ``field``'s range."""
    low, high = BY_FIELD[field].minimum, BY_FIELD[field].maximum
    assert low is not None
    cases: list[tuple[Any, bool]] = [(low, True), (float(low), True), (low - 0.5, False),
                                     (low - 1, False), (float("nan"), False),
                                     (float("inf"), False), (float("-inf"), False)]
    if high is not None:
        cases += [(high, True), (float(high), True), (high + 0.5, False), (int(high) + 1, False)]
    else:
        cases += [(1e18, True)]
    return cases


@pytest.mark.parametrize("field", [m.field for m in RANGED])
def test_a_figure_outside_its_range_is_unknown_wherever_it_is_read(field: str) -> None:
    for value, kept in _cases(field):
        expect = float(value) if kept else None
        assert getattr(_device(**{field: value}), field) == expect, (field, value)
        assert getattr(derive(_device(), **{field: value}), field) == expect, (field, value)
        assert _read_by_a_peer(field, value) == expect, (field, value)
        assert checked_measurement(field, value, "x") == expect, (field, value)


def test_the_schema_and_the_field_declarations_name_the_same_ranges() -> None:
    """Declared once: the schema's ranges are the declarations' (docs, backends, contract
    tests and the parser read them there)."""
    for m in RANGED:
        low, high = DEVICE_RANGES[m.field]
        assert (m.minimum, m.maximum) == (low, None if high > 1e300 else high), m.field


PLUGIN = '''
    from allsmi.backend_api import Backend, ProbeResult
    from allsmi.schema import DeviceSample

    class Odd(Backend):
        name = "zzodd"
        vendor = "zz"
        def probe(self): return ProbeResult(True)
        def open(self): pass
        def sample(self):
            return [DeviceSample(id="zz:0", vendor="zz", kind="gpu", backend="zzodd",
                                 temperature_celsius=-273, fan_percent=110.0, power_watts=6000.0,
                                 utilization_percent=101, clock_mhz=1410,
                                 power_limit_watts=700)]
'''


def test_a_plug_in_s_sentinels_are_unknown_in_the_snapshot(tmp_path: Path) -> None:
    """From the outside: ``allsmi snapshot`` of a plug-in reporting -273 °C, a fan at 110 %,
    6000 W and 101 % shows them unknown (``null``), and keeps its plausible figures."""
    env, _ = plugin_site(tmp_path, "zzodd", "[allsmi.backends]\nzzodd = zzodd:Odd\n",
                         {"zzodd": PLUGIN})
    config = tmp_path / "config.toml"
    config.write_text('[backends]\nenabled = ["zzodd"]\n')
    result = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--format", "json",
                             "--config", str(config)],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    (device,) = json.loads(result.stdout)["devices"]
    assert (device["temperature_celsius"], device["fan_percent"], device["power_watts"],
            device["utilization_percent"]) == (None, None, None, None), device
    assert (device["clock_mhz"], device["power_limit_watts"]) == (1410.0, 700.0), device

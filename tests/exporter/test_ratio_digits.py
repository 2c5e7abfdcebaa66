"""A percent exported as a ratio is the ratio's shortest decimal: 57 % is ``0.57`` and 75.15 %
``0.7515``, where multiplying by 0.01 gave ``0.5700000000000001`` and ``0.7515000000000001`` (read over HTTP from ``allsmi serve``)."""
from __future__ import annotations

import re

from allsmi.schema.fields import MEASUREMENTS, to_base
from .server import run_serve


def test_every_whole_percent_is_its_shortest_ratio() -> None:
    percent_scales = {m.scale for m in MEASUREMENTS if m.unit == "percent"}
    assert percent_scales == {0.01}
    for whole in range(101):
        assert repr(to_base(float(whole), 0.01)) == repr(whole / 100)
    assert to_base(57.0, 0.01) == 0.57 and repr(57.0 * 0.01) != "0.57"  # (the defect's cause)
    assert repr(to_base(75.15, 0.01)) == "0.7515" and repr(75.15 / 100) != "0.7515"
    assert repr(to_base(1e-7, 0.01)) == "1e-09" and to_base(float("inf"), 0.01) == float("inf")
    assert to_base(1830.0, 1e6) == 1830e6


def test_the_exposition_has_no_float_noise_in_ratios() -> None:
    server = run_serve(["--simulate", "mixed", "--interval", "0.5"])
    try:
        server.wait_ready()
        text = server.get("/metrics").body.decode()
    finally:
        assert server.stop() == 0, server.output()
    ratios = re.findall(r"^allsmi_device_(?:utilization|fan|compute_active)_ratio\{[^}]*\} (\S+)$",
                        text, re.MULTILINE)
    assert ratios, text[:2000]
    for value in ratios:
        # a simulated reading has at most a few decimals: its ratio never ends in float noise
        assert not re.search(r"(0000\d|9999\d)", value), value

"""Numbers of another type than ``int`` and ``float`` from a plug-in backend (numpy's
``float32`` and ``int64``, a ``Fraction``: real numbers all, registered with :mod:`numbers`) are
kept as Python numbers at the schema boundary, never dropped as unknown; a bool or text still is.
(numpy registers its scalar types with :mod:`numbers` as ``Fraction`` is registered; numpy is not
installed for the tests, so a ``Fraction`` stands for them.)"""

from __future__ import annotations

from fractions import Fraction

from allsmi.schema import DeviceSample


def _device(**fields: object) -> DeviceSample:
    return DeviceSample(id="X-1", vendor="acme", kind="npu", backend="acme", **fields)  # type: ignore[arg-type]


def test_a_fraction_is_a_number() -> None:
    dev = _device(utilization_percent=Fraction(91, 2), power_watts=Fraction(301, 2),
                  memory_used_bytes=Fraction(1024), temperature_celsius=Fraction(-3),
                  partition_share=Fraction(1, 4))
    assert (dev.utilization_percent, dev.power_watts, dev.memory_used_bytes,
            dev.temperature_celsius, dev.partition_share) == (45.5, 150.5, 1024, -3.0, 0.25)
    assert type(dev.utilization_percent) is float and type(dev.memory_used_bytes) is int


def test_a_bool_or_text_is_still_unknown() -> None:
    dev = _device(utilization_percent=True, power_watts="150", memory_used_bytes=b"1", index="3")
    assert (dev.utilization_percent, dev.power_watts, dev.memory_used_bytes, dev.index) == (
        None, None, None, None)

"""assign_groups with the collector's memo of rule verdicts: the same groups and labels as
without it, cycle after cycle, for devices, partitions and devices whose facts change."""

from __future__ import annotations

from allsmi.config import parse_config
from allsmi.collection.groups import MEMO_SIZE, assign_groups
from allsmi.schema import DeviceSample

CONFIG = parse_config("""\
[groups.training]
labels = { team = "ml" }
[groups.inference]
labels = { team = "serving" }
[[rules]]
resource_group = "training"
index = "[0-3]"
vendor = "nvidia"
[[rules]]
resource_group = "inference"
model = "*MI300*"
""")


def _devices(model: str = "AMD Instinct MI300X") -> list[DeviceSample]:
    return [DeviceSample(id="gpu0", vendor="nvidia", kind="gpu", backend="nvml", index=0,
                         name="H100", bus_id="0000:01:00.0"),
            DeviceSample(id="gpu5", vendor="nvidia", kind="gpu", backend="nvml", index=5,
                         name="H100", bus_id="0000:05:00.0"),
            DeviceSample(id="mig0", vendor="nvidia", kind="gpu", backend="nvml", index=0,
                         name="H100 MIG 1g.10gb", parent="gpu5"),
            DeviceSample(id="amd0", vendor="amd", kind="gpu", backend="amdsmi", index=0,
                         name=model)]


def _groups(devices: tuple[DeviceSample, ...]) -> list[tuple[str | None, dict]]:
    return [(d.resource_group, dict(d.labels)) for d in devices]


def test_the_memo_changes_no_verdict_cycle_after_cycle() -> None:
    memo: dict = {}
    plain = _groups(assign_groups(_devices(), "node", CONFIG))
    assert plain[0] == ("training", {"team": "ml"})
    assert plain[2][0] == plain[1][0] == CONFIG.default_group  # GPU 5's instance 0 is not GPU 0
    assert plain[3] == ("inference", {"team": "serving"})
    for _ in range(3):
        assert _groups(assign_groups(_devices(), "node", CONFIG, memo)) == plain
    assert 0 < len(memo) <= 4
    # a device whose facts change (another model, another host) gets the new verdict
    moved = _groups(assign_groups(_devices("AMD Instinct MI250"), "node", CONFIG, memo))
    assert moved[3][0] == CONFIG.default_group
    other_host = assign_groups(_devices(), "other", CONFIG, memo)
    assert _groups(other_host) == plain and {d.id for d in other_host} == {d.id for d in _devices()}


def test_the_memo_is_bounded() -> None:
    memo: dict = {}
    for i in range(MEMO_SIZE + 10):
        assign_groups([DeviceSample(id=f"d{i}", vendor="amd", kind="gpu", backend="amdsmi",
                                    index=i, name="AMD Instinct MI300X")], "node", CONFIG, memo)
    assert len(memo) <= MEMO_SIZE

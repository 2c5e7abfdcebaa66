"""Assigning devices to resource groups (first matching rule wins)."""

from __future__ import annotations

from typing import Iterable

from allsmi.config import Config
from allsmi.schema import DeviceSample, derive


def _facts(dev: DeviceSample, hostname: str) -> dict[str, str | None]:
    return {"host": hostname, "vendor": dev.vendor, "backend": dev.backend, "model": dev.name, "uuid": dev.uuid or dev.id,
            "index": None if dev.index is None else str(dev.index), "bus_id": dev.bus_id}


#: Entries a ``memo`` of :func:`assign_groups` holds before it starts afresh.
MEMO_SIZE = 4096


def assign_groups(devices: Iterable[DeviceSample], hostname: str,
                  config: Config, memo: dict[tuple[object, ...], str] | None = None
                  ) -> tuple[DeviceSample, ...]:
    """Set ``resource_group`` and the group's ``labels`` on each device (see
    :func:`group_names`)."""
    devices = tuple(devices)
    return tuple(derive(dev, resource_group=group, labels=dict(config.group(group).labels))
                 for dev, group in zip(devices, group_names(devices, hostname, config, memo)))


def group_names(devices: Iterable[DeviceSample], hostname: str,
                config: Config, memo: dict[tuple[object, ...], str] | None = None) -> list[str]:
    """Each device's resource group, in order (the collector sets it with the device's other
    changes of the cycle, in one copy).

    Rules are tried in order and the first match wins. A partition matches
    ``index`` and ``bus_id`` against its parent's (its own index counts within
    the parent, so "GPU 0-3" must not catch instance 0 of GPU 5); one that no
    rule matches stays in its parent's group. Anything else falls to the
    node's default group.

    ``memo`` (a dict the caller keeps for one ``config``) remembers each rule's verdict by the
    facts it was given: devices seldom change them, and every device is assigned every cycle.
    """
    out: list[str] = []
    by_id: dict[str, str] = {}
    physical: dict[str, DeviceSample] = {}
    for dev in devices:
        facts = _facts(dev, hostname)
        parent = physical.get(dev.parent or "")
        if parent is not None:
            facts["index"] = None if parent.index is None else str(parent.index)
            facts["bus_id"] = parent.bus_id
        else:
            physical[dev.id] = dev
        if memo is None:
            group = next((r.resource_group for r in config.rules if r.matches(facts)), None)
        else:
            key = tuple(facts.values())
            group = memo.get(key, memo)  # type: ignore[arg-type]
            if group is memo:
                group = next((r.resource_group for r in config.rules if r.matches(facts)), None)
                if len(memo) >= MEMO_SIZE:
                    memo.clear()
                memo[key] = group  # type: ignore[assignment]
        if group is None:
            group = by_id.get(dev.parent or "", config.default_group)
        by_id[dev.id] = group
        out.append(group)
    return out

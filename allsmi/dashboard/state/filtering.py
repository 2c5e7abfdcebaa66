"""What the user narrowed the view to (``/``, ``v``, ``f``, a drill-down with ``Enter``), and
which devices pass: plain functions over :class:`~allsmi.dashboard.state.model.DeviceRef`,
tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

if TYPE_CHECKING:
    from allsmi.dashboard.state.model import DeviceRef

#: ``Filter.group`` of the devices that have no resource group (the groups view's ``N/A`` row).
NO_GROUP = ""


@dataclass(frozen=True)
class Filter:
    """What the user narrowed the view to; empty fields match everything."""

    text: str = ""
    vendor: str | None = None
    group: str | None = None
    """A resource group; :data:`NO_GROUP` for the devices without one; ``None``: any."""
    host: str | None = None
    devices: frozenset[str] = frozenset()
    """Row keys of the devices a drill-down shows (a holder's idle devices); empty: any."""
    label: str = ""
    """What :attr:`devices` are, for the state line (``holder='job 4931180'``)."""

    @property
    def active(self) -> bool:
        """Whether anything is filtered out."""
        return bool(self.text or self.vendor or self.group is not None or self.host
                    or self.devices)

    def describe(self) -> str:
        """A short human description ("vendor=amd text='mi300'"), empty when inactive."""
        parts = []
        if self.host:
            parts.append(f"host={self.host}")
        if self.devices:
            parts.append(f"holder={self.label!r}" if self.label else f"devices={len(self.devices)}")
        if self.vendor:
            parts.append(f"vendor={self.vendor}")
        if self.group is not None:
            parts.append(f"group={self.group or 'N/A'}")
        if self.text:
            parts.append(f"text={self.text!r}")
        return " ".join(parts)

    def matches(self, ref: DeviceRef, places: Mapping[str, str] | None = None,
                hosts: Mapping[str, str] | None = None) -> bool:
        """Whether this one device passes (partitions are handled by :func:`apply_filter`);
        ``places``: row key -> the device's name after its vendor, ``hosts``: host key -> the
        name its host column shows (the hostname it reports), which the text finds too."""
        dev = ref.device
        if self.host is not None and ref.host != self.host:
            return False
        if self.devices and ref.key not in self.devices:
            return False
        if self.vendor is not None and dev.vendor != self.vendor:
            return False
        if self.group is not None and (dev.resource_group or NO_GROUP) != self.group:
            return False
        if self.text:
            return text_matches(ref, self.text, places, hosts)
        return True


def text_matches(ref: DeviceRef, text: str, places: Mapping[str, str] | None = None,
                 hosts: Mapping[str, str] | None = None) -> bool:
    """Whether the text filter ``text`` finds the device (any of :func:`_haystack`), by its
    name too (``nvidia 7/1``, from ``places``: :mod:`allsmi.dashboard.state.naming`) and by the
    name of its host as the host column shows it (``hosts``: host key -> hostname)."""
    needle = text.lower()
    place = places.get(ref.key) if places else None
    if place is not None and needle in f"{ref.device.vendor} {place}".lower():
        return True
    shown = hosts.get(ref.host) if hosts else None
    if shown is not None and needle in shown.lower():
        return True
    return any(needle in hay.lower() for hay in _haystack(ref))


def filter_choices(refs: Sequence[DeviceRef], flt: Filter, dimension: str,
                   places: Mapping[str, str] | None = None,
                   hosts: Mapping[str, str] | None = None) -> list[str]:
    """The values of ``dimension`` (``"vendor"`` or ``"group"``) that the devices passing the
    rest of ``flt`` have, sorted: what cycling that filter can choose without emptying the view
    (``f`` after ``v`` offers only the chosen vendor's groups). Devices without a group are
    offered last (:data:`NO_GROUP`, ``group=N/A``) beside at least one group. ``places`` and
    ``hosts``: the names the text finds (:func:`text_matches`), as in the view."""
    rest = replace(flt, **{dimension: None})
    values = {(ref.device.vendor if dimension == "vendor" else ref.device.resource_group)
              for ref in refs if rest.matches(ref, places, hosts)}
    choices = sorted(v for v in values if v)
    if dimension == "group" and choices and (None in values or NO_GROUP in values):
        choices.append(NO_GROUP)
    return choices


def _haystack(ref: DeviceRef) -> Iterator[str]:
    dev = ref.device
    yield ref.host
    for value in (dev.vendor, dev.name, dev.id, dev.uuid, dev.bus_id, dev.backend,
                  dev.resource_group, dev.health, dev.kind):
        if value:
            yield value
    if dev.index is not None:
        yield f"{dev.vendor}:{dev.index}"
    yield from dev.labels.values()
    for proc in dev.processes or ():
        yield str(proc.pid)
        for value in (proc.user, proc.command, proc.job_id, proc.pod_uid):
            if value:
                yield value
    for work in dev.workloads or ():
        for value in (work.namespace, work.pod, work.container, work.job_id, work.user):
            if value:
                yield value


def apply_filter(refs: Sequence[DeviceRef], flt: Filter, places: Mapping[str, str] | None = None,
                 hosts: Mapping[str, str] | None = None) -> list[DeviceRef]:
    """Devices passing ``flt`` (its text finds their names by ``places`` and their hosts' by
    ``hosts``: :func:`text_matches`); a partition comes
    along with a matching parent, and a matching partition brings its parent for context."""
    if not flt.active:
        return list(refs)
    by_id = {(r.host, r.device.id): r for r in refs}
    keep: set[tuple[str, str]] = set()
    for ref in refs:
        if flt.matches(ref, places, hosts):
            keep.add((ref.host, ref.device.id))
            parent = ref.device.parent
            if parent is not None and (ref.host, parent) in by_id:
                keep.add((ref.host, parent))
    for ref in refs:
        parent = ref.device.parent
        if parent is not None and (ref.host, parent) in keep and flt.matches(by_id[(ref.host, parent)], places, hosts):
            keep.add((ref.host, ref.device.id))
    return [r for r in refs if (r.host, r.device.id) in keep]

"""Synthetic snapshots with exact timestamps, for ledger arithmetic."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

from allsmi.accounting.ledger.store import Ledger
from allsmi.accounting.periods import Window
from allsmi.accounting.recorder import LedgerRecorder
from allsmi.backend_api import Backend, ProbeResult
from allsmi.config import Config, parse_config
from allsmi.schema import DeviceSample, HostSample, ProcessSample, Snapshot

UTC = dt.timezone.utc
#: 2026-03-02T00:00:00Z: a quarter-hour and day boundary.
T0 = 1_772_409_600.0


def device(dev_id: str = "GPU-a", *, power: float | None = None, energy: float | None = None,
           util: float | None = None, users: Iterable[str | None] = (), group: str = "default",
           labels: dict[str, str] | None = None, parent: str | None = None,
           health: str = "ok", memory: int | None = None, vendor: str = "nvidia",
           model: str = "H100") -> DeviceSample:
    """One device sample; ``users`` become one process each."""
    procs = tuple(ProcessSample(pid=100 + i, user=u) for i, u in enumerate(users))
    return DeviceSample(id=dev_id, vendor=vendor, kind="gpu", backend=vendor, name=model,
                        uuid=dev_id, parent=parent, resource_group=group, labels=labels or {},
                        health=health, utilization_percent=util, power_watts=power,
                        energy_joules=energy, processes=procs, memory_used_bytes=memory)


def snap(when: float, *devices: DeviceSample, host: str = "node1") -> Snapshot:
    """A snapshot at unix time ``when``."""
    return Snapshot(timestamp=dt.datetime.fromtimestamp(when, UTC), host=HostSample(hostname=host),
                    devices=tuple(devices))


def config(text: str = "") -> Config:
    """A Config from TOML text."""
    return parse_config(text)


def record(path: Path, snapshots: Iterable[Snapshot], cfg: Config | None = None,
           close: bool = True) -> LedgerRecorder:
    """Feed snapshots to a fresh recorder on ``path``."""
    rec = LedgerRecorder(path, cfg or config())
    for s in snapshots:
        rec.on_snapshot(s)
    if close:
        rec.close()
    return rec


def window(start: float, end: float) -> Window:
    """A UTC window from unix seconds."""
    return Window(dt.datetime.fromtimestamp(start, UTC), dt.datetime.fromtimestamp(end, UTC))


def rows(path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Raw SQL on the ledger, read-only."""
    import sqlite3
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def open_ro(path: Path) -> Ledger:
    """The ledger, read-only."""
    return Ledger(path, readonly=True)


# -- a collector on injected clocks, recording to a real ledger ---------------------------------

class SteadyBackend(Backend):
    """A backend that reports the same devices every cycle."""

    name = "steady"
    vendor = "nvidia"

    def __init__(self, devices: list[DeviceSample]) -> None:
        self.devices = devices

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> list[DeviceSample]:
        return list(self.devices)


class Clocks:
    """A wall clock the test steps (starting 5 s after :data:`T0`), and a monotonic clock that
    never steps; both advance by ``steady``."""

    def __init__(self) -> None:
        self.steady = 1000.0
        self.offset = T0 + 5 - self.steady

    def wall(self) -> float:
        return self.steady + self.offset

    def monotonic(self) -> float:
        return self.steady


def export_first_hour(tmp_path: Path, db: Path,
                      since: str = "2026-03-02T00:00:00Z") -> dict[str, Any]:
    """The one resource-group row ``allsmi export --ledger DB`` bills for the hour from
    :data:`T0` (from ``since`` to the end of that hour: exit 0, or 3 for a partial window)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_CONFIG": ""}
    out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--ledger", str(db),
                          "--since", since, "--until", "2026-03-02T01:00:00Z",
                          "--format", "json", "--group-by", "resource_group"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 3), out.stderr
    return json.loads(out.stdout)["rows"][0]  # type: ignore[no-any-return]

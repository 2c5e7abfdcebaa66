#!/usr/bin/env python3
"""The accounting ledger at fleet scale: export time, ledger size, and the CPU cost of recording.

1. Builds a ledger of 1024 devices (128 hosts) over 30 days: the last
   ``--raw-days`` days (the default retention) as raw one-minute intervals
   written exactly as the recorder writes them (one transaction per minute,
   roll-ups included), the older days as quarter-hour roll-ups inserted
   directly and rolled up into days. Each device runs jobs of 10 min to 2 h
   (one user, sometimes two) 70 % of the time. Reports the write time per minute, the file size, and the time of
   ``allsmi export`` (a subprocess, as cron runs it) for the whole 30 days,
   grouped by the default keys and by user. Peer: a bare ``SELECT SUM`` over
   every quarter-hour roll-up of the window (the floor for an export without
   the daily roll-ups).
2. Measures the recorder's ``on_snapshot`` CPU time per cycle at a 1 s
   interval, with the 37 devices of the ``mixed`` simulated node and with 1024
   devices (the node replicated), as a share of one core. Peer: the shared
   ``UsageIntegrator.update`` alone (what the exporter's counters pay anyway).
3. The cost of making the minute in progress durable (``[ledger] checkpoint_seconds``, 5 s by
   default: a crash loses seconds, not the minute): the same recording with checkpoints off,
   in the same run, as the peer.

Usage::

    python benchmarks/ledger.py [--devices 1024] [--days 30] [--raw-days 2] [--dir DIR]
    python benchmarks/ledger.py --recording-only [--cycles 600]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import describe  # noqa: E402

from allsmi.accounting.ledger.store import Dim, Holder, IntervalRecord, Ledger, Share, labels_json  # noqa: E402
from allsmi.accounting.recorder import LedgerRecorder  # noqa: E402
from allsmi.accounting.settings import ROLLUP_SECONDS  # noqa: E402
from allsmi.backends.simulated import simulated_backends  # noqa: E402
from allsmi.config import parse_config  # noqa: E402
from allsmi.collection.groups import assign_groups  # noqa: E402
from allsmi.schema import HostSample, Snapshot  # noqa: E402
from allsmi.usage import UsageIntegrator  # noqa: E402

UTC = dt.timezone.utc
END = dt.datetime(2026, 4, 1, tzinfo=UTC)
MODELS = [("nvidia", "NVIDIA H100 80GB HBM3", 700.0), ("amd", "AMD Instinct MI300X", 750.0),
          ("intel", "HL-325L", 850.0), ("furiosa", "RNGD", 180.0)]
GROUPS = [("training", {"team": "ml"}), ("inference", {"team": "serving"}),
          ("research", {"team": "lab"}), ("default", {})]
USERS = ["alice", "bob", "carol", "dmitri", "eun-ji", "farah", "gus", "svc-inference"]
CONFIG = """
[groups.training]
labels = { team = "ml" }
price_per_device_hour = 2.5
price_per_kwh = 0.3
currency = "EUR"
[groups.inference]
labels = { team = "serving" }
price_per_device_hour = 1.5
currency = "EUR"
[groups.research]
labels = { team = "lab" }
"""


def dims(devices: int) -> list[Dim]:
    out = []
    for i in range(devices):
        vendor, model, _ = MODELS[i % len(MODELS)]
        group, labels = GROUPS[(i // 8) % len(GROUPS)]
        out.append(Dim(f"dev-{i:05d}", f"node-{i // 8:03d}", vendor, model, "", group,
                       labels_json(labels)))
    return out


class Timeline:
    """One device's jobs: busy stretches of 10 min to 2 h with one user (sometimes two), idle gaps."""

    def __init__(self, rng: random.Random, start: int) -> None:
        self.rng = rng
        self.until = start
        self.users: tuple[str, ...] = ()
        self.util = 0.0

    def at(self, t: int) -> tuple[tuple[str, ...], float]:
        while t >= self.until:
            if self.rng.random() < 0.7:
                self.users = tuple(self.rng.sample(USERS, 2 if self.rng.random() < 0.2 else 1))
                # One job in seven holds its devices and leaves them idle (a notebook, a hung job).
                self.util = 0.01 if self.rng.random() < 0.15 else self.rng.uniform(0.3, 0.95)
                self.until += self.rng.randrange(600, 7200)
            else:
                self.users, self.util = (), 0.0
                self.until += self.rng.randrange(300, 3600)
        return self.users, self.util


def minute_record(line: Timeline, dim: Dim, start: int, peak: float) -> IntervalRecord:
    owners, util = line.at(start)
    energy = int((0.15 + 0.8 * util) * peak * 60 * 1000)
    n = max(1, len(owners))
    idle = 60000 if owners and util < 0.05 else 0
    holders = {Holder(user=u, job=str(41000 + USERS.index(u))): Share(
        60000 // n, 60000 // n, int(util * 60000) // n, energy // n, 60000 // n, idle // n,
        idle // n, energy * idle // 60000 // n) for u in owners}
    return IntervalRecord(start=start, dim=dim, first_ms=0, last_ms=60000, observed_ms=60000,
                          allocated_ms=60000 if owners else 0, busy_ms=int(util * 60000),
                          busy_observed_ms=60000, energy_mj=energy,
                          mem_sum=int((8 + 60 * util) * 2**30) * 60, mem_samples=60,
                          mem_peak=int((8 + 64 * util) * 2**30), holders=holders,
                          billed_ms=60000 if owners else 0, idle_ms=idle, idle_billed_ms=idle,
                          idle_energy_mj=energy * idle // 60000)


SHARE_COLUMNS = ("observed_ms", "allocated_ms", "busy_ms", "energy_mj", "billed_ms", "idle_ms",
                 "idle_billed_ms", "idle_energy_mj")


def build(path: Path, devices: int, days: int, raw_days: int) -> tuple[float, float]:
    """Fill the ledger; return (median seconds per minute transaction, total build seconds)."""
    rng = random.Random(7)
    end = int(END.timestamp())
    raw_start = end - raw_days * 86400
    start = end - days * 86400
    all_dims = dims(devices)
    peaks = {d: MODELS[i % len(MODELS)][2] for i, d in enumerate(all_dims)}
    lines = {d: Timeline(rng, start) for d in all_dims}
    began = time.perf_counter()
    ledger = Ledger(path)
    db = ledger._db  # the benchmark inserts old roll-ups directly; the recorder never does this
    db.execute("BEGIN")
    for d in all_dims:
        ledger._dim(d)
    rows: list[tuple[int, ...]] = []
    user_rows: list[tuple[int, ...]] = []
    for q in range(start, raw_start, ROLLUP_SECONDS):
        for d in all_dims:
            minutes = [minute_record(lines[d], d, q + 60 * k, peaks[d]) for k in range(0, 15, 5)]
            scale = 5  # three sampled minutes stand for fifteen
            dim_id = ledger._dim_ids[d]
            total = lambda name: scale * sum(getattr(m, name) or 0 for m in minutes)  # noqa: E731
            rows.append((q, dim_id, 900000, total("allocated_ms"), total("busy_ms"), 900000,
                         total("energy_mj"), total("mem_sum"), 900, 80 * 2**30,
                         total("billed_ms"), total("idle_ms"), total("idle_billed_ms"),
                         total("idle_energy_mj")))
            shares: dict[Holder, list[int]] = {}
            for m in minutes:
                for h, sh in m.holders.items():
                    acc = shares.setdefault(h, [0] * len(SHARE_COLUMNS))
                    for k, name in enumerate(SHARE_COLUMNS):
                        acc[k] += scale * (getattr(sh, name) or 0)
            user_rows.extend((q, dim_id, ledger._hid(h), *v) for h, v in shares.items())
        if len(rows) > 200_000 or q + ROLLUP_SECONDS >= raw_start:
            db.executemany("INSERT INTO quarters (start, dim, observed_ms, allocated_ms, busy_ms, "
                           "busy_observed_ms, energy_mj, mem_sum, mem_samples, mem_peak, "
                           "billed_ms, idle_ms, idle_billed_ms, idle_energy_mj) "
                           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            db.executemany(f"INSERT INTO holder_quarters (start, dim, hid, {', '.join(SHARE_COLUMNS)}) "
                           f"VALUES ({', '.join('?' * (3 + len(SHARE_COLUMNS)))})", user_rows)
            rows, user_rows = [], []
    for day in range(start, raw_start, 86400):  # the daily roll-ups the recorder would have made
        db.execute("INSERT INTO pending (tier, start) VALUES (86400, ?)", (day,))
    ledger._roll_up(raw_start)
    db.execute("COMMIT")
    per_minute = []
    for minute in range(raw_start, end + 60, 60):
        records = [minute_record(lines[d], d, minute, peaks[d]) for d in all_dims]
        t = time.perf_counter()
        ledger.write(records, minute + 60, retention_days=raw_days)
        per_minute.append(time.perf_counter() - t)
    ledger.close()
    return statistics.median(per_minute), time.perf_counter() - began


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def time_export(path: Path, cfg: Path, group_by: str, runs: int = 3) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--ledger", str(path),
                              "--config", str(cfg), "--since", "2026-03-02T00:00:00Z",
                              "--until", "2026-04-01T00:00:00Z", "--group-by", group_by,
                              "--coverage-threshold", "0"], capture_output=True, text=True,
                             timeout=600)
        times.append(time.perf_counter() - t)
        if out.returncode != 0:
            raise SystemExit(f"export failed: {out.stderr}")
        rows = out.stdout.count("\n") - 1
    return statistics.median(times), rows


def peer_scan(path: Path) -> float:
    import sqlite3
    times = []
    for _ in range(3):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        t = time.perf_counter()
        db.execute("SELECT SUM(observed_ms), SUM(allocated_ms), SUM(energy_mj) FROM quarters "
                   "WHERE start >= ? AND start < ?",
                   (int(END.timestamp()) - 30 * 86400, int(END.timestamp()))).fetchone()
        times.append(time.perf_counter() - t)
        db.close()
    return statistics.median(times)


def snapshots(replicas: int, cycles: int, start: float) -> list[Snapshot]:
    now = [start]
    backends = simulated_backends("mixed", clock=lambda: now[0])
    for b in backends:
        b.open()
    cfg = parse_config(CONFIG)
    out = []
    for i in range(cycles):
        now[0] = start + i
        devices = assign_groups([d for b in backends for d in b.sample()], "node1", cfg)
        if replicas > 1:
            devices = tuple(dataclasses.replace(d, id=f"{d.id}#{r}",
                                                parent=None if d.parent is None else f"{d.parent}#{r}")
                            for r in range(replicas) for d in devices)
        out.append(Snapshot(timestamp=dt.datetime.fromtimestamp(now[0], UTC),
                            host=HostSample("node1"), devices=tuple(devices)))
    return out


def recording_cost(tmp: Path, replicas: int, cycles: int,
                   checkpoint_seconds: float | None = None) -> tuple[int, float, float, float]:
    """(devices, mean CPU s per cycle, flushes included; the same for the integrator alone;
    the worst cycle). ``checkpoint_seconds``: ``[ledger] checkpoint_seconds`` (default 5)."""
    snaps = snapshots(replicas, cycles, END.timestamp() - 7200)
    text = CONFIG if checkpoint_seconds is None else \
        CONFIG + f"\n[ledger]\ncheckpoint_seconds = {checkpoint_seconds}\n"
    recorder = LedgerRecorder(tmp / f"rec-{replicas}-{checkpoint_seconds}.db", parse_config(text))
    costs = []
    for s in snaps:
        t = time.process_time()
        recorder.on_snapshot(s)
        costs.append(time.process_time() - t)
    recorder.close()
    integrator = UsageIntegrator()
    peer = []
    for s in snaps:
        t = time.process_time()
        integrator.update(s)
        peer.append(time.process_time() - t)
    return len(snaps[0].devices), sum(costs) / len(costs), sum(peer) / len(peer), max(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--raw-days", type=int, default=2)
    parser.add_argument("--cycles", type=int, default=600, help="recording cycles (1 s each)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the ledgers are written (made if missing; default: a temporary "
                             "directory)")
    parser.add_argument("--recording-only", action="store_true",
                        help="only the recording cost, with and without checkpoints")
    args = parser.parse_args()
    print(f"machine: {describe()}")
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmpdir:
        tmp = Path(tmpdir)
        for replicas in (1, 28):
            off = recording_cost(tmp, replicas, args.cycles, 0)
            on = recording_cost(tmp, replicas, args.cycles, 5)
            print(f"checkpoints, {on[0]} devices at 1 s: every 5 s {on[1] * 1000:.3f} ms CPU per "
                  f"cycle ({on[1] * 100:.3f} % of a core; worst {on[3] * 1000:.1f} ms); peer, "
                  f"whole minutes only: {off[1] * 1000:.3f} ms (worst {off[3] * 1000:.1f} ms); "
                  f"ratio {on[1] / off[1]:.2f}x")
        if args.recording_only:
            return
        cfg = tmp / "config.toml"
        cfg.write_text(CONFIG)
        path = tmp / "ledger.db"
        per_minute, built = build(path, args.devices, args.days, args.raw_days)
        print(f"ledger: {args.devices} devices x {args.days} days ({args.raw_days} days raw minutes, "
              f"the rest quarter-hour roll-ups): {size(path) / 2**20:.0f} MiB, built in {built:.0f} s; "
              f"one minute of {args.devices} devices written in {per_minute * 1000:.1f} ms (median)")
        for group_by in ("resource_group,vendor,model,host", "resource_group,user", "resource_group,job"):
            seconds, rows = time_export(path, cfg, group_by)
            print(f"export 30 days --group-by {group_by}: {seconds:.2f} s median of 3 ({rows} rows)")
        peer = peer_scan(path)
        seconds, _ = time_export(path, cfg, "resource_group", runs=3)
        print(f"export 30 days --group-by resource_group: {seconds:.2f} s; peer (a bare SUM over "
              f"every quarter-hour roll-up of the window, the floor without daily roll-ups): "
              f"{peer:.2f} s; ratio {seconds / peer:.2f}x")
        for replicas in (1, 28):
            n, cost, integ, worst = recording_cost(tmp, replicas, args.cycles)
            print(f"recording {n} devices at 1 s: {cost * 1000:.3f} ms CPU per cycle on average "
                  f"({cost * 100:.3f} % of a core; worst cycle, a minute flush: {worst * 1000:.1f} ms); "
                  f"peer UsageIntegrator.update alone {integ * 1000:.3f} ms; ratio {cost / integ:.1f}x")


if __name__ == "__main__":
    os.environ.setdefault("XDG_CONFIG_HOME", tempfile.gettempdir())
    main()

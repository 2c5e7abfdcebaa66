"""VictoriaMetrics and vmalert on loopback for the long-term store tests (Debian package
``victoria-metrics``): started, waited for and stopped here, as tests/prometheus_server.py does
for Prometheus. Skips where the binaries are absent (fails under CI)."""

from __future__ import annotations

import contextlib
import subprocess
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

from .conftest import require_tool
from .prometheus_server import free_port, running_server


@contextlib.contextmanager
def running_victoriametrics(workdir: Path, targets: Sequence[str] = (),
                            scrape_interval: str = "1s", dedup: bool = True) -> Iterator[str]:
    """A single-node VictoriaMetrics (13-month retention) scraping ``targets`` (``host:port``)
    itself every ``scrape_interval``; yields its base URL. Samples are queryable at once
    (``-search.latencyOffset=0s``). ``dedup=False`` keeps every sample written (no
    ``-dedup.minScrapeInterval``): a store that bills must not count a roll-up twice there
    either."""
    binary = require_tool("victoria-metrics", "victoria-metrics")
    port = free_port()
    argv = [binary, f"-storageDataPath={workdir / 'vmdata'}",
            f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=13",
            "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=WARN"]
    if dedup:
        # one sample per series and timestamp: a replay and a live vmalert (or an HA pair)
        # may write the same roll-up twice
        argv.append("-dedup.minScrapeInterval=1ms")
    if targets:
        config = workdir / "vm-scrape.yml"
        listed = ", ".join(f'"{t}"' for t in targets)
        config.write_text(f"global:\n  scrape_interval: {scrape_interval}\n"
                          "scrape_configs:\n  - job_name: allsmi\n"
                          f"    scrape_timeout: {scrape_interval}\n"
                          f"    static_configs:\n      - targets: [{listed}]\n")
        argv.append(f"-promscrape.config={config}")
    base = f"http://127.0.0.1:{port}"
    with running_server(argv, workdir / "victoria-metrics.log", f"{base}/health", "victoria-metrics"):
        yield base


@contextlib.contextmanager
def running_vmalert(workdir: Path, rule_files: Sequence[Path], store: str,
                    evaluation_interval: str = "10s", name: str = "vmalert") -> Iterator[str]:
    """vmalert evaluating ``rule_files`` against ``store`` and writing the results back to it,
    logging to ``NAME.log`` (two of them: an HA pair); yields its base URL."""
    binary = require_tool("vmalert", "victoria-metrics")
    port = free_port()
    argv = [binary, *(f"-rule={p}" for p in rule_files), f"-datasource.url={store}",
            f"-remoteWrite.url={store}", "-remoteWrite.flushInterval=1s",
            f"-evaluationInterval={evaluation_interval}", f"-httpListenAddr=127.0.0.1:{port}",
            # Evaluate each group as of 3 s ago (still aligned to its interval): a sample is
            # searchable about a second after it is scraped, so a group whose evaluation falls
            # just after an interval's end (its offset comes from a hash of the rule file's
            # path) would otherwise miss the interval's last scrape, and bill it to no hour.
            "-datasource.lookback=3s",
            # 1.79 has no -notifier.blackhole: alerting rules want some notifier
            f"-notifier.url=http://127.0.0.1:{free_port()}", "-loggerLevel=WARN"]
    base = f"http://127.0.0.1:{port}"
    with running_server(argv, workdir / f"{name}.log", f"{base}/metrics", name):
        yield base


def run_vmalert_replay(workdir: Path, rule_files: Sequence[Path], store: str, time_from: str,
                       time_to: str, step: str, timeout: float = 120.0,
                       query_step: str | None = None) -> subprocess.CompletedProcess[str]:
    """``vmalert -replay.timeFrom=.. -replay.timeTo=..``: the rules evaluated over history,
    written back to ``store``, at every ``step`` (the rules' group interval) from ``time_from``
    to ``time_to``, both included. vmalert 1.79 asks for the range at
    ``-datasource.queryStep`` (default 5m), not at the group's interval, so it is set to it
    (deploy/README.md). What it reads is made searchable first, and what it wrote is searchable
    when it returns (:func:`force_flush`): a holder series born in the replay's last seconds,
    still buffered by ``store``, was left out of its roll-ups but not out of a raw bill read
    later (seen once in CI)."""
    binary = require_tool("vmalert", "victoria-metrics")
    force_flush(store)
    done = subprocess.run(
        [binary, *(f"-rule={p}" for p in rule_files), f"-datasource.url={store}",
         f"-remoteWrite.url={store}", f"-replay.timeFrom={time_from}",
         f"-replay.timeTo={time_to}", "-replay.disableProgressBar", "-replay.rulesDelay=0s",
         f"-datasource.queryStep={query_step or step}",
         "-loggerLevel=WARN"],
        capture_output=True, text=True, timeout=timeout, cwd=workdir)
    if done.returncode == 0:
        force_flush(store)
    return done


def force_flush(store: str) -> None:
    """Make everything ``store`` was sent searchable now. VictoriaMetrics buffers what it
    receives for a few seconds, and a series it has never seen (a holder's first roll-up)
    longer: under load the roll-ups of an hour were seen without a new holder's series
    several seconds after the replay that wrote them had returned."""
    with urllib.request.urlopen(f"{store}/internal/force_flush", timeout=60) as resp:  # noqa: S310 - loopback
        resp.read()

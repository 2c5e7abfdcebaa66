"""What the report tests share: configurations, the hostile scenario, running the CLI."""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO

#: Prices for every group of the mixed scenario (its own rules place the devices), a budget that the training group's forecast
#: exceeds and one that inference stays under. The ledger's 15-minute interval makes the
#: replay sample every 15 minutes: a month in seconds, not minutes (the report and the export
#: compared are replayed alike).
PRICED = """\
[ledger]
interval_seconds = 900

[groups.training]
price_per_device_hour = 3.1
price_per_kwh = 0.14
currency = "USD"
{training_budget}

[groups.inference]
price_per_device_hour = 2.2
currency = "USD"
{inference_budget}

[groups.npu]
price_per_device_hour = 0.9
currency = "USD"
"""
BUDGETS = PRICED.format(training_budget="budget_per_month = 5000",
                        inference_budget="budget_per_month = 1000000")
NO_BUDGETS = PRICED.format(training_budget="", inference_budget="")
NO_PRICES = """\
[ledger]
interval_seconds = 900

[node]
resource_group = "unpriced"

[[rules]]
vendor = "nvidia"
resource_group = "gpus"
"""

#: Users (so holders) whose names are hostile markup, quotes and a bidirectional override.
HOSTILE_USERS = ("<script>alert(1)</script>", "a\"quote's", "evil\u202egpj.exe",
                 "<img src=x onerror=alert(2)>")


def hostile_scenario(path: Path) -> Path:
    """The mixed scenario with :data:`HOSTILE_USERS` among its users."""
    import json
    text = (REPO / "backends" / "simulated" / "scenarios" / "mixed.toml").read_text()
    lines = [("users = " + json.dumps(list(HOSTILE_USERS) + ["bob", "carol", "dmitri", "gus"]))
             if line.startswith("users = ") else line for line in text.splitlines()]
    path.write_text("\n".join(lines).replace('name = "mixed"', 'name = "hostile"') + "\n")
    return path


def allsmi(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``allsmi ARGS`` in ``cwd`` (its own config home)."""
    return subprocess.run([sys.executable, "-m", "allsmi", *args], cwd=cwd,
                          env={**os.environ, "XDG_CONFIG_HOME": str(cwd)},
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def last_month() -> str:
    first = dt.datetime.now(dt.timezone.utc).date().replace(day=1)
    return (first - dt.timedelta(days=1)).strftime("%Y-%m")


def a_past_day() -> str:
    """A whole day safely in the past: the second of last month. Not yesterday: a report of a
    day with budgets replays its month to date, up to a month of the simulated node late in
    the month (about 30 s a report, on each of a dozen tests, depending on the date)."""
    first = dt.datetime.now(dt.timezone.utc).date().replace(day=1)
    return (first - dt.timedelta(days=1)).replace(day=2).isoformat()


def printed(value: float, digits: int = 2) -> str:
    """``value`` as the report prints it."""
    return f"{value:,.{digits}f}"

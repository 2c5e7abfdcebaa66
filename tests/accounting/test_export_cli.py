"""``allsmi export`` as a user runs it: a subprocess over a ledger written beforehand."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import T0, config, device, record, snap

CONFIG = """
[groups.training]
labels = { team = "=HYPERLINK(\\"http://evil\\")", cost_center = "cc-42" }
price_per_device_hour = 2.5
price_per_kwh = 0.3
currency = "EUR"

[groups."@inference"]
price_per_device_hour = 1.25
currency = "EUR"

[groups.free]
labels = { team = "ops" }
"""

SINCE, UNTIL = "2026-03-02T00:00:00Z", "2026-03-02T01:00:00Z"


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / "xdg"), "ALLSMI_LEDGER": "",
                **(env or {})}
    return subprocess.run([sys.executable, "-m", "allsmi", "export", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture()
def ledger(tmp_path: Path) -> Path:
    """One hour: a training GPU fully allocated at 100 W, a half-used inference GPU, an idle one."""
    (tmp_path / "config.toml").write_text(CONFIG)
    db = tmp_path / "ledger.db"
    snaps = []
    for t in range(0, 3601, 10):
        snaps.append(snap(
            T0 + t,
            device("GPU-train", power=100.0, util=50.0, users=["alice"], group="training",
                   labels={"team": '=HYPERLINK("http://evil")', "cost_center": "cc-42"}),
            device("GPU-inf", power=200.0, util=25.0, users=["bob"] if t < 1800 else [],
                   group="@inference", model="-2+3*cmd|' /C calc'!A0"),
            device("GPU-free", power=50.0, util=0.0, group="free", labels={"team": "ops"})))
    record(db, snaps, config(CONFIG))
    return db


def parse(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_columns_cost_and_injection(ledger: Path, tmp_path: Path) -> None:
    out = run("--ledger", str(ledger), "--config", "config.toml", "--since", SINCE, "--until", UNTIL,
              cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0].split(",")
    assert header[:5] == ["period_start", "period_end", "resource_group", "label_cost_center",
                          "label_team"]
    for col in ("vendor", "model", "host", "device_count", "observed_device_hours",
                "allocated_device_hours", "used_device_hours", "avg_utilization_ratio", "energy_kwh",
                "price_per_device_hour", "price_per_kwh", "cost", "currency", "coverage_ratio"):
        assert col in header
    rows = {r["label_team"]: r for r in parse(out.stdout)}
    train = rows["'=HYPERLINK(\"http://evil\")"]  # neutralized: a quote before the '='
    assert train["resource_group"] == "training"
    assert train["allocated_device_hours"] == "1.000000"
    assert train["used_device_hours"] == "0.500000"
    assert train["energy_kwh"] == "0.100000"
    assert train["cost"] == "2.530000"  # 1 h x 2.5 + 0.1 kWh x 0.3
    assert train["currency"] == "EUR" and train["coverage_ratio"] == "1.000000"
    inf = [r for r in parse(out.stdout) if r["resource_group"] == "'@inference"][0]
    assert inf["model"].startswith("'-2+3*cmd")
    # Allocated until the sample at t=1800 shows no process: the trapezoid gives the last 10 s half.
    assert inf["allocated_device_hours"] == f"{1795 / 3600:.6f}"
    assert inf["cost"] == f"{1795 / 3600 * 1.25:.6f}"  # no energy price: only device-hours charged
    assert rows["ops"]["cost"] == "" and rows["ops"]["currency"] == ""  # no price: empty, never 0
    assert rows["ops"]["allocated_device_hours"] == "0.000000"


def test_reruns_are_byte_identical_in_every_format(ledger: Path, tmp_path: Path) -> None:
    for fmt in ("csv", "json", "focus"):
        outputs = []
        for i in range(2):
            out = run("--ledger", str(ledger), "--config", "config.toml", "--since", SINCE,
                      "--until", UNTIL, "--format", fmt, "--group-by", "resource_group,model,user",
                      "-o", f"out{i}.{fmt}", cwd=tmp_path)
            assert out.returncode == 0, out.stderr
            outputs.append((tmp_path / f"out{i}.{fmt}").read_bytes())
        assert outputs[0] == outputs[1] and len(outputs[0]) > 200
        assert stat.S_IMODE((tmp_path / f"out0.{fmt}").stat().st_mode) == 0o600


def test_json_and_focus_content(ledger: Path, tmp_path: Path) -> None:
    out = run("--ledger", str(ledger), "--config", "config.toml", "--since", SINCE, "--until", UNTIL,
              "--format", "json", "--group-by", "resource_group,user", cwd=tmp_path)
    doc = json.loads(out.stdout)
    assert doc["group_by"] == ["resource_group", "user"] and doc["coverage_ratio"] == 1.0
    users = {(r["resource_group"], r["user"]): r for r in doc["rows"]}
    assert users[("training", "alice")]["allocated_device_hours"] == 1.0
    # The increment ending at the first sample without a process still belongs to bob.
    assert users[("@inference", "bob")]["allocated_device_hours"] == pytest.approx(1795 / 3600, abs=1e-6)
    assert users[("@inference", "bob")]["energy_kwh"] == pytest.approx(200 * 1800 / 3.6e6, abs=1e-6)
    assert users[("@inference", None)]["energy_kwh"] == pytest.approx(200 * 1800 / 3.6e6, abs=1e-6)
    assert users[("@inference", None)]["allocated_device_hours"] == 0.0
    assert users[("training", "alice")]["labels"] == {"cost_center": "cc-42",
                                                      "team": '=HYPERLINK("http://evil")'}

    out = run("--ledger", str(ledger), "--config", "config.toml", "--since", SINCE, "--until", UNTIL,
              "--format", "focus", cwd=tmp_path)
    charges = parse(out.stdout)
    train = [c for c in charges if c["SubAccountId"] == "training"]
    assert {c["ConsumedUnit"] for c in train} == {"Hours", "kWh"}
    hours = [c for c in train if c["ConsumedUnit"] == "Hours"][0]
    assert hours["BilledCost"] == "2.500000" and hours["EffectiveCost"] == "2.500000"
    assert hours["ListUnitPrice"] == hours["ContractedUnitPrice"] == "2.500000"
    assert hours["BillingCurrency"] == "EUR" and hours["ChargeCategory"] == "Usage"
    assert hours["ChargeClass"] == "" and hours["x_PriceConfigured"] == "true"
    assert hours["ChargePeriodStart"] == "2026-03-02T00:00:00Z"
    assert hours["ChargePeriodEnd"] == "2026-03-02T01:00:00Z"
    assert hours["InvoiceId"] == "On-premises/20260302T000000Z-20260302T010000Z"
    assert hours["ProviderName"] == hours["PublisherName"] == hours["InvoiceIssuerName"] \
        == hours["BillingAccountId"] == "On-premises"
    tags = json.loads(hours["Tags"])
    assert tags["cost_center"] == "cc-42" and tags["allsmi/resource_group"] == "training"
    energy = [c for c in train if c["ConsumedUnit"] == "kWh"][0]
    assert energy["BilledCost"] == "0.030000" and energy["PricingQuantity"] == "0.100000"
    # A group without prices: free charges (0, never empty: FOCUS requires a cost), flagged.
    free = [c for c in charges if c["SubAccountId"] == "free"]
    assert {c["BilledCost"] for c in free} == {"0.000000"}
    assert {c["x_PriceConfigured"] for c in free} == {"false"}
    assert {c["BillingCurrency"] for c in free} == {"EUR"}  # the one currency of the config


def test_coverage_exit_status_and_textfile(ledger: Path, tmp_path: Path) -> None:
    # Two hours asked, one recorded: coverage 50 %.
    out = run("--ledger", str(ledger), "--config", "config.toml", "--since", SINCE,
              "--until", "2026-03-02T02:00:00Z", "-o", "bill.csv", "--textfile", "status.prom",
              cwd=tmp_path)
    assert out.returncode == 3
    assert "50.00%" in out.stderr and "below the threshold 95.00%" in out.stderr
    assert (tmp_path / "bill.csv").read_text().count("\n") == 4  # still written
    status = (tmp_path / "status.prom").read_text()
    assert "allsmi_export_success 0\n" in status
    assert "allsmi_export_coverage_ratio 0.500000\n" in status
    assert "allsmi_export_last_run_timestamp_seconds " in status
    out = run("--ledger", str(ledger), "--config", "config.toml", "--since", SINCE,
              "--until", "2026-03-02T02:00:00Z", "--coverage-threshold", "0.5", "-o", "bill.csv",
              "--textfile", "status.prom", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "allsmi_export_success 1\n" in (tmp_path / "status.prom").read_text()
    # Nothing recorded at all in the window: no rows, exit 3.
    out = run("--ledger", str(ledger), "--period", "2025-01", cwd=tmp_path)
    assert out.returncode == 3 and "no device data" in out.stderr


def test_low_coverage_with_holders_names_each_row_by_all_its_keys(tmp_path: Path) -> None:
    """Grouped by holder, the coverage warning names the devices' keys and their holders once,
    not ``training 50.0%; training 50.0%; ...``."""
    (tmp_path / "config.toml").write_text(CONFIG)
    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + t,
                     device("GPU-train", util=50.0, users=["alice", "bob"] if t < 1800 else ["carol"],
                            group="training"),
                     device("GPU-inf", util=10.0, users=["dave"], group="@inference", model="A100"))
                for t in range(0, 3601, 10)], config(CONFIG))
    out = run("--ledger", str(db), "--config", "config.toml", "--since", SINCE,
              "--until", "2026-03-02T02:00:00Z", "--group-by", "resource_group,model,user", cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    lowest = out.stderr.split("(lowest: ", 1)[1].split(") (exit status", 1)[0]
    parts = lowest.split("; ")
    assert len(parts) == len(set(parts)) == 2, lowest
    # "-": the part of the window no holder was seen (the recording's first sample)
    assert "training/H100 (user -, alice, bob, carol) 50.0%" in parts, lowest
    assert "@inference/A100 (user -, dave) 50.0%" in parts, lowest


def test_period_with_tz_uses_quarter_rollups(tmp_path: Path) -> None:
    """A +05:30 day starts on a quarter hour: exported whole from roll-ups after raw rows expire."""
    db = tmp_path / "l.db"
    cfg_text = "[ledger]\nretention_days = 0.01\n"
    (tmp_path / "config.toml").write_text(cfg_text)
    start = T0 - 5.5 * 3600 - 1800  # half an hour before the Kolkata day 2026-03-02 starts
    record(db, [snap(start + t, device(power=100.0, users=["a"])) for t in range(0, 25 * 3600 + 1, 20)],
           config(cfg_text))
    out = run("--ledger", str(db), "--config", "config.toml", "--period", "2026-03-02", "--tz",
              "Asia/Kolkata", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["period_start"] == "2026-03-02T00:00:00+05:30"
    assert doc["period_end"] == "2026-03-03T00:00:00+05:30"
    assert doc["rows"][0]["allocated_device_hours"] == 24.0
    assert doc["rows"][0]["energy_kwh"] == 2.4


def test_output_is_atomic(ledger: Path, tmp_path: Path) -> None:
    target = tmp_path / "bill.csv"
    target.write_text("OLD\n")
    final = None
    seen: set[str] = set()
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "allsmi", "export", "--ledger", str(ledger),
                                 "--config", "config.toml", "--since", SINCE, "--until", UNTIL,
                                 "-o", str(target)], cwd=tmp_path,
                                env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while proc.poll() is None:
                seen.add(target.read_text())
        finally:
            proc.wait(timeout=30)
        final = target.read_text()
        seen.add(final)
    assert seen <= {"OLD\n", final}, "a reader saw a partial file"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".bill.csv")] == []


def test_usage_errors_exit_2(ledger: Path, tmp_path: Path) -> None:
    for args in (["--period", "someday"], ["--period", "yesterday", "--since", SINCE],
                 ["--period", "yesterday", "--tz", "Nowhere/Land"], ["--group-by", "team"],
                 ["--prometheus", "http://127.0.0.1:1", "--group-by", "resource_group,team",
                  "--period", "yesterday"]):
        out = run("--ledger", str(ledger), *args, cwd=tmp_path) if "--prometheus" not in args \
            else run(*args, cwd=tmp_path)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("allsmi: ")
    out = run("--ledger", str(tmp_path / "nope.db"), "--period", "yesterday", cwd=tmp_path)
    assert out.returncode == 1 and "no ledger at" in out.stderr
    out = run("--prometheus", "http://127.0.0.1:1", "--period", "yesterday", "--timeout", "2",
              cwd=tmp_path)
    assert out.returncode == 1 and "cannot reach Prometheus" in out.stderr

"""FOCUS 1.2 conformance under the FinOps Foundation's own validator, for every export source.

The FOCUS export made from a ledger, from the simulation and from a real
Prometheus, with and without prices, as CSV and as Parquet, must fail no
mandatory rule of ``focus-validator`` 2.2.1 (see ``focus_validator.py``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from pathlib import Path

import pytest

from ..conftest import run_allsmi
from ..prometheus_server import running_prometheus
from .fleet import iso, simulated_exporters
from .focus_validator import assert_conforms, validator_executable
from .helpers import T0, config, device, record, snap

PRICED = """\
[[rules]]
resource_group = "training"
vendor = "nvidia"

[groups.training]
labels = { team = "ml", cost_center = "cc-42" }
price_per_device_hour = 2.5
price_per_kwh = 0.3
currency = "EUR"

[groups.inference]
price_per_device_hour = 1.25
currency = "EUR"

[export.focus]
provider_name = "Example University HPC"
invoice_issuer_name = "Example University Finance"
"""
UNPRICED = """\
[groups.training]
labels = { team = "ml" }
"""


@pytest.fixture(scope="module", autouse=True)
def _validator() -> None:
    """Skipped (or failed under CI) before any export or ledger is made when the validator is
    missing (module-scoped: set up before the module's ``ledger``)."""
    validator_executable()


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An hour of a whole GPU, a MIG slice (no board energy), a device that lists no processes."""
    db = tmp_path_factory.mktemp("ledger") / "ledger.db"
    snaps = []
    for t in range(0, 3601, 20):
        no_procs = dataclasses.replace(device("GPU-np", power=80.0, util=10.0, group="inference",
                                              vendor="gaudi", model="HL-325L"), processes=None)
        snaps.append(snap(
            T0 + t,
            device("GPU-a", power=300.0, util=90.0, users=["alice", "bob"], group="training",
                   labels={"team": "ml", "cost_center": "cc-42"}),
            device("GPU-b", power=100.0, util=0.0, group="inference"),
            device("MIG-1", util=None, users=["carol"], group="inference", parent="GPU-b",
                   model="H100 MIG 1g.10gb"),
            no_procs))
    record(db, snaps, config(PRICED))
    return db


def _export(tmp_path: Path, cfg: str, name: str, *args: str) -> Path:
    (tmp_path / f"{name}.toml").write_text(cfg)
    out = tmp_path / name
    result = run_allsmi("export", "--config", str(tmp_path / f"{name}.toml"), "-o", str(out), *args,
                        env={"XDG_CONFIG_HOME": str(tmp_path), "ALLSMI_LEDGER": ""}, timeout=300)
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.parametrize("cfg", [PRICED, UNPRICED], ids=["priced", "unpriced"])
def test_ledger_export_conforms(ledger: Path, tmp_path: Path, cfg: str) -> None:
    window = ("--ledger", str(ledger), "--since", iso(T0), "--until", iso(T0 + 3600))
    focus = _export(tmp_path, cfg, "focus.csv", *window, "--format", "focus",
                    "--group-by", "resource_group,vendor,model,host,user")
    rows = list(csv.DictReader(io.StringIO(focus.read_text())))
    # The MIG slice has its share of its board's energy (the only slice: all of it): an hours
    # and an energy charge. The device without process lists has unknown allocation: an energy
    # charge only.
    assert {r["ConsumedUnit"] for r in rows if "MIG" in r["SkuId"]} == {"Hours", "kWh"}
    assert {r["ConsumedUnit"] for r in rows if "HL-325L" in r["SkuId"]} == {"kWh"}
    if cfg is PRICED:
        assert {r["ProviderName"] for r in rows} == {"Example University HPC"}
        assert {r["PublisherName"] for r in rows} == {"Example University HPC"}
        assert {r["InvoiceIssuerName"] for r in rows} == {"Example University Finance"}
        # A third party issues the invoice: FOCUS wants BilledCost 0, the amount stays effective.
        assert {r["BilledCost"] for r in rows} == {"0.000000"}
        assert any(float(r["EffectiveCost"]) > 0 for r in rows)
    assert_conforms(focus, tmp_path)
    parquet = _export(tmp_path, cfg, "focus.parquet", *window, "--format", "focus-parquet",
                      "--group-by", "resource_group,vendor,model,host,user")
    assert_conforms(parquet, tmp_path)


@pytest.mark.long(15)
@pytest.mark.parametrize("cfg", [PRICED, UNPRICED], ids=["priced", "unpriced"])
def test_simulated_export_conforms(tmp_path: Path, cfg: str) -> None:
    start = 1_790_000_000 - 1_790_000_000 % 3600
    focus = _export(tmp_path, cfg, "sim.csv", "--simulate", "mixed", "--since", iso(start),
                    "--until", iso(start + 3600), "--format", "focus",
                    "--group-by", "resource_group,vendor,model,user,namespace,pod,job")
    assert_conforms(focus, tmp_path)
    text = focus.read_text()
    assert "allsmi/namespace" in text and "allsmi/job" in text and "x_IdleCost" in text
    # The activity extension columns are validated with values in them (issue 31).
    rows = list(csv.DictReader(io.StringIO(text)))
    assert any(r["x_ActiveDeviceHours"] and r["x_ActivityMethod"] and r["x_WaitingNothingCost"]
               for r in rows)


@pytest.mark.long(35)
@pytest.mark.integration
def test_prometheus_export_conforms(tmp_path: Path) -> None:
    with simulated_exporters(tmp_path, PRICED, config_name="serve.toml") as serve:
        with running_prometheus(tmp_path, serve.targets) as prom:
            began = time.time()
            time.sleep(12)
            window = ("--prometheus", prom, "--since", iso(began + 2), "--until", iso(time.time() - 2),
                      "--format", "focus", "--coverage-threshold", "0")
            outputs = [_export(tmp_path, cfg, name, *window)
                       for cfg, name in ((PRICED, "prom-priced.csv"), (UNPRICED, "prom-free.csv"))]
    for out in outputs:
        rows = list(csv.DictReader(io.StringIO(out.read_text())))
        assert len(rows) > 5 and {r["ResourceId"] for r in rows} == set(serve.targets)
        assert_conforms(out, tmp_path)

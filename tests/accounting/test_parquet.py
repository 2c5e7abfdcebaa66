"""``allsmi export --format parquet|focus-parquet``: the CSV's rows, typed, read back by pyarrow."""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_export_cli import SINCE, UNTIL, ledger, run  # noqa: F401 - ledger is a fixture

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is in the test extra")


def _unquote(cell: str) -> str:
    """The CSV's spreadsheet guard (a leading ') is a CSV matter: Parquet holds the raw text."""
    return cell[1:] if cell[:2] in ("'=", "'+", "'-", "'@") else cell


def _same(csv_cell: str, value: object, kind: str) -> bool:
    if csv_cell == "":
        return value is None
    if kind == "datetime":
        instant = dt.datetime.fromisoformat(csv_cell.replace("Z", "+00:00"))
        return value == instant
    if kind in ("decimal",):
        return value == float(csv_cell)
    if kind == "int":
        return value == int(csv_cell)
    if kind == "bool":
        return value == (csv_cell == "true")
    return value == _unquote(csv_cell)


@pytest.mark.parametrize("fmt,csv_fmt", [("parquet", "csv"), ("focus-parquet", "focus")])
def test_parquet_reads_back_as_the_csv(ledger: Path, tmp_path: Path, fmt: str, csv_fmt: str) -> None:  # noqa: F811
    from allsmi.accounting.focus import COLUMN_TYPES
    from allsmi.accounting.formats import column_types
    args = ("--ledger", str(ledger), "--config", "config.toml", "--since", SINCE, "--until", UNTIL,
            "--group-by", "resource_group,model,user", "--tz", "Asia/Kolkata")
    text = run(*args, "--format", csv_fmt, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    out = run(*args, "--format", fmt, "-o", "bill.parquet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "bill.parquet").stat().st_mode & 0o777 == 0o600
    table = pq.read_table(tmp_path / "bill.parquet")
    rows = list(csv.DictReader(io.StringIO(text.stdout)))
    header = text.stdout.splitlines()[0].split(",")
    assert table.column_names == header
    types = COLUMN_TYPES if fmt == "focus-parquet" else column_types(header)
    assert table.num_rows == len(rows) > 3
    for name in header:
        values = table.column(name).to_pylist()
        for i, row in enumerate(rows):
            assert _same(row[name], values[i], types[name]), (name, i, row[name], values[i])
    # Types: numbers are numbers, times are UTC timestamps, text is text.
    schema = {f.name: str(f.type) for f in table.schema}
    if fmt == "parquet":
        assert schema["device_count"] == "int64" and schema["cost"] == "double"
        assert schema["period_start"] == "timestamp[ms, tz=UTC]" and schema["model"] == "string"
    else:
        assert schema["BilledCost"] == "double" and schema["x_DeviceCount"] == "int64"
        assert schema["ChargePeriodStart"] == "timestamp[ms, tz=UTC]"
        assert schema["x_PriceConfigured"] == "bool"
    # Reruns give identical bytes.
    first = (tmp_path / "bill.parquet").read_bytes()
    assert run(*args, "--format", fmt, "-o", "bill.parquet", cwd=tmp_path).returncode == 0
    assert (tmp_path / "bill.parquet").read_bytes() == first


def test_parquet_to_a_pipe_and_not_to_a_terminal(ledger: Path, tmp_path: Path) -> None:  # noqa: F811
    out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--ledger", str(ledger),
                          "--config", "config.toml", "--since", SINCE, "--until", UNTIL,
                          "--format", "parquet"], cwd=tmp_path, capture_output=True, timeout=60,
                         env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert out.returncode == 0, out.stderr
    assert out.stdout[:4] == b"PAR1" and out.stdout[-4:] == b"PAR1"
    assert pq.read_table(io.BytesIO(out.stdout)).num_rows == 3


def test_missing_pyarrow_names_the_extra(ledger: Path, tmp_path: Path) -> None:  # noqa: F811
    # A pyarrow that cannot be imported (a stub package that raises ImportError) comes first.
    stub = tmp_path / "stub" / "pyarrow"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('No module named pyarrow')\n")
    for fmt in ("parquet", "focus-parquet"):
        out = run("--ledger", str(ledger), "--since", SINCE, "--until", UNTIL, "--format", fmt,
                  "-o", "bill.parquet", "--textfile", "status.prom", cwd=tmp_path,
                  env={"PYTHONPATH": str(tmp_path / "stub")})
        assert out.returncode == 2, out.stderr
        assert "allsmi[parquet]" in out.stderr and "pyarrow" in out.stderr
        assert not (tmp_path / "bill.parquet").exists()
        assert "allsmi_export_success 0\n" in (tmp_path / "status.prom").read_text()

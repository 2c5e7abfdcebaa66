"""Parquet output of the export tables, through pyarrow (the ``allsmi[parquet]`` extra).

The Parquet file holds exactly the rows and columns of the matching CSV,
typed: an empty cell is null, ``decimal`` columns are float64 with the
values the CSV prints, ``int`` int64, ``bool`` boolean, ``datetime`` a UTC
timestamp (milliseconds; Parquet has no seconds unit) of the same instant, text is text. Text is stored as is:
the CSV's guard against spreadsheet formulas (a leading ``'``) is a CSV
matter and not applied here.
"""

from __future__ import annotations

import datetime as dt
import io
import sys
from typing import Any, Mapping, Sequence

#: With the pip of the interpreter allsmi runs under: a bare ``pip`` may belong to another Python.
EXTRA_HINT = f"install the extra: {sys.executable} -m pip install 'allsmi[parquet]'"


class ParquetUnavailable(Exception):
    """pyarrow is not installed."""


def _arrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ParquetUnavailable(f"Parquet output needs pyarrow, which is not installed; "
                                 f"{EXTRA_HINT}") from None
    return pa, pq


def require_pyarrow() -> None:
    """Raise :class:`ParquetUnavailable` (naming the extra) when pyarrow is missing."""
    _arrow()


def _convert(text: str, kind: str) -> Any:
    if text == "":
        return None
    if kind == "decimal":
        return float(text)
    if kind == "int":
        return int(text)
    if kind == "bool":
        return text == "true"
    if kind == "datetime":
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    return text


def table_bytes(header: Sequence[str], types: Mapping[str, str],
                rows: Sequence[Mapping[str, str]]) -> bytes:
    """A Parquet file of ``rows`` (CSV cells before spreadsheet quoting), typed by ``types``."""
    pa, pq = _arrow()
    arrow_types = {"string": pa.string(), "decimal": pa.float64(), "int": pa.int64(),
                   "bool": pa.bool_(), "datetime": pa.timestamp("ms", tz="UTC")}
    schema = pa.schema([pa.field(col, arrow_types[types[col]]) for col in header])
    arrays = [pa.array([_convert(row.get(col, ""), types[col]) for row in rows],
                       type=arrow_types[types[col]]) for col in header]
    table = pa.Table.from_arrays(arrays, schema=schema)
    buf = io.BytesIO()
    # No creation time or library version that changes between runs: reruns give the same bytes.
    pq.write_table(table, buf, compression="zstd", write_statistics=True)
    return buf.getvalue()

"""``allsmi snapshot --format table``: text from devices and backends is shown as it is, never
read as rich markup (a model or message holding ``[/]`` crashed the table; ``[bold]`` was
eaten), and a long name gives way before any number is cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import run_allsmi
from .test_cli_snapshot import scenario

MARKUP_MODEL = "GPU [/] [bold]x[/bold]"
LONG_MODEL = "Accelerator " + "W" * 120
MESSAGE = "driver said [red]no[/red] and [/] gave up"

SCENARIO = scenario("markup", (("furiosa", "npu", "RNGD", "uuid", ""),
                                ("tenstorrent", "npu", MARKUP_MODEL, "board", ""),
                                ("rebellions", "npu", LONG_MODEL, "uuid", ""))) + f"""
[[faults]]
type = "error"
backend = "furiosa"
message = "{MESSAGE}"
"""


def test_markup_in_names_and_messages_is_text_and_numbers_are_never_cut(tmp_path: Path) -> None:
    path = tmp_path / "markup.toml"
    path.write_text(SCENARIO)
    result = run_allsmi("snapshot", "--simulate", str(path), "--format", "table")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert MESSAGE in out  # the failing backend's message, every bracket kept
    assert MARKUP_MODEL in out  # a model named with brackets, as named
    [row] = [line for line in out.splitlines() if "Accelerator WWW" in line]
    assert "…" in row and "W" * 120 not in row  # the name gives way...
    assert "GiB / 32.0 GiB" in row and " W / N/A" in row  # ...the numbers stay whole
    assert row.count("…") == 1, row


LONG_NAMES = scenario("long-names", (("furiosa", "npu", "Accelerator " + "W" * 120, "uuid", ""),
                                     ("rebellions", "npu", "RBLN " + "X" * 80, "uuid", "")))
HEADERS = ["#", "vendor", "model", "group", "health", "util", "active", "memory", "temp",
           "power / limit", "procs", "held by", "waiting"]


@pytest.mark.parametrize("columns", [None, "120", "80", "40"])
def test_long_names_give_way_and_numbers_and_headers_are_never_cut(tmp_path: Path,
                                                                   columns: str | None) -> None:
    """Piped (200 cells) or at ``$COLUMNS``: long model and group names are cut, never a number
    or a header (``te…``, ``35…``, an index column of width 0, were); where the numbers alone
    do not fit, the line is longer than the width."""
    import re
    path = tmp_path / "long.toml"
    path.write_text(LONG_NAMES)
    env = {"ALLSMI_RESOURCE_GROUP": "g" * 60, **({"COLUMNS": columns} if columns else {})}
    result = run_allsmi("snapshot", "--simulate", str(path), "--format", "table", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("#"))
    assert re.split(r"\s{2,}", lines[head].strip()) == HEADERS, lines[head]
    rows = lines[head + 1:head + 3]
    for row in rows:
        assert re.match(r"0  ", row), row
        assert re.search(r"  \d+%  +\d+% (pe|eng)  +\d+\.\d GiB / 32\.0 GiB  +\d+°C  +\d+ W / N/A"
                         r"  +\d  ", row), row
        assert row.rstrip().endswith("computing"), row
    if columns in (None, "120"):
        width = int(columns or 200)
        assert all(len(line.rstrip()) <= width for line in lines), lines
        assert "…" in rows[0] and "Furio" in rows[0]

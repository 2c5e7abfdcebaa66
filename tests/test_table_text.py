"""``allsmi snapshot --format table``: text from devices and backends is shown as it is, never
read as rich markup (a model or message holding ``[/]`` crashed the table; ``[bold]`` was
eaten), and a long name gives way before any number is cut."""

from __future__ import annotations

from pathlib import Path

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

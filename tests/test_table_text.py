"""``allsmi snapshot --format table``: text from devices and backends is shown as it is, never
read as rich markup (a model or message holding ``[/]`` crashed the table; ``[bold]`` was
eaten), and a long name gives way before any number is cut."""

from __future__ import annotations

from pathlib import Path

from .conftest import run_allsmi

MARKUP_MODEL = "GPU [/] [bold]x[/bold]"
LONG_MODEL = "Accelerator " + "W" * 120
MESSAGE = "driver said [red]no[/red] and [/] gave up"

SCENARIO = f"""\
name = "markup"
seed = 3
epoch = "2026-01-01T00:00:00Z"
users = ["alice"]
commands = ["python train.py"]
""" + "".join(f"""
[[devices]]
backend = "{backend}"
vendor = "{backend}"
kind = "npu"
model = "{model}"
count = 1
memory_total_bytes = 34359738368
power_idle_watts = 40.0
power_limit_watts = 300.0
clock_idle_mhz = 800.0
clock_max_mhz = 1350.0
temperature_idle_celsius = 30.0
temperature_max_celsius = 80.0
id_style = "uuid"
duty_cycle = 1.0
job_seconds = [3600, 3600]
""" for backend, model in (("furiosa", "RNGD"), ("tenstorrent", MARKUP_MODEL),
                          ("rebellions", LONG_MODEL))) + f"""
[[faults]]
type = "error"
backend = "furiosa"
message = "{MESSAGE}"
"""


def test_markup_in_names_and_messages_is_text_and_numbers_are_never_cut(tmp_path: Path) -> None:
    scenario = tmp_path / "markup.toml"
    scenario.write_text(SCENARIO)
    result = run_allsmi("snapshot", "--simulate", str(scenario), "--format", "table")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert MESSAGE in out  # the failing backend's message, every bracket kept
    assert MARKUP_MODEL in out  # a model named with brackets, as named
    [row] = [line for line in out.splitlines() if "Accelerator WWW" in line]
    assert "…" in row and "W" * 120 not in row  # the name gives way...
    assert "GiB / 32.0 GiB" in row and " W / N/A" in row  # ...the numbers stay whole
    assert row.count("…") == 1, row

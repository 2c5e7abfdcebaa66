"""hl-smi output parsing and loop-mode framing, without running anything."""

from __future__ import annotations

from allsmi.backends.gaudi.csv_output import (
    ALL_FIELDS, CORE_FIELDS, FrameAssembler, Row, named_fields, parse_line, parse_output,
)
from allsmi.backends.gaudi.text_output import parse_listing, parse_processes
from allsmi.schema.units import MIB
from tests.contract.scenarios_gaudi import GAUDI, fixture_fields

G3_FIELDS = fixture_fields("gaudi3-8x-1.22")


def _row(key: str) -> Row:
    return Row(cells={"index": key}, key=f"index:{key}")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fixture_fields_match_the_backend_field_names() -> None:
    assert G3_FIELDS == list(ALL_FIELDS)
    assert set(CORE_FIELDS) <= set(fixture_fields("gaudi2-8x-1.15"))
    assert "power.max" not in fixture_fields("gaudi2-8x-1.15")


def test_parse_line_reads_cells_by_field_name() -> None:
    line = (GAUDI / "gaudi3-8x-1.22.csv").read_text().splitlines()[2]
    row = parse_line(line, G3_FIELDS)
    assert isinstance(row, Row)
    assert row.key == "index:2"
    assert row.get("uuid") == "01P4-HL3090A0-18-U4V193-22-07-02"
    assert row.get("memory.total") == "131072"
    assert row.get("power.draw") == "843"


def test_missing_spellings_become_none() -> None:
    fields = ["index", "uuid", "power.draw", "temperature.aip", "name"]
    row = parse_line("1, N/A, [N/A], [Not Supported], HL-225", fields)
    assert isinstance(row, Row)
    assert row.get("uuid") is None and row.get("power.draw") is None
    assert row.get("temperature.aip") is None and row.get("name") == "HL-225"


def test_bad_lines_are_reasons_not_rows() -> None:
    fields = ["index", "uuid", "power.draw"]
    assert "2 cells where 3" in parse_line("0, abc", fields)  # type: ignore[operator]
    assert "not a number" in parse_line("zero, u, 5", fields)  # type: ignore[operator]
    assert parse_line("N/A, N/A, 5", fields) == "no index, bus id or uuid"
    assert parse_line("   ", fields) == "empty line"
    keyed = parse_line("N/A, 01P0-X, 5", fields)
    assert isinstance(keyed, Row) and keyed.key == "uuid:01P0-X"


def test_parse_output_skips_garbage_and_keeps_good_rows() -> None:
    text = (GAUDI / "gaudi3-8x-garbage-mixed.csv").read_text()
    rows, problems = parse_output(text, G3_FIELDS)
    assert [r.get("index") for r in rows] == ["0", "1", "2", "4", "5", "6", "7"]
    assert len(problems) == 3
    assert any("hl-smi: warning" in p for p in problems)


def test_cut_output_drops_the_unterminated_last_line() -> None:
    text = (GAUDI / "gaudi3-8x-1.22.csv").read_text().rstrip("\n")
    whole, _ = parse_output(text, G3_FIELDS)
    cut, problems = parse_output(text, G3_FIELDS, last_line_complete=False)
    assert len(whole) == 8 and len(cut) == 7
    assert "output cap" in problems[0]
    rows, problems = parse_output((GAUDI / "gaudi3-8x-truncated.csv").read_text(), G3_FIELDS)
    assert len(rows) == 7 and "cells where 17" in problems[0]


def test_named_fields_matches_whole_names_only() -> None:
    message = 'Field "clocks.max.soc" is not a valid field to query.'
    assert named_fields(message, ["clocks.max.soc", "clocks.max", "power.max"]) == ["clocks.max.soc"]
    assert named_fields("bad: power.max2", ["power.max"]) == []


def test_frame_closes_when_every_expected_device_is_in() -> None:
    clock = FakeClock()
    frames = FrameAssembler(idle_close=0.5, clock=clock,
                            expected=frozenset({"index:0", "index:1"}))
    frames.add(_row("0"), 1)
    assert frames.poll() is None
    frames.add(_row("1"), 1)
    frame = frames.latest
    assert frame is not None and frame.complete
    assert [r.key for r in frame.rows] == ["index:0", "index:1"]


def test_a_repeated_device_starts_the_next_frame() -> None:
    clock = FakeClock()
    frames = FrameAssembler(idle_close=0.5, clock=clock)
    for key in ("0", "1", "0"):
        frames.add(_row(key), 1)
    assert frames.latest is not None
    assert [r.key for r in frames.latest.rows] == ["index:0", "index:1"]
    # the learned device set now closes the next frame as soon as it is whole
    frames.add(_row("1"), 1)
    assert frames.frames == 2 and frames.latest.complete


def test_an_idle_writer_closes_an_incomplete_frame() -> None:
    clock = FakeClock()
    frames = FrameAssembler(idle_close=0.5, clock=clock,
                            expected=frozenset({"index:0", "index:1", "index:2"}))
    frames.add(_row("0"), 1)
    frames.add(_row("2"), 1)  # device 1's row was garbled and skipped
    clock.now += 0.4
    assert frames.poll() is None
    clock.now += 0.2
    frame = frames.poll()
    assert frame is not None and not frame.complete
    assert frame.closed_at == clock.now
    assert "index:1" in frames.expected  # stays expected, reported missing


def test_a_dead_childs_partial_frame_is_never_completed_by_the_next_child() -> None:
    clock = FakeClock()
    frames = FrameAssembler(idle_close=0.5, clock=clock,
                            expected=frozenset({"index:0", "index:1"}))
    frames.add(_row("0"), 1)
    assert frames.discard_partial() == 1
    frames.add(_row("1"), 2)
    assert frames.latest is None  # index:1 alone is not a frame yet
    frames.add(_row("0"), 2)
    assert frames.latest is not None and {r.key for r in frames.latest.rows} == {"index:0", "index:1"}
    assert frames.latest.generation == 2


def test_rows_from_two_children_never_share_a_frame_even_without_discard() -> None:
    clock = FakeClock()
    frames = FrameAssembler(idle_close=0.5, clock=clock,
                            expected=frozenset({"index:0", "index:1"}))
    frames.add(_row("0"), 1)
    frames.add(_row("1"), 2)
    assert frames.latest is not None
    assert [r.key for r in frames.latest.rows] == ["index:0"] and frames.latest.generation == 1


def test_listing_gives_firmware_per_device() -> None:
    devices = parse_listing((GAUDI / "hl-smi-L-gaudi2.txt").read_text())
    assert len(devices) == 8
    first = devices[0]
    assert first.index == 0 and first.bus_id == "0000:19:00.0"
    assert first.uuid == "01P0-HL2080A0-15-TF8A81-09-07-00"
    assert first.firmware_spi == "hl-gaudi2-1.15.0-fw-49.0.0-sec-9"
    assert parse_listing("garbage\n[x] nothing\n") == []


def test_table_view_processes() -> None:
    procs = parse_processes((GAUDI / "hl-smi-table-gaudi3-processes.txt").read_text())
    assert set(procs) == {1, 2, 5, 7}
    assert procs[1][0].pid == 41237 and procs[1][0].command == "python3"
    assert procs[1][0].memory_bytes == 44032 * MIB
    assert {p.pid for p in procs[2]} == {41238, 41240}
    assert [p.memory_bytes for p in procs[2] if p.pid == 41240] == [512 * MIB]
    assert procs[7][0].memory_bytes is None
    doubled = "| Compute Processes: |\n|   0   77   C   a   10MiB |\n|   0   77   C   a   20MiB |\n"
    assert [p.memory_bytes for p in parse_processes(doubled)[0]] == [20 * MIB]


def test_process_rows_with_impossible_aip_or_pid_are_skipped_with_a_warning() -> None:
    """AIP and PID are whole numbers: a fraction, a sign, a PID of 0 or another script's digit
    ("²", which str.isdigit accepts and int() refuses) is no row, said where it reads as a
    number; headers and N/A rows stay silent."""
    text = ("| Compute Processes:                  AIP Memory |\n"
            "|  AIP   PID   Type   Process name    Usage      |\n"
            "|   0    N/A   N/A    N/A             N/A        |\n"
            "|   1    77    C      ok              10MiB      |\n"
            "|   1.0  78    C      frac-aip        10MiB      |\n"
            "|   -2   79    C      neg-aip         10MiB      |\n"
            "|   2    3.7   C      frac-pid        10MiB      |\n"
            "|   2    0     C      zero-pid        10MiB      |\n"
            "|   ²    80    C      other-digit     10MiB      |\n"
            "|   3    81    C      neg-memory      -5MiB      |\n")
    warnings: list[str] = []
    procs = parse_processes(text, warnings)
    assert {aip: [(p.pid, p.memory_bytes) for p in rows] for aip, rows in procs.items()} == {
        1: [(77, 10 * MIB)], 3: [(81, None)]}
    assert len(warnings) == 5, warnings
    assert any("AIP '1.0'" in w for w in warnings) and any("AIP '-2'" in w for w in warnings)
    assert any("PID '3.7'" in w for w in warnings) and any("PID '0'" in w for w in warnings)
    assert any("negative memory '-5MiB'" in w for w in warnings)
    assert parse_processes(text) == procs  # warnings are optional


def test_an_unreadable_process_memory_is_unknown_and_said() -> None:
    """A memory cell that is there but is no size (a unit hl-smi never prints, a number past
    the largest float) is unknown, with a warning naming it; N/A stays silent."""
    text = ("| Compute Processes:                  AIP Memory |\n"
            "|  AIP   PID   Type   Process name    Usage      |\n"
            "|   1    77    C      odd-unit        12parsecs  |\n"
            "|   1    78    C      too-large       1e999MiB   |\n"
            "|   1    79    C      not-given       N/A        |\n")
    warnings: list[str] = []
    procs = parse_processes(text, warnings)
    assert [(p.pid, p.memory_bytes) for p in procs[1]] == [(77, None), (78, None), (79, None)]
    assert len(warnings) == 2, warnings
    assert "pid 77: unreadable memory '12parsecs'" in warnings[0], warnings
    assert "pid 78: unreadable memory '1e999MiB'" in warnings[1], warnings


def test_parse_line_index_takes_ascii_digits_only() -> None:
    assert "not a number" in parse_line("٣, u, 5", ["index", "uuid", "power.draw"])  # type: ignore[operator]


def test_all_ones_cells_are_unknown_but_65535_mib_is_a_size() -> None:
    """hl-smi cells of all ones (a counter's UINT32_MAX, 65535 W) are no reading; 65535 MiB in
    use is an ordinary amount of memory."""
    from allsmi.backends._common.cells import SaidOnce
    from allsmi.backends.gaudi import GaudiBackend
    from allsmi.backends.gaudi.samples import Identity
    fields = ("index", "uuid", "power.draw", "power.max", "memory.used", "memory.total",
              "ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total")
    row = parse_line("0, U0, 4294967295 W, 65535 W, 65535 MiB, 98304 MiB, 4294967295, 0", fields)
    assert isinstance(row, Row)
    backend = GaudiBackend()
    backend.warnings, backend._said, backend._firmware = [], SaidOnce(), {}
    ident = Identity(key=row.key, id="U0", index=0, uuid="U0", bus_id=None, name=None,
                     driver_version=None)
    sample = backend._row_sample(ident, row)
    assert (sample.power_watts, sample.power_limit_watts) == (None, None)
    assert sample.memory_used_bytes == 65535 * MIB
    assert sample.details == {"ecc_uncorrected_total": 0}
    assert backend.warnings == []

"""The schema boundary makes outside text safe once, for every consumer."""

from __future__ import annotations

import json

from allsmi.output import snapshot_dict, to_csv, to_json
from allsmi.schema import BackendStatus, DeviceSample, HostSample, ProcessSample, Snapshot, utc_now
from allsmi.schema.text import MAX_COMMAND, clean_text

HOSTILE = "x\udcff\x1b]0;pwned\x07\x1b[2J\x9b31m\t\r\n\x00[bold red]y[/]"


def test_clean_text_replaces_surrogates_and_controls_keeps_markup() -> None:
    out = clean_text(HOSTILE)
    assert out == "x\ufffd ]0;pwned  [2J 31m    [bold red]y[/]"
    out.encode("utf-8")  # would raise on a lone surrogate
    assert clean_text("plain") == "plain"


def test_clean_text_caps_length() -> None:
    assert len(clean_text("a" * 10_000, MAX_COMMAND)) == MAX_COMMAND
    assert clean_text("a" * 10, 5) == "aaaa\u2026"


def test_every_text_field_is_cleaned_at_construction() -> None:
    proc = ProcessSample(1, HOSTILE, HOSTILE, 5)
    dev = DeviceSample(id=HOSTILE, vendor="nvidia", kind="gpu", backend="nvidia", name=HOSTILE,
                       bus_id=HOSTILE, labels={HOSTILE: HOSTILE}, details={"k": HOSTILE, "n": 3},
                       processes=(proc,))
    snap = Snapshot(timestamp=utc_now(), host=HostSample(HOSTILE), devices=(dev,),
                    backends=(BackendStatus("nvidia", "ok", HOSTILE),))
    for text in (to_json(snap), to_csv(snap)):
        assert "\x1b" not in text and "\udcff" not in text and "\\udcff" not in text
        text.encode("utf-8")
    doc = json.loads(to_json(snap))
    assert doc["devices"][0]["processes"][0]["command"] == clean_text(HOSTILE)
    assert snapshot_dict(snap)["host"]["hostname"] == clean_text(HOSTILE)


def test_detail_tuples_and_non_finite_numbers_are_cleaned() -> None:
    dev = DeviceSample(id="d", vendor="amd", kind="gpu", backend="amd",
                       details={"cores": ("ok\udcff", "\x1b[31m", 3), "temp": float("nan"),
                                "ratio": float("inf"), "list": ["x\udcfe"]})
    assert dev.details == {"cores": ("ok\ufffd", " [31m", 3), "temp": None, "ratio": None,
                           "list": ("x\ufffd",)}
    text = to_json(Snapshot(timestamp=utc_now(), host=HostSample("h"), devices=(dev,)))
    assert "\\udc" not in text and "NaN" not in text and "Infinity" not in text
    json.loads(text)


def test_withheld_process_details_in_json() -> None:
    proc = ProcessSample(7, "alice", "python secret.py", 5)
    dev = DeviceSample(id="d", vendor="nvidia", kind="gpu", backend="nvidia", processes=(proc,))
    snap = Snapshot(timestamp=utc_now(), host=HostSample("h"), devices=(dev,))
    hidden = json.loads(to_json(snap, process_details=False))
    assert hidden["process_details"] is False
    [proc] = hidden["devices"][0]["processes"]
    assert (proc["pid"], proc["user"], proc["command"], proc["memory_bytes"]) == (7, None, None, 5)
    shown = json.loads(to_json(snap, process_details=True))
    assert shown["process_details"] is True and shown["devices"][0]["processes"][0]["user"] == "alice"
    assert "process_details" not in json.loads(to_json(snap))  # a local snapshot: unchanged


def test_bidirectional_and_invisible_format_characters_become_visible() -> None:
    from allsmi.schema.text import clean_text
    for ch in ("\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
               "\u200b", "\u200e", "\u200f", "\u061c", "\ufeff", "\u2028", "\u2029"):
        cleaned = clean_text(f"python {ch}evil.py")
        assert ch not in cleaned and cleaned == "python \ufffdevil.py", (hex(ord(ch)), cleaned)
    assert clean_text("日本語 café ok") == "日本語 café ok"


def test_zero_width_joiner_and_non_joiner_are_text_and_reach_every_output_whole() -> None:
    """U+200D joins an emoji sequence (woman, ZWJ, laptop: a technologist) and U+200C keeps
    Persian and Indic letters apart: they reorder nothing and take no cell, so they are kept
    (they were each a U+FFFD); bidirectional overrides around them are still neutralized."""
    from rich.cells import cell_len

    from allsmi.exporter.exposition import render_snapshot
    technologist, persian = "\U0001f469\u200d\U0001f4bb", "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    for text in (technologist, persian, "\u0915\u094d\u200d\u0937"):
        assert clean_text(text) == text
    assert clean_text(f"\u202e{technologist}\u200b") == f"\ufffd{technologist}\ufffd"
    assert cell_len(clean_text("a\u200cb")) == 2 and cell_len(technologist) == 2  # (no cell)
    dev = DeviceSample(id="d", vendor="nvidia", kind="gpu", backend="nvidia",
                       name=f"{technologist} H100", temperature_celsius=50.0,
                       processes=(ProcessSample(1, persian, f"python {technologist}.py", 5),))
    snap = Snapshot(timestamp=utc_now(), host=HostSample("h"), devices=(dev,))
    doc = json.loads(to_json(snap, process_details=True))
    assert doc["devices"][0]["name"] == f"{technologist} H100"
    assert doc["devices"][0]["processes"][0]["user"] == persian
    assert f"{technologist} H100" in to_csv(snap)
    assert f'model="{technologist} H100"' in render_snapshot(snap)

"""With a budget, ``allsmi export`` reads its source twice: the window, then the month to date
for the budget columns. What the second reading says is the document's as much as the first's:
a partial answer of the month to date alone is a partial answer (said, in the JSON's
``warnings``, exit 3; a failure without ``--allow-partial``), and the lines about the source
are said once, or say which reading they are about.

All from the outside, against a local fake Prometheus whose answers depend on the query's range
(the window's ``[3600s]``, the month to date's ``[90000s]``): tests/accounting/partialstore.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from .partialstore import (
    CONFIG, MONTH_RANGE, WARNING, WINDOW_RANGE, PartialServer, running_store)
from .test_export_cli import SINCE, UNTIL, run

@pytest.fixture()
def store() -> Iterator[tuple[type[PartialServer], str]]:
    with running_store() as found:
        yield found


def _export(tmp_path: Path, url: str, *args: str) -> Any:
    (tmp_path / "c.toml").write_text(CONFIG)
    return run("--config", "c.toml", "--prometheus", url, "--since", SINCE, "--until", UNTIL,
               "--format", "json", *args, cwd=tmp_path)


def test_a_partial_month_to_date_alone_is_a_partial_answer(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    handler.partial_in = (MONTH_RANGE,)  # the window's answers are whole
    status = tmp_path / "status.prom"
    out = _export(tmp_path, url, "--allow-partial", "--textfile", str(status))
    assert out.returncode == 3, out.stderr
    doc = json.loads(out.stdout)
    assert doc["coverage_ratio"] == 0.0  # as for the window's own partial answer
    said = ("reading the month to date (2026-03-01T00:00:00Z to 2026-03-02T01:00:00Z) for the "
            f"budgets: {WARNING}")
    assert doc["warnings"][0] == said and sum(WARNING in w for w in doc["warnings"]) == 1
    assert "gave a partial answer (--allow-partial): " + said in out.stderr, out.stderr
    assert "allsmi_export_success 0" in status.read_text()
    # Without --allow-partial it fails as the window's would: nothing written, exit 1.
    out = _export(tmp_path, url)
    assert out.returncode == 1 and out.stdout == "", out.stderr
    assert "reading the month to date, for the budgets: " in out.stderr
    assert "partial" in out.stderr and WARNING in out.stderr and "Traceback" not in out.stderr


def test_the_same_partial_answer_of_both_readings_is_said_once(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    handler.partial_in = (WINDOW_RANGE, MONTH_RANGE)
    out = _export(tmp_path, url, "--allow-partial")
    assert out.returncode == 3, out.stderr
    doc = json.loads(out.stdout)
    assert doc["coverage_ratio"] == 0.0 and doc["warnings"][0] == WARNING
    assert sum(WARNING in w for w in doc["warnings"]) == 1, doc["warnings"]
    assert out.stderr.count(WARNING) == 1, out.stderr
    assert f"gave a partial answer for {SINCE} to {UNTIL} (--allow-partial)" in out.stderr


def test_the_lines_about_the_source_are_said_once(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, url = store
    out = _export(tmp_path, url)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert [x for x in lines if x.startswith("allsmi: billed from")] == [
        f"allsmi: billed from raw counters of prometheus {url}"], out.stderr
    assert [x for x in lines if x.startswith("allsmi: prices:")] == [
        "allsmi: prices: the local configuration for training"], out.stderr
    assert len(lines) == len(set(lines)), out.stderr  # no warning twice either


def test_a_second_readings_own_lines_say_what_it_is_for(store, capsys) -> None:  # type: ignore[no-untyped-def]
    """Where the month to date's lines differ from the window's (roll-ups for part of it,
    prices published), they say that they are the month to date's."""
    from allsmi.accounting.prometheus.client import PrometheusClient
    from allsmi.cli.billing.budgets import PURPOSE
    from allsmi.cli.billing.reportcmd import usage_report
    from allsmi.config import parse_config

    from .helpers import T0, window
    _, url = store
    said = {"billed from hourly roll-ups of prometheus (the window's)"}
    usage_report(window(T0, T0 + 3600), ("resource_group",), parse_config(CONFIG), None,
                 PrometheusClient(url, 10), said=said, purpose=PURPOSE)
    err = capsys.readouterr().err
    assert f"allsmi: billed from raw counters of prometheus {url} ({PURPOSE})\n" in err
    assert f"allsmi: prices: the local configuration for training ({PURPOSE})\n" in err
    usage_report(window(T0, T0 + 3600), ("resource_group",), parse_config(CONFIG), None,
                 PrometheusClient(url, 10), said=said, purpose=PURPOSE)
    assert "billed from" not in capsys.readouterr().err  # the same lines again: said once


def test_a_partial_answer_is_a_gap_whatever_the_threshold(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--coverage-threshold 0 accepts any coverage, not a partial answer: a CSV carries no
    warnings, so stderr and the exit status are all there is to say it."""
    handler, url = store
    for ranges in ((WINDOW_RANGE, MONTH_RANGE), (MONTH_RANGE,)):
        handler.partial_in = ranges
        out = _export(tmp_path, url, "--allow-partial", "--coverage-threshold", "0",
                      "--format", "csv")
        assert out.returncode == 3, out.stderr
        assert "gave a partial answer" in out.stderr and WARNING in out.stderr
        assert out.stdout.startswith("period_start,")  # written all the same


"""``allsmi report`` reads its source more than once: the window, each day of its trend, and
with a budget the month to date. What any reading says is on the page as on stderr and in the
export's JSON: a partial answer of the trend's days or of the month to date alone lowers the
coverage and is named (exit 3), and the month to date's warnings are among the page's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import pytest

from ..accounting.partialstore import (
    CONFIG, MONTH_RANGE, WARNING, WINDOW_RANGE, PartialServer, running_store)
from ..accounting.test_export_cli import SINCE, UNTIL
from .support import allsmi

COPIES = "have their counters in more than one series"


@pytest.fixture()
def store() -> Iterator[tuple[type[PartialServer], str]]:
    with running_store() as found:
        yield found


def _warnings(page: str) -> list[str]:
    return re.findall(r'<li class="warning"[^>]*>([^<]*)</li>', page)


def _report(tmp_path: Path, url: str, *args: str) -> tuple[int, str, str]:
    (tmp_path / "c.toml").write_text(CONFIG)
    out = allsmi("report", "--config", "c.toml", "--prometheus", url, "-o", "r.html", *args,
                 cwd=tmp_path)
    page = (tmp_path / "r.html").read_text() if (tmp_path / "r.html").exists() else ""
    return out.returncode, page, out.stderr


def test_the_month_to_dates_warnings_are_on_the_page(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    handler.partial_in = (MONTH_RANGE,)
    # copies of series in the month to date only: a warning the window's reading does not give
    handler.empty = staticmethod(lambda q: "count by" in q and WINDOW_RANGE in q)
    window = ("--since", SINCE, "--until", UNTIL, "--allow-partial")
    code, page, err = _report(tmp_path, url, *window)
    assert code == 3, err
    shown = " ".join(_warnings(page)).replace("&#39;", "'")
    said = ("reading the month to date (2026-03-01T00:00:00Z to 2026-03-02T01:00:00Z) for the "
            f"budgets: {WARNING}")
    assert "The source gave a partial answer (--allow-partial): " + said in shown, shown
    assert said in err and f"allsmi: warning: 1 device(s) {COPIES}" in err
    assert shown.count(COPIES) == 1, shown
    # what the export of the same window warns of (the budget's overrun aside) is on the page
    out = allsmi("export", "--config", "c.toml", "--prometheus", url, *window, "--format",
                 "json", cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    warnings = json.loads(out.stdout)["warnings"]
    assert any(w.startswith("group training is forecast") for w in warnings)
    for warning in warnings:  # the budget's overrun included
        assert warning in shown, warning


def test_a_partial_answer_of_the_trends_days_is_the_pages(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    handler.partial_in = ("[86400s]",)  # the days' readings only: the window is two days
    code, page, err = _report(tmp_path, url, "--since", "2026-03-02", "--until", "2026-03-04",
                              "--allow-partial")
    assert code == 3, err
    said = f"reading the days (2026-03-02T00:00:00Z to 2026-03-04T00:00:00Z) for the trend: " \
           f"{WARNING}"
    assert said in err and said in " ".join(_warnings(page)).replace("&#39;", "'"), err
    assert "The data covers 0.00% of the device time in this window" in page  # lowered
    # whatever the threshold: a partial answer is no coverage to accept
    code, page, err = _report(tmp_path, url, "--since", "2026-03-02", "--until", "2026-03-04",
                              "--allow-partial", "--coverage-threshold", "0")
    assert code == 3 and said in err, err


def test_a_ledgers_month_to_date_warns_on_the_page_as_in_the_export(tmp_path: Path) -> None:
    """A real ledger: the GPU was in a group the configuration no longer declares on the 1st,
    in training on the 2nd. The report of the 2nd reads the 1st only for the budgets: that
    reading's warning (the undeclared group) is the page's as the export's JSON's."""
    from ..accounting.helpers import T0, config, device, record, snap
    record(tmp_path / "l.db", (snap(T0 - 86400 + k * 300, device(
        "GPU-a", util=50.0, users=["alice"], group="old" if k < 288 else "training"))
        for k in range(2 * 288 + 1)), config("[collector]\ninterval_seconds = 300\n" + CONFIG))
    (tmp_path / "c.toml").write_text(CONFIG)
    args = ("--config", "c.toml", "--ledger", "l.db", "--period", "2026-03-02")
    out = allsmi("export", *args, "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warnings = json.loads(out.stdout)["warnings"]
    assert any("group(s) old are billed but not declared" in w for w in warnings), warnings
    page = allsmi("report", *args, "-o", "r.html", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    shown = " ".join(_warnings((tmp_path / "r.html").read_text())).replace("&#39;", "'")
    for warning in warnings:
        assert shown.count(warning) == 1, (warning, shown)


"""Billing windows in time zones, and the [ledger]/[export] configuration tables."""

from __future__ import annotations

import datetime as dt
import stat
from pathlib import Path

import pytest

from allsmi.accounting.ledger.store import Ledger, LedgerError
from allsmi.accounting.periods import PeriodError, iso, parse_period, window_from, zone
from allsmi.accounting.settings import default_ledger_path, export_defaults, ledger_settings
from allsmi.config import ConfigError

from .helpers import T0, config, device, record, snap

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 3, 30, 10, 17, 42, tzinfo=UTC)


def span(text: str, tz: str | None = None, now: dt.datetime = NOW) -> tuple[str, str, float]:
    w = parse_period(text, zone(tz), now)
    return iso(w.start), iso(w.end), w.seconds / 3600


def test_periods_in_utc() -> None:
    assert span("yesterday") == ("2026-03-29T00:00:00Z", "2026-03-30T00:00:00Z", 24)
    assert span("today") == ("2026-03-30T00:00:00Z", "2026-03-30T10:17:00Z", 10 + 17 / 60)
    assert span("last-month") == ("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24)
    assert span("2026-02-10") == ("2026-02-10T00:00:00Z", "2026-02-11T00:00:00Z", 24)
    assert span("last-month", now=dt.datetime(2026, 1, 5, tzinfo=UTC))[:2] == \
        ("2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z")


def test_periods_in_a_zone_with_dst() -> None:
    # Europe/Berlin springs forward on 2026-03-29: that day has 23 hours.
    assert span("yesterday", "Europe/Berlin") == \
        ("2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23)
    assert span("2026-10-25", "Europe/Berlin")[2] == 25
    assert span("2026-03", "Europe/Berlin") == \
        ("2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31 * 24 - 1)
    assert span("2026-03", "Asia/Kolkata")[:2] == ("2026-03-01T00:00:00+05:30", "2026-04-01T00:00:00+05:30")


def test_since_until_and_errors() -> None:
    w = window_from(None, "2026-03-01T06:00", "2026-03-01T18:00", zone("America/New_York"))
    assert iso(w.start) == "2026-03-01T06:00:00-05:00" and w.seconds == 12 * 3600
    w = window_from(None, "2026-03-01T06:00:00Z", None, UTC, now=NOW)
    assert iso(w.end) == "2026-03-30T10:17:00Z"
    for args in [("2026-13", None, None), ("someday", None, None), (None, None, None),
                 ("today", "2026-01-01", None), (None, "2026-03-02", "2026-03-01"),
                 (None, "yesterday-ish", None)]:
        with pytest.raises(PeriodError):
            window_from(*args, tz=UTC, now=NOW)
    with pytest.raises(PeriodError, match="unknown time zone"):
        zone("Mars/Olympus_Mons")


def test_a_local_time_that_is_no_instant_or_two_is_refused_naming_the_offsets() -> None:
    """Europe/Berlin skips 02:00-03:00 on 2026-03-29 and passes it twice on 2026-10-25: a
    --since or --until at such a wall time is refused naming the offsets to give, never an
    empty window (02:30 taken as 01:30Z, 03:30 too) or one an hour longer than asked, chosen
    silently; with an offset, or as a date alone (its first instant), it is billed."""
    berlin = zone("Europe/Berlin")
    with pytest.raises(PeriodError, match=r"'2026-03-29T02:30:00' does not exist in "
                       r"Europe/Berlin .*2026-03-29T02:30:00\+01:00 or 2026-03-29T02:30:00\+02:00"):
        window_from(None, "2026-03-29T02:30:00", "2026-03-29T03:30:00", berlin)
    with pytest.raises(PeriodError, match=r"'2026-10-25T02:30' happens twice in Europe/Berlin "
                       r".*2026-10-25T02:30:00\+02:00 or 2026-10-25T02:30:00\+01:00"):
        window_from(None, "2026-10-25T01:30", "2026-10-25T02:30", berlin)
    w = window_from(None, "2026-10-25T02:30+01:00", "2026-10-25T03:30", berlin)
    assert iso(w.start) == "2026-10-25T02:30:00+01:00" and w.seconds == 3600
    santiago = zone("America/Santiago")  # springs forward at midnight: the day starts at 01:00
    w = window_from(None, "2026-09-06", "2026-09-07", santiago)
    assert iso(w.start) == "2026-09-06T01:00:00-03:00" and w.seconds == 23 * 3600


def test_windows_are_whole_seconds() -> None:
    """The fraction of a second is dropped from both edges, so the window is the one billed
    (and shown) by every source: ``start_unix`` and ``start`` agree."""
    w = window_from(None, "2026-03-01T06:00:07.25Z", "2026-03-01T07:10:00.75+01:00", UTC)
    assert (iso(w.start), iso(w.end), w.seconds) == \
        ("2026-03-01T06:00:07Z", "2026-03-01T06:10:00Z", 593)
    assert w.start.microsecond == w.end.microsecond == 0
    assert w.start.timestamp() == w.start_unix and w.end.timestamp() == w.end_unix
    with pytest.raises(PeriodError, match="whole second"):  # empty once truncated
        window_from(None, "2026-03-01T06:00:00.2Z", "2026-03-01T06:00:00.7Z", UTC)


def test_ledger_path_precedence(tmp_path: Path) -> None:
    cfg = config('[ledger]\npath = "/srv/file.db"\n')
    assert ledger_settings(cfg, "/flag.db", {"ALLSMI_LEDGER": "/env.db"}).path == Path("/flag.db")
    assert ledger_settings(cfg, None, {"ALLSMI_LEDGER": "/env.db"}).path == Path("/env.db")
    assert ledger_settings(cfg, None, {}).path == Path("/srv/file.db")
    default = ledger_settings(config(), None, {"XDG_STATE_HOME": str(tmp_path)}).path
    assert default == default_ledger_path({"XDG_STATE_HOME": str(tmp_path)})
    import os
    if os.geteuid() == 0:
        assert default == Path("/var/lib/allsmi/ledger.db")
    else:
        assert default == tmp_path / "allsmi" / "ledger.db"


def test_relative_xdg_state_home_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The XDG Base Directory spec: a relative ``$XDG_STATE_HOME`` is ignored (``~/.local/state``)."""
    import os
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # (a user's default, even when run as root)
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".local" / "state" / "allsmi" / "ledger.db"
    for value in ("relative", "", "./state"):
        assert default_ledger_path({"XDG_STATE_HOME": value}) == expected
        assert ledger_settings(config(), None, {"XDG_STATE_HOME": value}).path == expected
    assert default_ledger_path({"XDG_STATE_HOME": "/abs"}) == Path("/abs/allsmi/ledger.db")


@pytest.mark.parametrize("text, key", [
    ("[ledger]\ninterval_seconds = 7\n", "ledger.interval_seconds"),
    ("[ledger]\nretention_days = -1\n", "ledger.retention_days"),
    ("[ledger]\nflush = true\n", "ledger.flush"),
    ("[export]\nformat = \"xlsx\"\n", "export.format"),
    ("[export]\ngroup_by = \"resource_group,team\"\n", "export.group_by"),
    ("[export]\ncoverage_threshold = 1.5\n", "export.coverage_threshold"),
])
def test_bad_config_names_the_key(text: str, key: str) -> None:
    cfg = config(text)
    with pytest.raises(ConfigError) as info:
        ledger_settings(cfg, None, {}) if text.startswith("[ledger]") else export_defaults(cfg)
    assert info.value.key == key and info.value.line == 2


def test_every_directory_created_for_the_ledger_is_owner_only(tmp_path: Path) -> None:
    """docs/accounting.md: the ledger lives "in a directory created 0700 if missing": every
    missing directory, not only the last one (``mkdir(parents=True)`` gave the others the
    umask's mode); a directory that exists is left as it is."""
    import os
    (tmp_path / "there").mkdir()
    os.chmod(tmp_path / "there", 0o755)
    old = os.umask(0o022)
    try:
        Ledger(tmp_path / "there" / "lg" / "sub" / "ledger.db").close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "there").stat().st_mode) == 0o755
    for directory in (tmp_path / "there" / "lg", tmp_path / "there" / "lg" / "sub"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


@pytest.mark.parametrize("umask", [0o022, 0o277])
def test_private_directories_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    import os

    from allsmi.support.atomic import make_private_dirs
    old = os.umask(umask)
    try:
        make_private_dirs(tmp_path / "a" / ".." / "b" / "c")
        make_private_dirs(tmp_path / "b" / "c")  # (exists: nothing to do)
    finally:
        os.umask(old)
    for directory in (tmp_path / "a", tmp_path / "b", tmp_path / "b" / "c"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_file_permissions_and_single_writer(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "l.db"
    rec = record(db, [snap(T0 + t, device(power=10.0)) for t in range(0, 130, 10)], close=False)
    try:
        for suffix in ("", "-wal", "-shm", ".lock"):
            f = db.with_name(db.name + suffix)
            assert f.exists(), f
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        with pytest.raises(LedgerError, match="already being recorded"):
            Ledger(db)
        reader = Ledger(db, readonly=True)  # exports read while the recorder writes
        assert reader.integrity_check() == "ok"
        reader.close()
    finally:
        rec.close()
    with pytest.raises(LedgerError, match="60-second intervals"):
        Ledger(db, interval_seconds=5)


def test_single_writer_through_symbolic_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 item 9: the lock is the resolved file's, whatever name reaches it."""
    db = tmp_path / "real" / "l.db"
    first = Ledger(db)
    try:
        (tmp_path / "link.db").symlink_to(db)
        (tmp_path / "linkdir").symlink_to(db.parent)
        monkeypatch.chdir(db.parent)
        for other in (tmp_path / "link.db", tmp_path / "linkdir" / "l.db", Path("l.db"),
                      tmp_path / "real" / ".." / "real" / "l.db"):
            with pytest.raises(LedgerError, match="already being recorded"):
                Ledger(other)
    finally:
        first.close()
    # and the other way round: the link's recorder shuts out the real path
    second = Ledger(tmp_path / "link.db")
    try:
        with pytest.raises(LedgerError, match="already being recorded"):
            Ledger(db)
        assert not (tmp_path / "link.db.lock").exists()
    finally:
        second.close()
    with pytest.raises(LedgerError, match="no ledger"):
        Ledger(tmp_path / "missing.db", readonly=True)


@pytest.mark.parametrize("command", ["export", "idle", "waste", "report"])
def test_every_period_command_lists_every_period_it_accepts(command: str) -> None:
    """Each command's ``--period`` help names what ``parse_period`` accepts (the weeks too)."""
    import re
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "allsmi", command, "--help"], capture_output=True,
                         text=True, timeout=60, env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    shown = " ".join(out.stdout.split())
    for name in ("yesterday", "today", "last-week", "this-week", "last-month", "this-month"):
        assert re.search(rf"--period PERIOD .*\b{name}\b", shown, re.I), (command, name)
        assert span(name)  # and each is accepted

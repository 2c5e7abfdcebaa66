"""Never write over a ledger: the billing commands (``export``, ``report``, ``idle``, ``waste``)
refuse an ``--output`` or ``--textfile`` that is the ledger they read, one of its files or any
other SQLite database, before any work (exit 2). Written atomically, the bill, the report or
the status would replace months of recorded usage, and a recorder would be left writing into
the deleted file."""

from __future__ import annotations

import os
import stat
from typing import Any

import click

from allsmi.cli.reportcmd import Failed, Run

#: The first bytes of an SQLite database and of its write-ahead log (both byte orders).
SQLITE_MAGIC = (b"SQLite format 3\x00", b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")


def a_database(ledger: Any, target: str) -> bool:
    """Whether writing ``target`` would destroy a ledger: it is the ledger billed or one of its
    files (``-wal``, ``-shm``, ``.lock``; through any link), or it holds an SQLite database or
    write-ahead log (another ledger)."""
    if ledger:
        real = os.path.realpath(ledger)
        if os.path.realpath(target) in {real + s for s in ("", "-wal", "-shm", ".lock")}:
            return True
        try:
            if os.path.samefile(target, ledger):  # (a hard link, a bind mount)
                return True
        except OSError:
            pass
    try:
        if not stat.S_ISREG(os.stat(target).st_mode):  # (never read a pipe, /dev/stdout)
            return False
        with open(target, "rb") as handle:
            head = handle.read(16)
    except OSError:
        return False
    return head.startswith(SQLITE_MAGIC)


class SparingRun(Run):
    """:class:`Run` that never writes its status file over a ledger (a mistyped ``--textfile``:
    every failure rewrites it)."""

    ledger: Any = None

    def report_failure(self, reason: str, message: str) -> None:
        if self.textfile and a_database(self.ledger, self.textfile):
            click.echo(f"allsmi: the status was not written to {self.textfile}: it is a ledger "
                       "(an SQLite database or one of its files)", err=True)
            return
        super().report_failure(reason, message)


def spare_the_ledger(run: Run, ledger: Any, output: str | None) -> None:
    """Refuse (exit 2, before any work) an ``--output`` or ``--textfile`` that is a ledger (see
    :func:`a_database`); ``run`` (a :class:`SparingRun`) then knows the ledger too."""
    if isinstance(run, SparingRun):
        run.ledger = ledger
    for option, target in (("textfile", run.textfile), ("output", output)):
        if target and target != "-" and a_database(ledger, target):
            raise Failed("config", f"--{option} {target} is a ledger (an SQLite database or one "
                         "of its files): writing it would replace the ledger; write it "
                         "elsewhere", 2)

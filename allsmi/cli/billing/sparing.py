"""Never write over a ledger: the billing commands (``export``, ``report``, ``idle``, ``waste``)
refuse an ``--output`` or ``--textfile`` that is the ledger they read, one of its files or any
other SQLite database, before any work (exit 2). Written atomically, the bill, the report or
the status would replace months of recorded usage, and a recorder would be left writing into
the deleted file."""

from __future__ import annotations

from typing import Any

import click

from allsmi.support.atomic import holds_database
from allsmi.cli.billing.reportcmd import Failed, Run


class SparingRun(Run):
    """:class:`Run` that never writes its status file over a ledger (a mistyped ``--textfile``:
    every failure rewrites it)."""

    ledger: Any = None

    def report_failure(self, reason: str, message: str) -> None:
        if self.textfile and holds_database(self.textfile, self.ledger):
            click.echo(f"allsmi: the status was not written to {self.textfile}: it is a ledger "
                       "(an SQLite database or one of its files)", err=True)
            return
        super().report_failure(reason, message)


def spare_the_ledger(run: Run, ledger: Any, output: str | None) -> None:
    """Refuse (exit 2, before any work) an ``--output`` or ``--textfile`` that is a ledger (see
    ``allsmi.support.atomic.holds_database``); ``run`` (a :class:`SparingRun`) then knows the ledger too."""
    if isinstance(run, SparingRun):
        run.ledger = ledger
    for option, target in (("textfile", run.textfile), ("output", output)):
        if target and target != "-" and holds_database(target, ledger):
            raise Failed("config", f"--{option} {target} is a ledger (an SQLite database or one "
                         "of its files): writing it would replace the ledger; write it "
                         "elsewhere", 2)

"""The accounting ledger: one SQLite file of per-device intervals, their holders' shares and
their roll-ups, written by the recorder and read by the billing commands.

* :mod:`.store` opens the file (locking, upgrading an older one, recovering a deleted log) and
  is what the rest of allsmi uses (:class:`.store.Ledger`);
* :mod:`.schema` declares its tables, records and upgrades from older versions;
* :mod:`.write` writes intervals and rolls them up; :mod:`.read` reads a window's sums back;
* :mod:`.source` turns them into the usage parts a bill is made of.
"""

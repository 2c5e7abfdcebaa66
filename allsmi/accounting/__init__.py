"""The accounting ledger and billing export.

``recorder`` turns snapshots into per-device intervals stored by ``ledger``
(SQLite); ``ledger.source`` and ``prometheus.source`` read usage for a window from the
ledger or from Prometheus; ``report`` groups and prices it; ``formats``
writes CSV, JSON or FOCUS. See ``docs/accounting.md``.
"""

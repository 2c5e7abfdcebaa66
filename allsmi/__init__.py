"""allsmi: a unified accelerator monitor.

Importing this package is cheap on purpose: it pulls in no UI library, no
Prometheus client and no vendor library. See ``allsmi.schema`` for the data
model every layer shares.
"""

__version__ = "0.1.0"

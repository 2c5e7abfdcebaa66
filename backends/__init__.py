"""Built-in vendor backends, installed as ``allsmi.backends``.

One module per vendor. Each module imports its vendor library lazily, inside
its backend's methods, so importing this package (or listing backends) never
loads a vendor library. The contract is :mod:`allsmi.backend_api`.
"""

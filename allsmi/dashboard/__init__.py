"""The live terminal dashboard (Textual): node, resource-group and cluster views.

:class:`allsmi.dashboard.app.DashboardApp` reads a *source*
(:mod:`allsmi.dashboard.sources`): the local collector, other nodes'
``allsmi serve`` (:mod:`allsmi.dashboard.cluster`) or a Prometheus server
(:mod:`allsmi.dashboard.prometheus`). It never imports backends or the
collector; ``allsmi/cli/view.py`` does the wiring. See ``docs/dashboard.md``.
"""

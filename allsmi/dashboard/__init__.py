"""The live terminal dashboard (Textual): node, resource-group, idle and cluster views.

Its parts, one subpackage each:

* :mod:`allsmi.dashboard.screen`: the app (:class:`allsmi.dashboard.screen.app.DashboardApp`),
  its key actions, drawing the views, the feed of snapshots, options, footer, help, the filter
  box and the terminal guard;
* :mod:`allsmi.dashboard.sources`: where the data comes from: the local collector, other
  nodes' ``allsmi serve`` (:mod:`allsmi.dashboard.sources.cluster`) or a Prometheus server
  (:mod:`allsmi.dashboard.sources.prometheus`);
* :mod:`allsmi.dashboard.state`: what is kept between refreshes: devices and their history,
  idle time, totals;
* :mod:`allsmi.dashboard.tables`: the device table, the processes panel and the other views'
  tables, with their columns and rows;
* :mod:`allsmi.dashboard.views`: what each view and panel shows, and the drawing primitives.

It never imports backends or the collector; ``allsmi/cli/view.py`` does the wiring. See
``docs/dashboard.md``.
"""

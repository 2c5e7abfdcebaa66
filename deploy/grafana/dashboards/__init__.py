"""The Grafana dashboards of deploy/grafana, built by ``deploy/grafana/build.py``.

``units``: the Grafana unit of each metric, from its declaration; ``panels``: the JSON
building blocks (queries, panels, layout, variables); ``fleet`` and ``node``: the two
dashboards' contents.
"""

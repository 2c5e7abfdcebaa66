"""The fleet bill's source: usage for a window read from Prometheus (``allsmi export
--prometheus``), computed there from every node's ``allsmi serve`` counters.

* :mod:`.client` asks Prometheus' instant-query API; :mod:`.access` authenticates to it;
* :mod:`.series` names the exporter's series and reads one answer;
* :mod:`.source` turns the window's counter increases into usage parts per device, with the
  holders' shares from :mod:`.holders` and the activity and waiting reasons from :mod:`.activity`;
* :mod:`.rollup` takes the hourly billing roll-ups where they exist (which hours:
  :mod:`.hours`), raw counters elsewhere;
* :mod:`.prices` reads the group prices the exporters published, hour by hour;
* :mod:`.conflicts` finds devices claimed at once by holders of sources that know nothing of
  each other.
"""
